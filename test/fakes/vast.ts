import { CloudModel, type ModelMachine } from "../../src/sim/model";
import type { FakeService } from "./install";
import { FakeOllama } from "./ollama";
import { json, takeQueued, text } from "./respond";

/**
 * Vast.ai's REST API as docs/providers.md#vastai describes it, with one switch per
 * quirk (18-30 of the list) and fault injection per operation. Machines live in a CloudModel.
 */

export const VAST_FAKE_URL = "http://vast.fake";
export const VAST_FAKE_KEY = "vast-test-key-0123456789abcdef";
/** What `/users/current/` echoes as `api_key`: a secret that is not the key we call with. */
export const VAST_ECHOED_API_KEY = "vastmaster0f1e2d3c4b5a69788796a5b4c3d2e1f0";

export type VastOperation = "offers" | "create" | "show" | "destroy" | "list" | "user" | "charges";

export type VastFault =
  | { kind: "http"; status: 500 | 502 | 503 | 504 | 429; body?: string }
  /** never answers: the caller's timeout must end the call */
  | { kind: "hang" }
  | { kind: "malformed" }
  | { kind: "empty" }
  /** HTTP 200 carrying `{"success": false, ...}` */
  | { kind: "error200" }
  /** destroy: answered `{"success": true}`, nothing happens */
  | { kind: "ignore" }
  /** show: one read reports another status although nothing changed */
  | { kind: "flap"; as: "offline" | "loading" | "unknown" };

export interface VastFaultRule {
  fault: VastFault;
  times: number;
  /** carry the operation out first, then answer with the fault ("error but created") */
  afterEffect?: boolean;
}

export interface VastQuirks {
  /** 18: a deleted instance reads as 200 `{"instances": null}` or as 404 */
  deletedReadsAs: "null" | "404";
  /** 21: `ports` before running */
  portsBeforeRunning: "empty" | "null" | "absent";
  /** 21: `public_ipaddr` with surrounding whitespace */
  ipWhitespace: boolean;
  /** 23: this many next creates find their offer just rented by someone else */
  offerRace: { status: 404 | 410; times: number } | null;
  /** 24: creates answer an error that carries `new_contract` of a stopped instance */
  errorWithContract: boolean;
  /** 25: enforce Vast's per-endpoint minimum intervals (429, no Retry-After) */
  rateLimits: boolean;
  /** 25: the 429 body */
  rateLimitBody: "text" | "detail" | "json";
  /** 26: destroy of an instance that is gone */
  destroyGoneAs: "no_such_instance_200" | "no_such_instance_404" | "not_found_404";
  /** how an instance reads between an accepted destroy and its disappearance */
  lingerAs: "running" | "destroyed";
  /** 30: an empty v1 page is `{"instances": null}` */
  nullEmptyList: boolean;
  /** Ollama answers this long after the container runs */
  ollamaDelayMs: number;
  /**
   * A new instance shows in the v1 list only this long after its create (its own GET works at
   * once). Seen at RunPod (docs/providers.md#runpod-ambiguous-create); unconfirmed for Vast, off by default.
   */
  listingLagMs: number;
  /**
   * A new instance's own GET answers 200 `{"instances": null}` for this long after its create:
   * vast-cli's wait loops print "No information returned for instance … Retrying" and go on
   * (`vast.py` `wait_for_instance`, `vastai/cli/commands/machines.py`).
   */
  showLagMs: number;
  /** what Vast charges per instance, as a share of dph_total × its billed time (1 = the ledger's own count) */
  chargeFactor: number;
}

export const defaultVastQuirks = (): VastQuirks => ({
  deletedReadsAs: "null",
  portsBeforeRunning: "empty",
  ipWhitespace: false,
  offerRace: null,
  errorWithContract: false,
  rateLimits: false,
  rateLimitBody: "text",
  destroyGoneAs: "no_such_instance_404",
  lingerAs: "running",
  nullEmptyList: true,
  ollamaDelayMs: 0,
  listingLagMs: 0,
  showLagMs: 0,
  chargeFactor: 1,
});

/** One offer as `/bundles/` sends it (only the fields the fake needs typed). */
export interface VastFakeOffer {
  id: number;
  gpu_name: string;
  num_gpus: number;
  gpu_ram: number;
  gpu_total_ram: number;
  gpu_mem_bw: number;
  compute_cap: number;
  cuda_max_good: number;
  inet_down: number;
  inet_down_cost: number;
  dph_base: number;
  storage_cost: number;
  /** GB the host has free for a container disk */
  disk_space: number;
  direct_port_count: number;
  geolocation: string | null;
  verification: "verified" | "unverified";
  rentable: boolean;
  rented: boolean;
  external: boolean;
  [field: string]: unknown;
}

/** One offer as `/bundles/` lists it, with the fields a test does not care about filled in. */
export const vastOffer = (
  id: number,
  gpu_name: string,
  num_gpus: number,
  gpuRamMb: number,
  dph_base: number,
  extra: Partial<VastFakeOffer> = {},
): VastFakeOffer => ({
  id,
  ask_contract_id: id,
  machine_id: 30000 + (id % 1000),
  host_id: 88000 + (id % 100),
  gpu_name,
  num_gpus,
  gpu_ram: gpuRamMb,
  gpu_total_ram: gpuRamMb * num_gpus,
  gpu_mem_bw: 916.1,
  gpu_arch: "nvidia",
  compute_cap: 890,
  cuda_max_good: 12.8,
  inet_down: 904.2,
  inet_up: 712.5,
  inet_down_cost: 0.003,
  inet_up_cost: 0.003,
  dph_base,
  storage_cost: 0.2,
  disk_space: 1024,
  direct_port_count: 24,
  reliability2: 0.9962,
  geolocation: "Oregon, US",
  verification: "verified",
  rentable: true,
  rented: false,
  external: false,
  is_bid: false,
  public_ipaddr: "203.0.113.42",
  ...extra,
});

/** A catalogue with the cards that matter for the quirks: mining and old cards, MB units, multi-GPU. */
export const defaultVastOffers = (): VastFakeOffer[] => [
  vastOffer(18463529, "RTX 4090", 1, 24564, 0.35),
  vastOffer(18463530, "RTX 3090", 1, 24576, 0.18, {
    gpu_mem_bw: 0,
    inet_down: 9000,
    compute_cap: 860,
    geolocation: null,
  }),
  vastOffer(18463531, "CMP 170HX", 1, 8192, 0.05, { gpu_mem_bw: 1493, compute_cap: 800 }),
  vastOffer(18463532, "Tesla P100", 1, 16384, 0.08, { gpu_mem_bw: 732, compute_cap: 600, cuda_max_good: 12.2 }),
  vastOffer(18463533, "GTX 1080 Ti", 1, 11264, 0.06, { compute_cap: 610 }),
  vastOffer(18463534, "H100 SXM", 2, 81559, 3.8, {
    gpu_mem_bw: 3350.2,
    compute_cap: 900,
    inet_down: 4800,
    geolocation: "Texas, US",
  }),
  vastOffer(18463535, "A100 PCIE", 1, 40960, 0.7, { gpu_mem_bw: 1555, compute_cap: 800, geolocation: "Quebec, CA" }),
  vastOffer(18463536, "RTX 4090", 1, 24564, 0.3, { verification: "unverified" }),
  vastOffer(18463537, "RTX 5090", 1, 32607, 0.55, { gpu_mem_bw: 1792, compute_cap: 1200, rented: true }),
];

interface VastMeta {
  askId: number;
  image: string;
  env: Record<string, string>;
  onstart: string | null;
  args: string[] | null;
  gpuName: string;
  gpuRamMb: number;
  publicIp: string;
  /** container port -> external port (a string on the wire) */
  hostPorts: Record<string, string>;
  sshPort: number;
  /** actual_status after a failed start: "created" (OCI error), "exited", "unknown", "offline" */
  failStatus: string;
  /** actual_status after an exit nobody asked for; "stopped" = outbid */
  exitStatus: string;
}

export interface PlantVastInstance {
  label: string | null;
  gpuName?: string;
  numGpus?: number;
  dph?: number;
  image?: string;
  bootMs?: number;
  ports?: number[];
  failStart?: string | null;
  failStatus?: string;
  /** the container's environment (GPULEASE_MODEL makes its Ollama pull and load that model) */
  env?: Record<string, string>;
}

export interface RecordedRequest {
  method: string;
  url: string;
  path: string;
  authorization: string | null;
  userAgent: string | null;
  body: unknown;
}

/** Minimum intervals per endpoint (vast-docs x-rate-limit), ms. */
const RATE_INTERVAL_MS: Partial<Record<VastOperation, number>> = {
  create: 4500,
  show: 2000,
  destroy: 3000,
  list: 1000,
};

/**
 * Lockout after a request inside the interval (vast-ai/docs `create_instance.yaml` `x-rate-limit`
 * `penalty: 12`; the unit is not stated, read as seconds): every call until then is refused too.
 */
const RATE_PENALTY_MS: Partial<Record<VastOperation, number>> = { create: 12_000 };

/** Vast's create limits on `env` (vast-ai/docs `create_instance.yaml`). */
const ENV_VALUE_MAX = 256;
const ENV_TOTAL_MAX = 32_768;

const CONTROL_KEYS = new Set(["order", "type", "limit", "allocated_storage", "disable_bundling"]);

let instanceCounter = 27114906;
let addressCounter = 10;

export class VastFake implements FakeService {
  readonly model: CloudModel;
  readonly requests: RecordedRequest[] = [];
  quirks: VastQuirks = defaultVastQuirks();
  offers: VastFakeOffer[] = defaultVastOffers();
  readonly faults: Partial<Record<VastOperation, VastFaultRule[]>> = {};
  /** prepaid credit in USD */
  credit = 37.52;
  readonly apiKey: string;
  private readonly lastCall = new Map<VastOperation, number>();
  private readonly lockedUntil = new Map<VastOperation, number>();
  /** the Ollama server on each instance, at its public IP:port (switches: download speed, pull failure, spill) */
  readonly ollama: FakeOllama;

  constructor(options: { now?: () => number; bootMs?: number; lingerMs?: number; apiKey?: string } = {}) {
    this.model = new CloudModel({
      now: options.now ?? (() => Date.now()),
      bootMs: options.bootMs ?? 0,
      lingerMs: options.lingerMs ?? 0,
    });
    this.apiKey = options.apiKey ?? VAST_FAKE_KEY;
    this.ollama = new FakeOllama(
      {
        ids: () => this.model.list().map((m) => m.id),
        host: (id) => {
          const m = this.model.get(id);
          if (!m) return undefined;
          const meta = m.meta as unknown as VastMeta;
          const since = this.model.runningSince(id);
          return {
            upAt: since === null ? null : since + this.quirks.ollamaDelayMs,
            env: meta.env,
            gpus: { count: m.gpuCount, memoryMib: meta.gpuRamMb },
            image: meta.image,
          };
        },
      },
      this.model.now,
    );
  }

  /** Queues a fault for the next `times` calls of one operation. */
  inject(operation: VastOperation, fault: VastFault, times = 1, afterEffect = false): this {
    this.faults[operation] ??= [];
    this.faults[operation].push({ fault, times, afterEffect });
    return this;
  }

  /** Puts an instance in place as if someone rented it earlier (an orphan, a user's own machine). */
  plant(input: PlantVastInstance): ModelMachine {
    const ports = input.ports ?? [11434];
    const env: Record<string, string> = {
      ...input.env,
      ...Object.fromEntries(ports.map((p) => [`-p ${p}:${p}`, "1"])),
    };
    return this.createInstance({
      askId: 0,
      label: input.label,
      image: input.image ?? "ollama/ollama:latest",
      env,
      onstart: null,
      args: null,
      gpuName: input.gpuName ?? "RTX 4090",
      numGpus: input.numGpus ?? 1,
      gpuRamMb: 24564,
      dph: input.dph ?? 0.3611,
      bootMs: input.bootMs,
      failStart: input.failStart ?? null,
      failStatus: input.failStatus ?? "created",
    });
  }

  plantOrphan(label: string): ModelMachine {
    return this.plant({ label });
  }

  plantUnlabelled(): ModelMachine {
    return this.plant({ label: null });
  }

  /** The instance's Ollama base URL as the real host publishes it. */
  ollamaUrl(id: string): string {
    const m = this.model.get(id);
    if (!m) throw new Error(`no instance ${id}`);
    const meta = m.meta as unknown as VastMeta;
    return `http://${meta.publicIp}:${meta.hostPorts["11434"]}`;
  }

  handles(url: URL): boolean {
    return url.origin === VAST_FAKE_URL || this.byAddress(url) !== undefined;
  }

  async handle(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const machine = this.byAddress(url);
    if (machine) {
      const since = this.model.runningSince(machine.id);
      const listening =
        this.model.state(machine.id) === "running" &&
        since !== null &&
        this.model.now() >= since + this.quirks.ollamaDelayMs;
      return listening ? this.ollama.serve(request, machine.id) : text("Bad Gateway", 502);
    }
    const raw = request.method === "GET" || request.method === "HEAD" ? "" : await request.text();
    let body: unknown;
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      body = raw;
    }
    this.requests.push({
      method: request.method,
      url: request.url,
      path: url.pathname,
      authorization: request.headers.get("Authorization"),
      userAgent: request.headers.get("User-Agent"),
      body,
    });
    const route = this.route(request.method, url.pathname);
    // No route: the web framework's own HTML 404 (exact page unconfirmed), never Vast's JSON
    // not_found, which would read as "instance gone" (docs/providers.md#teardown-evidence).
    if (!route) return new Response(NOT_FOUND_PAGE, { status: 404, headers: { "Content-Type": "text/html" } });
    const { operation, id } = route;
    // Offer search works without a key (gpuhunt calls it bare); everything else needs one.
    if (operation !== "offers" && !this.authorised(request, url)) {
      return json({ success: false, error: "auth_error", msg: "Invalid user key" }, 401);
    }
    if (this.quirks.rateLimits) {
      const limited = this.rateLimit(operation);
      if (limited) return limited;
    }
    const rule = this.takeFault(operation);
    if (rule && !rule.afterEffect) {
      const answer = await this.faultResponse(rule.fault, operation, request, id);
      if (answer) return answer;
    }
    const response = this.perform(operation, id, url, body);
    if (rule?.afterEffect) {
      const answer = await this.faultResponse(rule.fault, operation, request, id);
      if (answer) return answer;
    }
    return response;
  }

  private route(method: string, path: string): { operation: VastOperation; id: string | null } | null {
    if (method === "POST" && path === "/api/v0/bundles/") return { operation: "offers", id: null };
    if (method === "GET" && path === "/api/v0/users/current/") return { operation: "user", id: null };
    if (method === "GET" && path === "/api/v1/instances/") return { operation: "list", id: null };
    if (method === "GET" && path === "/api/v0/charges/") return { operation: "charges", id: null };
    const ask = /^\/api\/v0\/asks\/(\d+)\/$/.exec(path);
    if (method === "PUT" && ask?.[1]) return { operation: "create", id: ask[1] };
    const instance = /^\/api\/v0\/instances\/(\d+)\/$/.exec(path);
    if (method === "GET" && instance?.[1]) return { operation: "show", id: instance[1] };
    if (method === "DELETE" && instance?.[1]) return { operation: "destroy", id: instance[1] };
    return null;
  }

  private authorised(request: Request, url: URL): boolean {
    // Vast also accepts ?api_key= (the docs); gpulease must never use it, tests check the URLs.
    return (
      request.headers.get("Authorization") === `Bearer ${this.apiKey}` ||
      url.searchParams.get("api_key") === this.apiKey
    );
  }

  private rateLimit(operation: VastOperation): Response | null {
    const interval = RATE_INTERVAL_MS[operation];
    if (interval === undefined) return null;
    const now = this.model.now();
    const last = this.lastCall.get(operation);
    const locked = now < (this.lockedUntil.get(operation) ?? 0);
    if (locked || (last !== undefined && now - last < interval)) {
      const penalty = RATE_PENALTY_MS[operation];
      if (penalty !== undefined && !locked) this.lockedUntil.set(operation, now + penalty);
      const threshold = (interval / 1000).toFixed(1);
      // No Retry-After, whatever the body (docs/providers.md#vast-rate-limits).
      switch (this.quirks.rateLimitBody) {
        case "text":
          return text(`API requests too frequent: endpoint threshold=${threshold}`, 429);
        case "detail":
          return json({ detail: `API requests too frequent endpoint threshold=${threshold}` }, 429);
        case "json":
          return json(
            {
              success: false,
              error: "rate_limit_exceeded",
              msg: `API requests too frequent endpoint threshold=${threshold}`,
            },
            429,
          );
      }
    }
    this.lastCall.set(operation, now);
    return null;
  }

  private takeFault(operation: VastOperation): VastFaultRule | null {
    return takeQueued(this.faults[operation]);
  }

  /** The answer for a fault, or null when the fault only changes what the operation does. */
  private async faultResponse(
    fault: VastFault,
    operation: VastOperation,
    request: Request,
    id: string | null,
  ): Promise<Response | null> {
    switch (fault.kind) {
      case "http":
        if (fault.status === 429) return text(fault.body ?? "API requests too frequent", 429);
        return text(fault.body ?? `<html><body>${fault.status} Server Error</body></html>`, fault.status);
      case "hang":
        return hang(request);
      case "malformed":
        return new Response('{"instances": {"id": 27', {
          status: 200,
          headers: { "Content-Type": "application/json" },
        });
      case "empty":
        return new Response("", { status: 200 });
      case "error200":
        return json({ success: false, error: "server_error", msg: "Internal error, please try again" });
      case "ignore":
        return operation === "destroy" ? json({ success: true }) : null;
      case "flap": {
        const m = id ? this.model.get(id) : undefined;
        if (operation !== "show" || !m) return null;
        const instance = this.instanceJson(m);
        return json({ instances: { ...instance, actual_status: fault.as, status_msg: null } });
      }
    }
  }

  private perform(operation: VastOperation, id: string | null, url: URL, body: unknown): Response {
    switch (operation) {
      case "offers":
        return this.search(body);
      case "create":
        return this.create(Number(id), body);
      case "show":
        return this.show(id ?? "");
      case "destroy":
        return this.destroy(id ?? "");
      case "list":
        return this.list(url);
      case "charges":
        return this.charges(url);
      case "user":
        return json({
          id: 424242,
          username: "ops",
          email: "ops@example.com",
          fullname: "Ops",
          credit: this.credit,
          balance: 0.0,
          balance_threshold: 5.0,
          balance_threshold_enabled: true,
          billed_expected: 0.0,
          can_pay: true,
          has_billing: true,
          ssh_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake",
          sid: "s-1",
          key_id: 991,
          // docs/providers.md#vast-account: the account's key comes back in the body.
          api_key: VAST_ECHOED_API_KEY,
        });
    }
  }

  private search(body: unknown): Response {
    if (!isObject(body)) return json({ success: false, error: "invalid_args", msg: "body must be a JSON object" }, 400);
    // docs/providers.md#vast-offers: the CLI says "on-demand", the docs' enum "ondemand"; both work.
    const type = body.type ?? "on-demand";
    if (!["on-demand", "ondemand", "bid", "reserved"].includes(String(type))) {
      return json({ success: false, error: "invalid_args", msg: `invalid type ${String(type)}` }, 400);
    }
    const storage = typeof body.allocated_storage === "number" ? body.allocated_storage : 5;
    const priced = this.offers.map((o) => ({
      ...o,
      dph_total: round4(o.dph_base + (o.storage_cost * storage) / 30 / 24),
      storage_total_cost: round4((o.storage_cost * storage) / 30 / 24),
    }));
    const matching = priced.filter((o) =>
      Object.entries(body).every(([field, filter]) => CONTROL_KEYS.has(field) || matchesFilter(o, field, filter)),
    );
    const order = Array.isArray(body.order) ? (body.order as [string, string][]) : [];
    for (const [field, direction] of [...order].reverse()) {
      const value = (row: Record<string, unknown>) => Number(row[field] ?? 0);
      matching.sort((a, b) => (value(a) - value(b)) * (direction === "desc" ? -1 : 1));
    }
    const limit = typeof body.limit === "number" ? body.limit : 64;
    return json({ offers: matching.slice(0, limit) });
  }

  private create(askId: number, body: unknown): Response {
    if (!isObject(body))
      return json({ success: false, error: "invalid_args", msg: "error 400/3467: Invalid args: body" }, 400);
    // docs/providers.md#vast-create: env must be an object; the "-e K=V" flag string of templates is refused here.
    if (body.env !== undefined && body.env !== null && (!isObject(body.env) || Array.isArray(body.env))) {
      return json(
        {
          success: false,
          error: "invalid_args",
          msg: "error 400/3467: Invalid args: env must be a dict",
          ask_id: askId,
        },
        400,
      );
    }
    if (isObject(body.env)) {
      const entries = Object.entries(body.env).map(([k, v]) => [k, String(v)] as const);
      const long = entries.find(([, v]) => v.length > ENV_VALUE_MAX);
      const total = entries.reduce((n, [k, v]) => n + k.length + v.length, 0);
      if (long || total > ENV_TOTAL_MAX) {
        const why = long ? `env ${long[0]} longer than ${ENV_VALUE_MAX}` : `env longer than ${ENV_TOTAL_MAX} in total`;
        return json(
          { success: false, error: "invalid_args", msg: `error 400/3467: Invalid args: ${why}`, ask_id: askId },
          400,
        );
      }
    }
    if (typeof body.image !== "string" || body.image === "") {
      return json(
        { success: false, error: "invalid_args", msg: "error 400/3467: Invalid args: image required", ask_id: askId },
        400,
      );
    }
    const listed = this.offers.find((o) => o.id === askId);
    const race = this.quirks.offerRace;
    if (race && race.times > 0) {
      race.times -= 1;
      if (listed) listed.rented = true;
      if (body.cancel_unavail !== true) {
        // docs/providers.md#vast-create: without cancel_unavail the taken offer yields a *stopped* instance, not an error.
        const stopped = this.fromAsk(askId, body, listed);
        this.model.exit(stopped.id, "scheduling failed");
        return json({ success: true, new_contract: Number(stopped.id) });
      }
      return race.status === 410
        ? json(
            {
              success: false,
              error: "no_such_ask",
              msg: `error 410/3907: no_such_ask Instance type ${askId} is no longer available.`,
              ask_id: askId,
            },
            410,
          )
        : json(
            {
              success: false,
              error: "invalid_args",
              msg: `error 404/3603: no_such_ask Instance type by id ${askId} is not available.`,
              ask_id: askId,
            },
            404,
          );
    }
    if (!listed || listed.rented || !listed.rentable) {
      return json(
        {
          success: false,
          error: "invalid_args",
          msg: `error 404/3603: no_such_ask Instance type by id ${askId} is not available.`,
          ask_id: askId,
        },
        404,
      );
    }
    const disk = Number(body.disk ?? 10);
    if (disk > listed.disk_space) {
      // A disk the host lacks is refused (exact msg unconfirmed); the search's disk_space filter keeps such hosts out.
      return json(
        {
          success: false,
          error: "invalid_args",
          msg: `error 400/3467: Invalid args: disk ${disk} exceeds the ${listed.disk_space} GB available`,
          ask_id: askId,
        },
        400,
      );
    }
    if (this.credit <= 0)
      return json({ success: false, error: "insufficient_credit", msg: "Your balance is too low" }, 400);
    if (this.quirks.errorWithContract) {
      // docs/providers.md#vast-create: the bid is refused, yet a stopped instance exists and bills for its disk.
      const stopped = this.fromAsk(askId, body, listed);
      this.model.exit(stopped.id, "insufficient bid");
      return json(
        {
          success: false,
          error: "invalid_price",
          msg: "error 400/3470: bid price too low",
          new_contract: Number(stopped.id),
          ask_id: askId,
        },
        400,
      );
    }
    const machine = this.fromAsk(askId, body, listed);
    listed.rented = true;
    // docs/providers.md#vast-create: the instance id is new_contract, never the offer id.
    return json({ success: true, new_contract: Number(machine.id), instance_api_key: "c0ffee0123456789" });
  }

  private fromAsk(askId: number, body: Record<string, unknown>, listed: VastFakeOffer | undefined): ModelMachine {
    const env = isObject(body.env)
      ? (Object.fromEntries(Object.entries(body.env).map(([k, v]) => [k, String(v)])) as Record<string, string>)
      : {};
    return this.createInstance({
      askId,
      label: typeof body.label === "string" ? body.label : null,
      image: String(body.image),
      env,
      onstart: typeof body.onstart === "string" ? body.onstart : null,
      args: Array.isArray(body.args) ? body.args.map(String) : null,
      gpuName: listed?.gpu_name ?? "RTX 4090",
      numGpus: listed?.num_gpus ?? 1,
      gpuRamMb: listed?.gpu_ram ?? 24564,
      dph: round4((listed?.dph_base ?? 0.35) + ((listed?.storage_cost ?? 0.2) * Number(body.disk ?? 10)) / 30 / 24),
      bootMs: undefined,
      failStart: null,
      failStatus: "created",
    });
  }

  private createInstance(input: {
    askId: number;
    label: string | null;
    image: string;
    env: Record<string, string>;
    onstart: string | null;
    args: string[] | null;
    gpuName: string;
    numGpus: number;
    gpuRamMb: number;
    dph: number;
    bootMs: number | undefined;
    failStart: string | null;
    failStatus: string;
  }): ModelMachine {
    const n = addressCounter++;
    const hostPorts: Record<string, string> = {};
    let external = 41200 + (n % 50) * 20;
    for (const key of Object.keys(input.env)) {
      const port = /^-p (\d+):(\d+)(\/tcp)?$/.exec(key)?.[2];
      // docs/providers.md#vast-instances: the external port is random, never the container's.
      if (port) hostPorts[port] = String(external++ + 7);
    }
    const meta: VastMeta = {
      askId: input.askId,
      image: input.image,
      env: input.env,
      onstart: input.onstart,
      args: input.args,
      gpuName: input.gpuName,
      gpuRamMb: input.gpuRamMb,
      publicIp: `198.51.100.${n % 250}`,
      hostPorts,
      sshPort: 14000 + (n % 1000),
      failStatus: input.failStatus,
      exitStatus: "stopped",
    };
    return this.model.create({
      id: String(instanceCounter++),
      label: input.label,
      offerKey: String(input.askId),
      gpuCount: input.numGpus,
      pricePerHour: input.dph,
      bootMs: input.bootMs,
      failStart: input.failStart,
      meta: meta as unknown as Record<string, unknown>,
    });
  }

  private show(id: string): Response {
    const m = this.model.get(id);
    const unseen = m !== undefined && this.model.now() < m.createdAt + this.quirks.showLagMs;
    if (!m || unseen || this.model.state(id) === "gone") {
      // docs/providers.md#vast-instances: usually 200 {"instances": null}; a 404 is possible too.
      return this.quirks.deletedReadsAs === "404"
        ? json({ success: false, error: "no_such_instance", msg: "Instance not found" }, 404)
        : json({ instances: null });
    }
    // docs/providers.md#vast-instances: one object under the plural key.
    return json({ instances: this.instanceJson(m) });
  }

  private destroy(id: string): Response {
    const outcome = this.model.terminate(id);
    if (outcome === "already_gone") {
      // docs/providers.md#vast-destroy: which of these the live API sends is unconfirmed.
      switch (this.quirks.destroyGoneAs) {
        case "no_such_instance_200":
          return json({ success: false, error: "no_such_instance", msg: "no such instance" });
        case "no_such_instance_404":
          return json({ success: false, error: "no_such_instance", msg: "no such instance" }, 404);
        case "not_found_404":
          return json({ success: false, error: "not_found", msg: "Instance not found" }, 404);
      }
    }
    return json({ success: true });
  }

  private list(url: URL): Response {
    const limit = Number(url.searchParams.get("limit") ?? "25");
    // docs/providers.md#vast-listing: at most 25 per page.
    if (!Number.isInteger(limit) || limit < 1 || limit > 25) {
      return json({ error: "invalid_request", msg: "Error in query parameters: limit must be between 1 and 25" }, 400);
    }
    let filters: Record<string, unknown> = {};
    const rawFilters = url.searchParams.get("select_filters");
    if (rawFilters) {
      try {
        const parsed: unknown = JSON.parse(rawFilters);
        if (!isObject(parsed)) throw new Error("not an object");
        filters = parsed;
      } catch {
        return json(
          { error: "invalid_request", msg: "Error in query parameters: select_filters is not valid JSON" },
          400,
        );
      }
    }
    const allowed = new Set(["label", "id", "actual_status", "gpu_name", "verification"]);
    for (const field of Object.keys(filters)) {
      if (!allowed.has(field))
        return json(
          { error: "invalid_request", msg: `Error in query parameters: ${field} is not a valid search key` },
          400,
        );
    }
    const listedBy = this.model.now() - this.quirks.listingLagMs;
    const all = this.model
      .list()
      .filter((m) => m.createdAt <= listedBy)
      .map((m) => this.instanceJson(m))
      .filter((instance) => Object.entries(filters).every(([field, filter]) => matchesFilter(instance, field, filter)));
    const token = url.searchParams.get("after_token");
    const offset = token ? Number(atob(token)) : 0;
    const page = all.slice(offset, offset + limit);
    const nextOffset = offset + limit;
    const labelCounts: Record<string, number> = {};
    for (const instance of all)
      labelCounts[String(instance.label ?? "")] = (labelCounts[String(instance.label ?? "")] ?? 0) + 1;
    return json({
      success: true,
      instances_found: page.length,
      total_instances: all.length,
      label_counts: labelCounts,
      next_token: nextOffset < all.length ? btoa(String(nextOffset)) : null,
      instances: page.length === 0 && this.quirks.nullEmptyList ? null : page,
    });
  }

  /**
   * `GET /api/v0/charges/` as vast-ai/docs `show-charges` gives it and vast-cli `show invoices-v1 --charges`
   * reads it (`vastai/api/billing.py` `show_invoices_v1`): select_filters `day` (unix seconds,
   * required) and `type`; one result per instance with its charge inside the window, `source`
   * `instance-<id>`; limit ≤ 100, paged by next_token / after_token. Billed: dph_total from the
   * create until the destroy (or the exit), times `chargeFactor`.
   */
  private charges(url: URL): Response {
    const limit = Number(url.searchParams.get("limit") ?? "20");
    if (!Number.isInteger(limit) || limit < 1 || limit > 100)
      return json({ error: "invalid_request", msg: "Error in query parameters: limit must be between 1 and 100" }, 400);
    let filters: Record<string, unknown>;
    try {
      const parsed: unknown = JSON.parse(url.searchParams.get("select_filters") ?? "");
      if (!isObject(parsed)) throw new Error("not an object");
      filters = parsed;
    } catch {
      return json({ error: "invalid_request", msg: "Error in query parameters: select_filters is required" }, 400);
    }
    const day = isObject(filters.day) ? filters.day : null;
    if (!day || typeof day.gte !== "number" || typeof day.lte !== "number")
      return json({ error: "invalid_request", msg: "Error in query parameters: day is required" }, 400);
    const types = isObject(filters.type) && Array.isArray(filters.type.in) ? filters.type.in : null;
    const windowFrom = day.gte * 1000;
    const windowTo = (day.lte + 1) * 1000;
    const results: Record<string, unknown>[] = [];
    if (!types || types.includes("instance")) {
      for (const m of this.model.machines.values()) {
        const billedUntil = Math.min(
          this.model.now(),
          m.terminateRequestedAt ?? Number.POSITIVE_INFINITY,
          m.exitedAt ?? Number.POSITIVE_INFINITY,
        );
        const from = Math.max(windowFrom, m.createdAt);
        const to = Math.min(windowTo, billedUntil);
        if (to <= from) continue;
        const hours = (to - from) / 3_600_000;
        const amount = Math.round(m.pricePerHour * hours * this.quirks.chargeFactor * 1000) / 1000;
        results.push({
          start: Math.floor(from / 1000),
          end: Math.floor(to / 1000),
          type: "instance",
          source: `instance-${m.id}`,
          description: `Instance ${m.id} Charges`,
          amount,
          metadata: { label: m.label },
          items: [
            {
              start: Math.floor(from / 1000),
              end: Math.floor(to / 1000),
              type: "gpu",
              source: null,
              description: `${hours.toFixed(3)} hours at $${m.pricePerHour}/hour`,
              amount,
              metadata: {},
              items: [],
            },
          ],
        });
      }
    }
    const token = url.searchParams.get("after_token");
    const offset = token ? Number(atob(token)) : 0;
    const page = results.slice(offset, offset + limit);
    const next = offset + limit < results.length ? btoa(String(offset + limit)) : null;
    return json({ success: true, count: page.length, total: results.length, next_token: next, results: page });
  }

  /** The instance as `GET /api/v0/instances/{id}/` shows it, for the model's current state. */
  instanceJson(m: ModelMachine): Record<string, unknown> {
    const meta = m.meta as unknown as VastMeta;
    const state = this.model.state(m.id);
    const now = this.model.now();
    const runningSince = this.model.runningSince(m.id);
    const instance: Record<string, unknown> = {
      id: Number(m.id),
      machine_id: 31337,
      label: m.label,
      image_uuid: meta.image,
      image_runtype: "args",
      image_args: meta.args ?? [],
      onstart: meta.onstart,
      extra_env: Object.entries(meta.env),
      public_ipaddr: this.quirks.ipWhitespace ? ` ${meta.publicIp}\n` : meta.publicIp,
      direct_port_start: 41200,
      direct_port_end: 41223,
      direct_port_count: 24,
      ssh_host: "ssh4.vast.ai",
      ssh_port: meta.sshPort,
      num_gpus: m.gpuCount,
      gpu_name: meta.gpuName,
      gpu_ram: meta.gpuRamMb,
      dph_total: m.pricePerHour,
      start_date: m.createdAt / 1000,
      uptime_mins: runningSince === null ? null : round4((now - runningSince) / 60_000),
      reliability2: 0.9962,
      geolocation: "Oregon, US",
    };
    const statuses = (actual: string | null, intended: string, msg: string | null, cur = intended) =>
      Object.assign(instance, {
        actual_status: actual,
        intended_status: intended,
        cur_state: cur,
        next_state: cur,
        status_msg: msg,
      });
    const portsBeforeRunning = () => {
      // docs/providers.md#vast-instances: empty, null or absent until running.
      if (this.quirks.portsBeforeRunning === "empty") instance.ports = {};
      else if (this.quirks.portsBeforeRunning === "null") instance.ports = null;
    };
    const publishedPorts = () => {
      instance.ports = Object.fromEntries(
        Object.entries(meta.hostPorts).map(([port, host]) => [`${port}/tcp`, [{ HostIp: "0.0.0.0", HostPort: host }]]),
      );
    };
    switch (state) {
      case "booting": {
        // docs/providers.md#vast-instances: null while provisioning, then loading while the image is pulled.
        const halfway = m.createdAt + (Number.isFinite(m.bootMs) ? m.bootMs / 2 : 60_000);
        if (now < halfway) statuses(null, "running", null);
        else statuses("loading", "running", `Pulling image ${meta.image}`);
        portsBeforeRunning();
        break;
      }
      case "running":
        statuses("running", "running", `success, running ${meta.image.replace(":", "_")}/args`);
        publishedPorts();
        break;
      case "failed":
        // "created" + OCI error (dstack), or exited/unknown/offline that never recover.
        statuses(meta.failStatus, "running", m.failStart, "running");
        portsBeforeRunning();
        break;
      case "exited":
        // docs/providers.md#vast-create / outbid spot: stopped everywhere.
        statuses(meta.exitStatus, "stopped", m.exitReason, "stopped");
        instance.ports = {};
        break;
      case "terminating":
        if (this.quirks.lingerAs === "destroyed") statuses("destroyed", "destroyed", null, "unloaded");
        else {
          statuses("running", "stopped", "success, running", "stopped");
          publishedPorts();
        }
        break;
      case "gone":
        statuses(null, "destroyed", null, "unloaded");
        break;
    }
    return instance;
  }

  private byAddress(url: URL): ModelMachine | undefined {
    if (url.protocol !== "http:") return undefined;
    for (const m of this.model.machines.values()) {
      const meta = m.meta as unknown as VastMeta;
      if (meta.publicIp === url.hostname && Object.values(meta.hostPorts).includes(url.port)) return m;
    }
    return undefined;
  }
}

/** Vast's filter operators over one field; `verified` filters the `verification` text. */
function matchesFilter(row: Record<string, unknown>, field: string, filter: unknown): boolean {
  if (!isObject(filter)) return true;
  const value = field === "verified" ? row.verification === "verified" : row[field];
  // A field the row lacks is null in Vast's tables: it fails every comparison.
  if (value === undefined || value === null) return false;
  return Object.entries(filter).every(([op, operand]) => {
    switch (op) {
      case "eq":
        return value === operand;
      case "neq":
        return value !== operand;
      case "gt":
        return Number(value) > Number(operand);
      case "gte":
        return Number(value) >= Number(operand);
      case "lt":
        return Number(value) < Number(operand);
      case "lte":
        return Number(value) <= Number(operand);
      case "in":
        return Array.isArray(operand) && operand.includes(value);
      case "notin":
        return Array.isArray(operand) && !operand.includes(value);
      default:
        return true;
    }
  });
}

/** Never answers; rejects when the caller's AbortSignal fires, like a dropped connection. */
export function hang(request: Request): Promise<Response> {
  return new Promise((_, reject) => {
    const signal = request.signal;
    if (signal.aborted) reject(signal.reason);
    signal.addEventListener("abort", () => reject(signal.reason));
  });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

const NOT_FOUND_PAGE =
  "<!doctype html>\n<html lang=en>\n<title>404 Not Found</title>\n<h1>Not Found</h1>\n<p>The requested URL was not found on the server.</p>\n";

const round4 = (n: number) => Math.round(n * 10_000) / 10_000;
