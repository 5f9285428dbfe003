import { systemSleep } from "../lib/time";
import { HttpClient, type HttpResponse, ProviderError } from "./http";
import { vastAskId } from "./offer-host";
import { probeOllama } from "./ollama";
import type {
  Balance,
  BilledDay,
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
  BundlesResponseSchema,
  bundlesQuery,
  ChargesResponseSchema,
  type CreateResponse,
  CreateResponseSchema,
  createBody,
  DestroyResponseSchema,
  instanceAccess,
  instanceState,
  ListInstancesResponseSchema,
  ShowInstanceResponseSchema,
  toOffer,
  UserResponseSchema,
  type VastInstance,
  VastOfferSchema,
  vastSpecProblems,
} from "./vast-wire";

/** Create errors Vast documents as refusals before anything is made (create_instance.yaml). */
const KNOWN_REFUSALS = new Set([
  "invalid_args",
  "invalid_price",
  "insufficient_credit",
  "no_ssh_key_for_vm",
  "auth_error",
  "invalid_request",
  "no_such_ask",
]);

export interface VastOptions {
  apiKey: string;
  /** e.g. https://console.vast.ai (no /api/v0) */
  baseUrl: string;
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<void>;
  timeoutMs?: number;
  /** create calls wait longer: Vast places the container before it answers */
  createTimeoutMs?: number;
  /** MIN_CUDA_VERSION, "major.minor" */
  minCudaVersion?: string;
}

/** v1 listing page size; Vast allows at most 25 (docs/providers.md#vast-listing). */
const PAGE_LIMIT = 25;
/** A listing longer than this is a paging loop, not an account. */
const MAX_PAGES = 200;
/** The offer search: 10 requests a minute (search_offers.yaml x-rate-limit, docs/providers.md#vast-rate-limits). */
const SEARCH_BUDGET = { limit: 10, windowMs: 60_000 };

/**
 * Vast's create endpoint wants 4.5 s between calls and locks a caller out for 12 s ("penalty: 12",
 * read as seconds) after one inside it, with no Retry-After (docs/providers.md#vast-rate-limits):
 * the one repeat waits the lockout out, with a second to spare.
 */
const CREATE_RATE_WAIT_MS = 13_000;

/** The charges endpoint's largest page (vast-cli `show_invoices_v1`: "max 100"). */
const CHARGES_LIMIT = 100;
/** Pages of one day's charges read before the read gives up rather than report part of a bill. */
const CHARGES_MAX_PAGES = 20;
/** Days of one lease's bill read in one call: a longer span is an error, not a partial bill. */
const CHARGES_MAX_DAYS = 35;
const DAY_MS = 86_400_000;

/** Vast.ai over REST (docs/providers.md#vastai). */
export function createVastProvider(options: VastOptions): Provider {
  const baseUrl = options.baseUrl.replace(/\/+$/, "");
  const sleep = options.sleep ?? systemSleep;
  const http = new HttpClient({
    provider: "vast",
    apiKey: options.apiKey,
    fetch: options.fetch,
    sleep,
    timeoutMs: options.timeoutMs,
    // Vast's 429s are per-endpoint minimum intervals of 1-4.5 s without Retry-After (docs/providers.md#vast-rate-limits):
    // 0.5 + 1 + 2 s of backoff outlasts the 3 s destroy interval; the default 0.75 s did not.
    retries: 3,
    maxRetryWaitMs: 5_000,
  });
  const fetchImpl = options.fetch ?? ((input: RequestInfo | URL, init?: RequestInit) => fetch(input, init));
  const url = (path: string) => `${baseUrl}${path}`;

  /** Vast's own text of an error answer, in any of its body shapes. */
  const reason = (response: HttpResponse): string => {
    const parsed = CreateResponseSchema.safeParse(response.json);
    if (parsed.success) {
      const body = parsed.data;
      const text = body.msg ?? body.message ?? body.detail ?? body.error;
      if (text) return http.scrub(body.error && body.msg ? `${body.error}: ${body.msg}` : text);
    }
    return http.scrub(response.text || `HTTP ${response.status}`);
  };

  const instanceId = (ref: string): string => {
    if (!/^\d+$/.test(ref)) throw http.error("api", `not a Vast instance id: ${ref}`);
    return ref;
  };

  const destroy = async (ref: string): Promise<void> => {
    const response = await http.send({ method: "DELETE", url: url(`/api/v0/instances/${instanceId(ref)}/`), body: {} });
    // Already gone: error no_such_instance (dstack) / not_found (docs), in 200 or 404; a 404
    // without Vast's own error body (an HTML page, a wrong base URL) proves nothing.
    if (response.status === 404 && isGoneEvidence(response)) return;
    if (response.status !== 200) throw http.unexpected(response, "destroy instance");
    const body = http.parse(response, DestroyResponseSchema, "destroy instance");
    if (body.success === false && body.error !== "no_such_instance" && body.error !== "not_found") {
      throw http.error("api", `destroy instance: ${reason(response)}`, response.status);
    }
  };

  /** Every own instance the v1 listing holds for these filters, following next_token to the end. */
  const listAll = async (selectFilters: Record<string, unknown> | null): Promise<VastInstance[]> => {
    const instances: VastInstance[] = [];
    const seenTokens = new Set<string>();
    let afterToken: string | null = null;
    for (let page = 0; page < MAX_PAGES; page++) {
      const params = new URLSearchParams();
      if (selectFilters) params.set("select_filters", JSON.stringify(selectFilters));
      params.set("limit", String(PAGE_LIMIT));
      if (afterToken) params.set("after_token", afterToken);
      const response = await http.send({ method: "GET", url: url(`/api/v1/instances/?${params}`) });
      if (response.status !== 200) throw http.unexpected(response, "list instances");
      const body = http.parse(response, ListInstancesResponseSchema, "list instances");
      // `{"instances": null}` is an empty page, not an error (vast-cli test_show_instances_raw_null_instances).
      instances.push(...(body.instances ?? []));
      const next = body.next_token ?? null;
      if (!next) return instances;
      if (seenTokens.has(next)) throw http.error("api", "list instances: next_token repeats; paging would never end");
      seenTokens.add(next);
      afterToken = next;
    }
    throw http.error("api", `list instances: more than ${MAX_PAGES} pages`);
  };

  /** What Vast charged instance `ref` in one UTC day, following next_token; null when it charged nothing. */
  const chargedOn = async (ref: string, day: number): Promise<number | null> => {
    const source = `instance-${ref}`;
    let total: number | null = null;
    let afterToken: string | null = null;
    for (let page = 0; page < CHARGES_MAX_PAGES; page++) {
      const params = new URLSearchParams();
      // `day` is required, in unix seconds, both ends inclusive; only instance contracts.
      params.set(
        "select_filters",
        JSON.stringify({ day: { gte: day / 1000, lte: day / 1000 + 86_399 }, type: { in: ["instance"] } }),
      );
      params.set("latest_first", "false");
      params.set("limit", String(CHARGES_LIMIT));
      if (afterToken) params.set("after_token", afterToken);
      const response = await http.send({ method: "GET", url: url(`/api/v0/charges/?${params}`) });
      if (response.status !== 200) throw http.unexpected(response, "read charges");
      const body = http.parse(response, ChargesResponseSchema, "read charges");
      for (const result of body.results ?? []) if (result.source === source) total = (total ?? 0) + result.amount;
      const next = body.next_token ?? null;
      if (!next) return total;
      if (next === afterToken) throw http.error("api", "read charges: next_token repeats; paging would never end");
      afterToken = next;
    }
    throw http.error("api", `read charges: more than ${CHARGES_MAX_PAGES} pages in a day`);
  };

  const billedDays = async (ref: string, from: string, to: string): Promise<BilledDay[]> => {
    instanceId(ref);
    const first = Math.floor(Date.parse(from) / DAY_MS) * DAY_MS;
    const last = Math.floor(Date.parse(to) / DAY_MS) * DAY_MS;
    if (!Number.isFinite(first) || !Number.isFinite(last))
      throw http.error("api", `read charges: bad range ${from}..${to}`);
    if ((last - first) / DAY_MS >= CHARGES_MAX_DAYS)
      throw http.error("api", `read charges: more than ${CHARGES_MAX_DAYS} days to read`);
    const days: BilledDay[] = [];
    // One query per UTC day: Vast sums a contract's charges over the window it is asked for.
    for (let day = first; day <= last; day += DAY_MS) {
      const amount = await chargedOn(ref, day);
      if (amount !== null)
        days.push({ day: new Date(day).toISOString().slice(0, 10), amount: Math.round(amount * 1e6) / 1e6 });
    }
    return days;
  };

  const toOwn = (instance: VastInstance): OwnMachine => ({
    ref: String(instance.id),
    label: instance.label ?? null,
    state: instanceState(instance).state,
    created_at: instance.start_date ? new Date(instance.start_date * 1000).toISOString() : null,
    price_per_hour: instance.dph_total ?? null,
  });

  /** Sends the create once more after a 429: a rate-limited create was never performed. */
  const sendCreate = async (askId: string, body: Record<string, unknown>): Promise<HttpResponse> => {
    const request = {
      method: "PUT" as const,
      url: url(`/api/v0/asks/${askId}/`),
      body,
      retry: false,
      // vast-cli's default 120 s is "conservative enough for slow operations like instance creation";
      // a create that times out is ambiguous (the caller looks the instance up by label).
      timeoutMs: options.createTimeoutMs ?? 120_000,
    };
    try {
      return await http.send(request);
    } catch (error) {
      if (!(error instanceof ProviderError) || error.kind !== "rate_limited") throw error;
      await sleep(CREATE_RATE_WAIT_MS);
      return http.send(request);
    }
  };

  /** The outcome of a create answer that is not a clean success. */
  const createFailure = (response: HttpResponse, body: CreateResponse | null): RentResult => {
    const text = reason(response);
    const code = body?.error ?? "";
    // The offer race: someone rented it between search and create (404 no_such_ask "not available",
    // or 410 with cancel_unavail) (docs/providers.md#vast-create).
    if (
      response.status === 410 ||
      response.status === 404 ||
      code === "no_such_ask" ||
      /no_such_ask|no longer available|not available/i.test(text)
    ) {
      return { ok: false, kind: "no_capacity", error: text };
    }
    if (response.status === 429) return { ok: false, kind: "rejected", error: `rate limited: ${text}` };
    if (response.status >= 500 || response.json === undefined) {
      // A 5xx or an unreadable answer says nothing about whether the instance was made.
      return { ok: false, kind: "ambiguous", error: `HTTP ${response.status}: ${text}` };
    }
    // Only refusals Vast documents mean "nothing was made"; any other failure (an unknown code,
    // success:false inside a 200 such as "server_error") may sit on a created instance.
    if (response.status === 401 || response.status === 403 || KNOWN_REFUSALS.has(code)) {
      return { ok: false, kind: "rejected", error: text };
    }
    return { ok: false, kind: "ambiguous", error: `HTTP ${response.status}: ${text}` };
  };

  return {
    name: "vast",
    currency: "USD",
    labelled: true,
    billingStartsAt: "accepted",
    minimumBilledMinutes: 0,
    searchBudget: SEARCH_BUDGET,

    validateSpec: vastSpecProblems,

    async listOffers(query: OfferQuery): Promise<ProviderOffer[]> {
      const response = await http.send({
        method: "POST",
        url: url("/api/v0/bundles/"),
        body: bundlesQuery(query, Number(options.minCudaVersion ?? "12.4")),
      });
      if (response.status !== 200) throw http.unexpected(response, "search offers");
      const body = http.parse(response, BundlesResponseSchema, "search offers");
      const offers: ProviderOffer[] = [];
      for (const raw of body.offers) {
        const parsed = VastOfferSchema.safeParse(raw);
        if (!parsed.success) continue;
        const offer = toOffer(parsed.data, query);
        if (offer) offers.push(offer);
      }
      return offers;
    },

    async rent(offer: ProviderOffer, spec: MachineSpec): Promise<RentResult> {
      const askId = vastAskId(offer.offer_id);
      if (!askId) return { ok: false, kind: "rejected", error: `not a Vast offer: ${offer.offer_id}` };
      // The spec as sent (gpulease's own env and the port keys included) against Vast's create limits.
      const problems = vastSpecProblems(spec);
      if (problems.length > 0) return { ok: false, kind: "rejected", error: problems.join("; ") };
      let response: HttpResponse;
      try {
        // Never retried blindly: a repeat after a lost answer could rent a second machine.
        response = await sendCreate(askId, createBody(spec));
      } catch (error) {
        if (error instanceof ProviderError) {
          if (error.kind === "rate_limited") return { ok: false, kind: "rejected", error: error.message };
          return { ok: false, kind: "ambiguous", error: error.message };
        }
        throw error;
      }
      const parsed = CreateResponseSchema.safeParse(response.json);
      const body = parsed.success ? parsed.data : null;
      const contract = body?.new_contract ?? null;
      if (response.status === 200 && body?.success === true && contract !== null) {
        // new_contract is the instance id, not the offer id (docs/providers.md#vast-create).
        return { ok: true, ref: String(contract), price_per_hour: offer.price_per_hour };
      }
      // A 200 that does not parse, or success without an instance id, may hide a made instance.
      if (response.status === 200 && (body === null || (body.success === true && contract === null))) {
        return {
          ok: false,
          kind: "ambiguous",
          error: `create answered 200 without an instance id: ${http.scrub(response.text || "(empty body)")}`,
        };
      }
      const failure = createFailure(response, body);
      if (contract !== null) {
        // Spot docs/providers.md#vast-create: an error can still carry a (stopped, billed-for-disk) instance. Destroy it;
        // if that fails the instance may live on, so the caller must reconcile by label.
        try {
          await destroy(String(contract));
        } catch (error) {
          const why = error instanceof Error ? error.message : String(error);
          return {
            ok: false,
            kind: "ambiguous",
            error: `${failure.ok ? "" : failure.error}; instance ${contract} came with the error and could not be destroyed: ${why}`,
          };
        }
      }
      return failure;
    },

    async status(ref: string): Promise<MachineStatus> {
      const response = await http.send({ method: "GET", url: url(`/api/v0/instances/${instanceId(ref)}/`) });
      // vast-ai/vast-cli treats a 404 as gone (`machines.py` instance_exist); here only with Vast's own error
      // body (docs/providers.md#teardown-evidence): a proxy's or wrong base URL's 404 is a failed read.
      if (response.status === 404 && isGoneEvidence(response)) return goneStatus();
      if (response.status !== 200) throw http.unexpected(response, "show instance");
      const body = http.parse(response, ShowInstanceResponseSchema, "show instance");
      // Deleted instances read as 200 `{"instances": null}`, not 404 (docs/providers.md#vast-instances).
      if (body.instances === null) return goneStatus();
      const instance = body.instances;
      if (String(instance.id) !== ref) throw http.error("parse", `show instance: asked for ${ref}, got ${instance.id}`);
      const { state, error } = instanceState(instance);
      return {
        state,
        access: state === "running" ? instanceAccess(instance) : null,
        // Vast reports no running total; dph_total × uptime would miss storage and traffic.
        cost: null,
        traffic_cost: null,
        price_per_hour: instance.dph_total ?? null,
        error,
      };
    },

    terminate: destroy,

    billedDays,

    async findByLabel(label: string): Promise<OwnMachine | null> {
      const instances = await listAll({ label: { eq: label } });
      const match = instances.find((instance) => instance.label === label);
      return match ? toOwn(match) : null;
    },

    async listOwn(prefix: string, _knownRefs: string[]): Promise<OwnListing> {
      // select_filters has no prefix operator: page through everything and match here.
      const instances = await listAll(null);
      const machines = instances.filter((instance) => instance.label?.startsWith(prefix) === true).map(toOwn);
      return { machines, next: null };
    },

    async balance(): Promise<Balance> {
      const response = await http.send({ method: "GET", url: url("/api/v0/users/current/") });
      // This body echoes the account's api_key (docs/providers.md#vast-account): only `credit` is ever read, and error
      // text goes through scrub() which redacts key-shaped fields.
      if (response.status !== 200) throw http.unexpected(response, "read account");
      const body = http.parse(response, UserResponseSchema, "read account");
      return { amount: body.credit ?? body.balance ?? 0, currency: "USD" };
    },

    async ollamaProbe(_ref: string, status: MachineStatus, model: string | null): Promise<OllamaProbe> {
      const ollama = status.state === "running" ? status.access?.urls[0] : undefined;
      return ollama ? probeOllama(ollama, model, fetchImpl) : { phase: "down" };
    },
  };
}

/** Vast's own word that an instance does not exist: `no_such_instance` (dstack) or `not_found` (docs). */
function isGoneEvidence(response: HttpResponse): boolean {
  const body = DestroyResponseSchema.safeParse(response.json);
  return body.success && (body.data.error === "no_such_instance" || body.data.error === "not_found");
}

function goneStatus(): MachineStatus {
  return { state: "gone", access: null, cost: null, traffic_cost: null, price_per_hour: null, error: null };
}
