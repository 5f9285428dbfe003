import { HttpClient, type HttpResponse, ProviderError } from "./http";
import type {
  Balance,
  LookupHint,
  MachineSpec,
  MachineStatus,
  OfferQuery,
  OllamaProbe,
  OwnListing,
  OwnMachine,
  Provider,
  ProviderOffer,
  RentResult,
} from "./types";
import {
  AccountResponseSchema,
  CreatedSchema,
  commandFor,
  ErrorBodySchema,
  InstanceSchema,
  InstancesResponseSchema,
  instanceState,
  MAX_CMD_CHARS,
  MIN_BILLED_MINUTES,
  OffersResponseSchema,
  offersParams,
  parseOfferId,
  StopResponseSchema,
  toOffers,
  type VramfarmInstance,
  VramfarmOfferSchema,
} from "./vramfarm-wire";

export interface VramfarmOptions {
  apiKey: string;
  /** e.g. https://vramfarm.com/api */
  baseUrl: string;
  /** USD per EUR, for comparing its EUR prices with a USD cap (config.eurUsd) */
  eurUsd?: number;
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<void>;
  timeoutMs?: number;
  /** longest Retry-After we wait out inside one call */
  maxRetryWaitMs?: number;
  /** clock for matching a lost create to its server by created_at */
  now?: () => number;
}

/** Statuses a machine can bill in (provisioning is free, but becomes running by itself). */
const LIVE_STATUSES = ["running", "provisioning"] as const;
/** How far back a machine counts as made by an ambiguous create (the provider's clock may differ). */
const CREATE_CLOCK_SKEW_MS = 120_000;

/** VRAMfarm over REST (docs/providers.md#vramfarm). No labels: its own machines are the ids gpulease recorded. */
export function createVramfarmProvider(options: VramfarmOptions): Provider {
  const baseUrl = options.baseUrl.replace(/\/+$/, "");
  const eurUsd = options.eurUsd ?? 1.08;
  const now = options.now ?? (() => Date.now());
  // VRAMfarm sends Retry-After with 429/502/503; the HttpClient waits it out when short enough.
  const http = new HttpClient({
    provider: "vramfarm",
    apiKey: options.apiKey,
    fetch: options.fetch,
    sleep: options.sleep,
    timeoutMs: options.timeoutMs,
    maxRetryWaitMs: options.maxRetryWaitMs ?? 10_000,
  });
  const url = (path: string) => `${baseUrl}${path}`;

  const reason = (response: HttpResponse): { code: string | null; text: string } => {
    const parsed = ErrorBodySchema.safeParse(response.json);
    const code = parsed.success ? (parsed.data.code ?? null) : null;
    const text = parsed.success && parsed.data.error ? parsed.data.error : response.text || `HTTP ${response.status}`;
    return { code, text: http.scrub(code ? `${code}: ${text}` : text) };
  };

  const serverId = (ref: string): number => {
    if (!/^\d+$/.test(ref)) throw http.error("api", `not a VRAMfarm server id: ${ref}`);
    return Number(ref);
  };

  /** Servers with this status; a filter the API rejects (400) is reported as null. */
  const listStatus = async (status: string): Promise<VramfarmInstance[] | null> => {
    const response = await http.send({ method: "GET", url: url(`/instances?status=${status}`) });
    if (response.status === 400 && status !== "running") return null;
    if (response.status !== 200) throw http.unexpected(response, "list servers");
    return http.parse(response, InstancesResponseSchema, "list servers").instances ?? [];
  };

  /**
   * Every server that is or may become billed. The article documents only `status=running`;
   * `provisioning` is asked too (those servers will bill once up). When that filter is refused,
   * `unseen` says so: the servers listed are then not every server that may bill.
   */
  const listLive = async (): Promise<{ instances: VramfarmInstance[]; unseen: string | null }> => {
    const byId = new Map<string, VramfarmInstance>();
    const refused: string[] = [];
    for (const status of LIVE_STATUSES) {
      const listed = await listStatus(status);
      if (listed === null) refused.push(status);
      for (const instance of listed ?? []) byId.set(String(instance.id), instance);
    }
    const unseen = refused.length
      ? `VRAMfarm refused to list ${refused.join(", ")} servers: those were not seen`
      : null;
    return { instances: [...byId.values()], unseen };
  };

  /**
   * After a create whose answer was lost: the one new server of this card, count and image that
   * appeared since the snapshot, or null. There are no labels to look it up by later.
   */
  const findCreated = async (
    before: Set<string>,
    offer: { gpu: string; count: number },
    image: string,
    since: number,
  ): Promise<string | null> => {
    try {
      const candidates = (await listLive()).instances.filter((instance) => {
        const createdAt = instance.created_at ? Date.parse(instance.created_at) : Number.NaN;
        return (
          !before.has(String(instance.id)) &&
          instance.gpu === offer.gpu &&
          (instance.count ?? 1) === offer.count &&
          instance.image === image &&
          Number.isFinite(createdAt) &&
          createdAt >= since - CREATE_CLOCK_SKEW_MS
        );
      });
      return candidates.length === 1 && candidates[0] ? String(candidates[0].id) : null;
    } catch {
      return null;
    }
  };

  return {
    name: "vramfarm",
    currency: "EUR",
    // No labels (docs/providers.md#vramfarm): findByLabel needs a LookupHint.
    labelled: false,
    billingStartsAt: "running",
    minimumBilledMinutes: MIN_BILLED_MINUTES,

    async listOffers(query: OfferQuery): Promise<ProviderOffer[]> {
      if (query.template === "ollama") return [];
      const params = offersParams(query).toString();
      const response = await http.send({ method: "GET", url: url(`/offers${params ? `?${params}` : ""}`) });
      if (response.status !== 200) throw http.unexpected(response, "list offers");
      const body = http.parse(response, OffersResponseSchema, "list offers");
      // Each offer parsed on its own: one odd listing must not hide the rest.
      const listed = body.offers.flatMap((raw) => {
        const parsed = VramfarmOfferSchema.safeParse(raw);
        return parsed.success ? [parsed.data] : [];
      });
      return toOffers(listed, query, eurUsd);
    },

    async rent(offer: ProviderOffer, spec: MachineSpec): Promise<RentResult> {
      const target = parseOfferId(offer.offer_id);
      if (!target) return { ok: false, kind: "rejected", error: `not a VRAMfarm offer: ${offer.offer_id}` };
      if (spec.template !== "custom") {
        return {
          ok: false,
          kind: "rejected",
          error: "VRAMfarm publishes no HTTP port (SSH only): it takes custom leases, not Ollama",
        };
      }
      if (spec.ports.length > 0) {
        return {
          ok: false,
          kind: "rejected",
          error: "VRAMfarm publishes no ports (SSH only): a lease with ports cannot run there",
        };
      }
      let cmd: string | null;
      try {
        cmd = commandFor(spec);
      } catch (error) {
        return { ok: false, kind: "rejected", error: error instanceof Error ? error.message : String(error) };
      }
      if (cmd !== null && cmd.length > MAX_CMD_CHARS) {
        return {
          ok: false,
          kind: "rejected",
          error: `cmd with its environment is ${cmd.length} characters; VRAMfarm takes at most ${MAX_CMD_CHARS}`,
        };
      }
      // Snapshot of live servers, so a lost create answer can still be matched to its server.
      let before: Set<string> | null = null;
      try {
        before = new Set((await listLive()).instances.map((instance) => String(instance.id)));
      } catch {
        before = null;
      }
      const body: Record<string, unknown> = {
        gpu: target.gpu,
        count: target.count,
        template: "custom",
        image: spec.image,
        disk: spec.disk_gb,
      };
      if (cmd !== null) body.cmd = cmd;
      const startedAt = now();
      const ambiguous = async (error: string): Promise<RentResult> => {
        const ref = before ? await findCreated(before, target, spec.image, startedAt) : null;
        return ref ? { ok: true, ref, price_per_hour: offer.price_per_hour } : { ok: false, kind: "ambiguous", error };
      };
      let response: HttpResponse;
      try {
        // Not retried blindly: a repeat after a lost answer could start a second server.
        response = await http.send({ method: "POST", url: url("/instances"), body, retry: false });
      } catch (error) {
        if (!(error instanceof ProviderError)) throw error;
        // A 429 is refused before anything starts.
        if (error.status === 429) return { ok: false, kind: "rejected", error: error.message };
        return ambiguous(error.message);
      }
      if (response.status === 200 || response.status === 201) {
        const created = CreatedSchema.safeParse(response.json);
        if (created.success) return { ok: true, ref: String(created.data.id), price_per_hour: offer.price_per_hour };
        return ambiguous(
          `create answered ${response.status} without a server id: ${http.scrub(response.text || "(empty body)")}`,
        );
      }
      const { text } = reason(response);
      // The article: 409 = "no machine of that type free", whatever its code says (no_capacity,
      // server_limit, or one not seen yet): move on to the next offer.
      if (response.status === 409) return { ok: false, kind: "no_capacity", error: text };
      if (response.status >= 500) return ambiguous(`HTTP ${response.status}: ${text}`);
      // 400 invalid_request, 401, 402 insufficient_balance, 409 server_limit, ...
      return { ok: false, kind: "rejected", error: text };
    },

    async status(ref: string): Promise<MachineStatus> {
      const response = await http.send({ method: "GET", url: url(`/instances/${serverId(ref)}`) });
      // Gone only with VRAMfarm's own `{"code": "not_found"}`: an HTML or proxy 404 proves nothing
      // (docs/providers.md#teardown-evidence).
      if (response.status === 404 && reason(response).code === "not_found") {
        return { state: "gone", access: null, cost: null, traffic_cost: null, price_per_hour: null, error: null };
      }
      if (response.status !== 200) throw http.unexpected(response, "read server");
      const instance = http.parse(response, InstanceSchema, "read server");
      // The article lists status, access, cost_eur, traffic_eur and error only: `id` may be absent.
      if (instance.id != null && String(instance.id) !== ref)
        throw http.error("parse", `read server: asked for ${ref}, got ${instance.id}`);
      const { state, error } = instanceState(instance);
      const ssh = instance.access?.ssh ?? null;
      return {
        state,
        access: state === "running" ? { urls: [], ssh } : null,
        cost: instance.cost_eur ?? null,
        // Counted with a delay (article): a lower bound while the server runs.
        traffic_cost: instance.traffic_eur ?? null,
        price_per_hour: instance.price ?? null,
        error,
      };
    },

    async terminate(ref: string): Promise<void> {
      const response = await http.send({ method: "POST", url: url("/instances/stop"), body: { id: serverId(ref) } });
      // Unknown id: nothing there to stop, on VRAMfarm's own not_found only.
      if (response.status === 404 && reason(response).code === "not_found") return;
      if (response.status !== 200) throw http.unexpected(response, "stop server");
      // {"ok": true, "already": true} on a second stop: stopping twice is harmless.
      const body = http.parse(response, StopResponseSchema, "stop server");
      if (!body.ok) throw http.error("api", `stop server: ${reason(response).text}`, response.status);
    },

    /**
     * VRAMfarm has no labels, so "no machine with this label" is only known from a fingerprint:
     * a live server of the offer's card and count, with the lease's image, created after the
     * lease, whose id the ledger does not know yet. Without a hint, or with more than one such
     * server, it throws: answering null would let a lost create read as "nothing was made" and
     * leak a billed server nobody tracks.
     */
    async findByLabel(_label: string, hint?: LookupHint): Promise<OwnMachine | null> {
      if (!hint) throw http.error("api", "VRAMfarm has no labels: a server cannot be looked up by label alone");
      const offer = parseOfferId(hint.offerId ?? "");
      const known = new Set(hint.knownRefs);
      const since = Date.parse(hint.createdAfter) - CREATE_CLOCK_SKEW_MS;
      const live = await listLive();
      const candidates = live.instances.filter((instance) => {
        const createdAt = instance.created_at ? Date.parse(instance.created_at) : Number.NaN;
        return (
          !known.has(String(instance.id)) &&
          (!offer || (instance.gpu === offer.gpu && (instance.count ?? 1) === offer.count)) &&
          (hint.image === null || instance.image === hint.image) &&
          Number.isFinite(createdAt) &&
          createdAt >= since
        );
      });
      if (live.unseen) {
        // A server in the state not listed may be this create's (or an older create's).
        if (candidates.length !== 1 || hint.competing > 0)
          throw http.error("api", `${live.unseen}; no match among the rest proves nothing`);
      }
      if (hint.settle && (candidates.length > 1 || hint.competing > 0)) {
        // Oldest server to the oldest create: every one is torn down and billed to some lease.
        const byAge = [...candidates].sort(
          (a, b) => Date.parse(a.created_at ?? "") - Date.parse(b.created_at ?? "") || Number(a.id) - Number(b.id),
        );
        const mine = byAge[hint.settle.older];
        return mine
          ? {
              ref: String(mine.id),
              label: null,
              state: instanceState(mine).state,
              created_at: mine.created_at ?? null,
              price_per_hour: mine.price ?? null,
            }
          : null;
      }
      if (candidates.length > 1) {
        throw http.error(
          "api",
          `${candidates.length} unknown servers match this lease's create: cannot tell which is ours`,
        );
      }
      if (candidates.length === 1 && hint.competing > 0) {
        // Another lease's create with the same card and image is unresolved too: the server may be theirs.
        throw http.error(
          "api",
          `a server matches this lease's create, but ${hint.competing} other lease(s) sent the same create: cannot tell whose it is`,
        );
      }
      const found = candidates[0];
      return found
        ? {
            ref: String(found.id),
            label: null,
            state: instanceState(found).state,
            created_at: found.created_at ?? null,
            price_per_hour: found.price ?? null,
          }
        : null;
    },

    /** Only servers whose id gpulease recorded: an unknown id may be the user's own batch job. */
    async listOwn(_prefix: string, knownRefs: string[]): Promise<OwnListing> {
      const known = new Set(knownRefs);
      if (known.size === 0) return { machines: [], next: null };
      const live = await listLive();
      const machines = live.instances
        .filter((instance) => known.has(String(instance.id)))
        .map((instance) => ({
          ref: String(instance.id),
          label: null,
          state: instanceState(instance).state,
          created_at: instance.created_at ?? null,
          price_per_hour: instance.price ?? null,
        }));
      return live.unseen ? { machines, next: null, partial: live.unseen } : { machines, next: null };
    },

    async balance(): Promise<Balance> {
      const response = await http.send({ method: "GET", url: url("/account") });
      if (response.status !== 200) throw http.unexpected(response, "read account");
      return { amount: http.parse(response, AccountResponseSchema, "read account").balance_eur, currency: "EUR" };
    },

    /** Never true: no HTTP port is published, and VRAMfarm takes no Ollama leases. */
    async ollamaProbe(): Promise<OllamaProbe> {
      return { phase: "down" };
    },
  };
}
