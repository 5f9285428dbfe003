import { CloudModel, type ModelMachine } from "../../src/sim/model";
import type { FakeService } from "./install";
import { json, takeQueued } from "./respond";

/**
 * VRAMfarm's REST API in the wire shapes docs/providers.md#vramfarm fixes: EUR whole-machine prices, rent by
 * card and count, free provisioning, per-minute billing from running with a 15-minute minimum,
 * stop twice = `already`, Retry-After on 429/502/503, no labels. Machines live in a CloudModel.
 */

export const VRAMFARM_FAKE_URL = "http://vramfarm.fake/api";
export const VRAMFARM_FAKE_TOKEN = "gf_live_testtoken0123456789";

export type VramfarmOperation = "offers" | "offerTypes" | "create" | "show" | "list" | "stop" | "account";

export type VramfarmFault =
  | { kind: "http"; status: 500 | 502 | 503 | 429; retryAfter?: string | null }
  /** never answers: the caller's timeout must end the call */
  | { kind: "hang" }
  | { kind: "malformed" }
  | { kind: "empty" }
  /** HTTP 200 carrying `{"error", "code"}` */
  | { kind: "error200" }
  /** stop: answered `{"ok": true}`, nothing happens */
  | { kind: "ignore" }
  /** show: one read reports another status although nothing changed */
  | { kind: "flap"; as: "provisioning" | "running" | "stopped" };

export interface VramfarmFaultRule {
  fault: VramfarmFault;
  times: number;
  /** carry the operation out first, then answer with the fault ("error but created") */
  afterEffect?: boolean;
}

export interface VramfarmQuirks {
  /** `GET /instances?status=provisioning` answers 400 (the article documents only `running`) */
  rejectProvisioningFilter: boolean;
  /** Retry-After (seconds) sent with every 429/502/503 */
  retryAfterSeconds: number;
  /** the account's limit of servers at once (409 server_limit beyond it) */
  maxServers: number;
  /** the status read answers only the fields the article promises (no `id`), docs/providers.md#vramfarm */
  statusOmitsId: boolean;
}

export const defaultVramfarmQuirks = (): VramfarmQuirks => ({
  rejectProvisioningFilter: false,
  retryAfterSeconds: 2,
  maxServers: 4,
  statusOmitsId: false,
});

/** One machine VRAMfarm lists; `free` is how many of it can still be started. */
export interface VramfarmListing {
  id: number;
  gpu: string;
  gpu_name: string;
  count: number;
  vram_gb: number;
  price: number;
  country: string;
  reliable: boolean;
  eurPerGb: number;
  free: number;
}

export const defaultVramfarmListings = (): VramfarmListing[] => [
  {
    id: 5101,
    gpu: "rtx-4090",
    gpu_name: "RTX 4090",
    count: 1,
    vram_gb: 24,
    price: 0.49,
    country: "DE",
    reliable: true,
    eurPerGb: 0.002,
    free: 2,
  },
  {
    id: 5102,
    gpu: "rtx-4090",
    gpu_name: "RTX 4090",
    count: 1,
    vram_gb: 24,
    price: 0.45,
    country: "FI",
    reliable: false,
    eurPerGb: 0.002,
    free: 1,
  },
  {
    id: 5103,
    gpu: "rtx-4090",
    gpu_name: "RTX 4090",
    count: 2,
    vram_gb: 24,
    price: 0.96,
    country: "DE",
    reliable: true,
    eurPerGb: 0.002,
    free: 1,
  },
  {
    id: 5201,
    gpu: "h100-sxm",
    gpu_name: "H100 SXM",
    count: 1,
    vram_gb: 80,
    price: 2.1,
    country: "DE",
    reliable: true,
    eurPerGb: 0.001,
    free: 1,
  },
  {
    id: 5301,
    gpu: "a40",
    gpu_name: "A40",
    count: 1,
    vram_gb: 48,
    price: 0.38,
    country: "NL",
    reliable: true,
    eurPerGb: 0.003,
    free: 0,
  },
];

interface VramfarmMeta {
  gpu: string;
  image: string;
  cmd: string | null;
  disk: number | null;
  template: string;
  sshPort: number;
  /** traffic counted so far, EUR */
  trafficEur: number;
}

export interface PlantVramfarmServer {
  gpu?: string;
  count?: number;
  price?: number;
  image?: string;
  bootMs?: number;
}

export interface RecordedVramfarmRequest {
  method: string;
  url: string;
  path: string;
  authorization: string | null;
  userAgent: string | null;
  body: unknown;
}

let serverCounter = 4101;

export class VramfarmFake implements FakeService {
  readonly model: CloudModel;
  readonly requests: RecordedVramfarmRequest[] = [];
  quirks: VramfarmQuirks = defaultVramfarmQuirks();
  listings: VramfarmListing[] = defaultVramfarmListings();
  readonly faults: Partial<Record<VramfarmOperation, VramfarmFaultRule[]>> = {};
  balanceEur = 12.5;
  readonly token: string;

  constructor(options: { now?: () => number; bootMs?: number; token?: string } = {}) {
    this.model = new CloudModel({ now: options.now ?? (() => Date.now()), bootMs: options.bootMs ?? 0 });
    this.token = options.token ?? VRAMFARM_FAKE_TOKEN;
  }

  inject(operation: VramfarmOperation, fault: VramfarmFault, times = 1, afterEffect = false): this {
    this.faults[operation] ??= [];
    this.faults[operation].push({ fault, times, afterEffect });
    return this;
  }

  /** A server started outside gpulease (the user's own batch job, or an unrecorded orphan). */
  plant(input: PlantVramfarmServer = {}): ModelMachine {
    return this.start(
      input.gpu ?? "rtx-4090",
      input.count ?? 1,
      input.price ?? 0.49,
      input.image ?? "ghcr.io/someone/job:1",
      null,
      null,
      "custom",
      input.bootMs,
    );
  }

  /** Traffic counted so far for a server, in EUR. */
  setTraffic(id: string, eur: number): void {
    const m = this.model.get(id);
    if (m) (m.meta as unknown as VramfarmMeta).trafficEur = eur;
  }

  handles(url: URL): boolean {
    return url.href.startsWith(`${VRAMFARM_FAKE_URL}/`);
  }

  async handle(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const raw = request.method === "GET" ? "" : await request.text();
    let body: unknown;
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      body = raw;
    }
    const path = url.pathname.replace(/^\/api/, "");
    this.requests.push({
      method: request.method,
      url: request.url,
      path,
      authorization: request.headers.get("Authorization"),
      userAgent: request.headers.get("User-Agent"),
      body,
    });
    const route = this.route(request.method, path);
    if (!route) return json({ error: `no route ${request.method} ${path}`, code: "not_found" }, 404);
    if (request.headers.get("Authorization") !== `Bearer ${this.token}`) {
      return json({ error: "invalid or missing token", code: "unauthorized" }, 401);
    }
    const rule = this.takeFault(route.operation);
    if (rule && !rule.afterEffect) {
      const answer = await this.faultResponse(rule.fault, route.operation, request, route.id);
      if (answer) return answer;
    }
    const response = this.perform(route.operation, route.id, url, body);
    if (rule?.afterEffect) {
      const answer = await this.faultResponse(rule.fault, route.operation, request, route.id);
      if (answer) return answer;
    }
    return response;
  }

  private route(method: string, path: string): { operation: VramfarmOperation; id: string | null } | null {
    if (method === "GET" && path === "/offers") return { operation: "offers", id: null };
    if (method === "GET" && path === "/offer-types") return { operation: "offerTypes", id: null };
    if (method === "GET" && path === "/account") return { operation: "account", id: null };
    if (method === "POST" && path === "/instances") return { operation: "create", id: null };
    if (method === "GET" && path === "/instances") return { operation: "list", id: null };
    if (method === "POST" && path === "/instances/stop") return { operation: "stop", id: null };
    const one = /^\/instances\/([^/]+)$/.exec(path);
    if (method === "GET" && one?.[1]) return { operation: "show", id: one[1] };
    return null;
  }

  private takeFault(operation: VramfarmOperation): VramfarmFaultRule | null {
    return takeQueued(this.faults[operation]);
  }

  private async faultResponse(
    fault: VramfarmFault,
    operation: VramfarmOperation,
    request: Request,
    id: string | null,
  ): Promise<Response | null> {
    switch (fault.kind) {
      case "http": {
        const retryAfter = fault.retryAfter === undefined ? String(this.quirks.retryAfterSeconds) : fault.retryAfter;
        // 429/502/503 = retry after a pause, and VRAMfarm says how long (article).
        const headers: Record<string, string> =
          retryAfter !== null && fault.status !== 500 ? { "Retry-After": retryAfter } : {};
        const code = fault.status === 429 ? "rate_limited" : "unavailable";
        return json(
          { error: fault.status === 429 ? "too many requests" : "temporarily unavailable", code },
          fault.status,
          headers,
        );
      }
      case "hang":
        return new Promise((_, reject) => {
          const signal = request.signal;
          if (signal.aborted) reject(signal.reason);
          signal.addEventListener("abort", () => reject(signal.reason));
        });
      case "malformed":
        return new Response('{"status": "runn', { status: 200, headers: { "Content-Type": "application/json" } });
      case "empty":
        return new Response("", { status: 200 });
      case "error200":
        return json({ error: "internal error", code: "internal" });
      case "ignore":
        return operation === "stop" ? json({ ok: true }) : null;
      case "flap": {
        const m = id ? this.model.get(id) : undefined;
        if (operation !== "show" || !m) return null;
        return json({ ...this.serverJson(m), status: fault.as });
      }
    }
  }

  private perform(operation: VramfarmOperation, id: string | null, url: URL, body: unknown): Response {
    switch (operation) {
      case "offers":
        return json({ offers: this.offersJson(url.searchParams.get("gpu"), url.searchParams.get("count")) });
      case "offerTypes": {
        const offers = this.offersJson(null, null);
        const slugs = [...new Set(offers.map((o) => o.gpu))];
        return json({
          types: slugs.map((gpu) => {
            const ofType = offers.filter((o) => o.gpu === gpu);
            const reliable = ofType.filter((o) => o.reliable).sort((a, b) => a.price - b.price);
            return {
              gpu,
              gpu_name: ofType[0]?.gpu_name,
              vram_gb: ofType[0]?.vram_gb,
              cheapest: reliable[0] ?? null,
              available: ofType.length,
            };
          }),
        });
      }
      case "account":
        return json({
          verified: true,
          ssh_key_set: true,
          balance_eur: this.balanceEur,
          max_servers: this.quirks.maxServers,
          servers_running: this.live().length,
        });
      case "create":
        return this.create(body);
      case "show": {
        const m = id ? this.model.get(id) : undefined;
        if (!m) return json({ error: "no such server", code: "not_found" }, 404);
        const server: Record<string, unknown> = this.serverJson(m);
        if (this.quirks.statusOmitsId) delete server.id;
        return json(server);
      }
      case "list": {
        const status = url.searchParams.get("status");
        if (status === "provisioning" && this.quirks.rejectProvisioningFilter) {
          return json({ error: "status must be running or stopped", code: "invalid_request" }, 400);
        }
        if (status !== null && !["provisioning", "running", "stopped"].includes(status)) {
          return json({ error: `unknown status ${status}`, code: "invalid_request" }, 400);
        }
        const servers = [...this.model.machines.values()].map((m) => this.serverJson(m));
        return json({ instances: status ? servers.filter((s) => s.status === status) : servers });
      }
      case "stop":
        return this.stop(body);
    }
  }

  private offersJson(gpu: string | null, count: string | null) {
    return this.listings
      .filter((l) => l.free > 0 && (gpu === null || l.gpu === gpu) && (count === null || l.count === Number(count)))
      .map((l) => ({
        id: l.id,
        gpu: l.gpu,
        gpu_name: l.gpu_name,
        count: l.count,
        vram_gb: l.vram_gb,
        vram_total_gb: l.vram_gb * l.count,
        price: l.price,
        currency: "EUR",
        country: l.country,
        reliable: l.reliable,
        traffic: { included_gb: 1000, eur_per_gb: l.eurPerGb },
      }));
  }

  private create(body: unknown): Response {
    if (typeof body !== "object" || body === null)
      return json({ error: "body must be a JSON object", code: "invalid_request" }, 400);
    const input = body as Record<string, unknown>;
    if (typeof input.gpu !== "string") return json({ error: "gpu is required", code: "invalid_request" }, 400);
    const count = input.count === undefined ? 1 : Number(input.count);
    const template = input.template === undefined ? "pytorch" : String(input.template);
    if (!["pytorch", "custom"].includes(template))
      return json({ error: `unknown template ${template}`, code: "invalid_request" }, 400);
    if (template === "custom" && typeof input.image !== "string")
      return json({ error: "image is required for custom", code: "invalid_request" }, 400);
    if (typeof input.cmd === "string" && input.cmd.length > 4000)
      return json({ error: "cmd is longer than 4000 characters", code: "invalid_request" }, 400);
    if (this.balanceEur <= 0) return json({ error: "balance too low", code: "insufficient_balance" }, 402);
    if (this.live().length >= this.quirks.maxServers) {
      return json({ error: `at most ${this.quirks.maxServers} servers at once`, code: "server_limit" }, 409);
    }
    // The cheapest free machine of that card and count; there is no offer id in the request.
    const listing = this.listings
      .filter((l) => l.gpu === input.gpu && l.count === count && l.free > 0)
      .sort((a, b) => a.price - b.price)[0];
    if (!listing) return json({ error: `no ${input.gpu} machine is free right now`, code: "no_capacity" }, 409);
    listing.free -= 1;
    const image = template === "custom" ? String(input.image) : "vramfarm/pytorch:2026-11";
    const machine = this.start(
      listing.gpu,
      count,
      listing.price,
      image,
      typeof input.cmd === "string" ? input.cmd : null,
      typeof input.disk === "number" ? input.disk : null,
      template,
    );
    return json({ id: Number(machine.id), status: "provisioning" });
  }

  private start(
    gpu: string,
    count: number,
    price: number,
    image: string,
    cmd: string | null,
    disk: number | null,
    template: string,
    bootMs?: number,
  ): ModelMachine {
    const meta: VramfarmMeta = {
      gpu,
      image,
      cmd,
      disk,
      template,
      sshPort: 22000 + (serverCounter % 1000),
      trafficEur: 0,
    };
    return this.model.create({
      id: String(serverCounter++),
      label: null,
      offerKey: `${gpu}:${count}`,
      gpuCount: count,
      pricePerHour: price,
      bootMs,
      meta: meta as unknown as Record<string, unknown>,
    });
  }

  private stop(body: unknown): Response {
    const id = typeof body === "object" && body !== null ? (body as Record<string, unknown>).id : undefined;
    if (typeof id !== "number") return json({ error: "id is required", code: "invalid_request" }, 400);
    const m = this.model.get(String(id));
    if (!m) return json({ error: "no such server", code: "not_found" }, 404);
    const stoppedBefore = m.exitedAt !== null || this.model.state(m.id) === "gone";
    this.model.terminate(m.id);
    // Stopping a stopped server is harmless (article).
    return json(stoppedBefore ? { ok: true, already: true } : { ok: true });
  }

  private live(): ModelMachine[] {
    return [...this.model.machines.values()].filter((m) =>
      ["booting", "running", "failed"].includes(this.model.state(m.id)),
    );
  }

  /** The server as `GET /api/instances/{id}` shows it, for the model's current state. */
  serverJson(m: ModelMachine) {
    const meta = m.meta as unknown as VramfarmMeta;
    const state = this.model.state(m.id);
    // A failed start is replaced at no cost under the same id: it just stays provisioning.
    const status =
      state === "booting" || state === "failed" ? "provisioning" : state === "running" ? "running" : "stopped";
    const runningSince = this.runningSince(m);
    const stoppedAt = m.terminateRequestedAt ?? m.exitedAt;
    return {
      id: Number(m.id),
      status,
      gpu: meta.gpu,
      count: m.gpuCount,
      price: m.pricePerHour,
      currency: "EUR",
      template: meta.template,
      image: meta.image,
      created_at: new Date(m.createdAt).toISOString(),
      started_at: runningSince === null ? null : new Date(runningSince).toISOString(),
      stopped_at: status === "stopped" && stoppedAt !== null ? new Date(stoppedAt).toISOString() : null,
      access: status === "running" ? { ssh: { host: "203.0.113.7", port: meta.sshPort } } : null,
      cost_eur: this.costEur(m),
      traffic_eur: meta.trafficEur,
      // Only a stop nobody asked for says why.
      error: status === "stopped" && m.exitedAt !== null ? m.exitReason : null,
    };
  }

  /** Per minute from running, at least 15 minutes per start; provisioning is free. */
  costEur(m: ModelMachine): number {
    if (this.runningSince(m) === null) return 0;
    const minutes = Math.max(15, Math.ceil(this.model.billedHours(m.id, "running") * 60));
    return Math.round(minutes * (m.pricePerHour / 60) * 10_000) / 10_000;
  }

  /** When it came up, or null if it never did before being stopped. */
  private runningSince(m: ModelMachine): number | null {
    const since = this.model.runningSince(m.id);
    const stoppedAt = m.terminateRequestedAt ?? m.exitedAt;
    return since === null || (stoppedAt !== null && since >= stoppedAt) ? null : since;
  }
}
