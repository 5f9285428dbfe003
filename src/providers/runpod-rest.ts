import { gpuSpecFor } from "./gpus";
import { CursorRefusedError, HttpClient, type HttpResponse, ProviderError } from "./http";
import { OLLAMA_PORT, probeOllama } from "./ollama";
import { OLLAMA_START_ENTRYPOINT, OLLAMA_START_SCRIPT, pullsModel } from "./ollama-start";
import {
  CREATE_RATE_LIMIT_WAIT_MS,
  clouds,
  httpPortsOf,
  type ParsedOffer,
  parseOfferId,
  podEnv,
  podPorts,
  podProxyUrl,
  round4,
  SSH_PORT,
  shellQuote,
} from "./runpod";
import {
  BillingSchema,
  type CatalogGpu,
  CatalogGpuSchema,
  CatalogSchema,
  isNoCapacityDetail,
  isPodNotFound,
  PodListSchema,
  problemOf,
  type RestPod,
  RestPodSchema,
} from "./runpod-rest-wire";
import type {
  Access,
  Balance,
  BilledDay,
  MachineSpec,
  MachineState,
  MachineStatus,
  OfferQuery,
  OwnListing,
  OwnMachine,
  Provider,
  ProviderOffer,
  RentResult,
} from "./types";

export interface RunpodRestOptions {
  apiKey: string;
  /** RUNPOD_API_URL, e.g. https://api.runpod.io (paths /v2/...) */
  baseUrl: string;
  proxyTemplate: string;
  /** MIN_CUDA_VERSION, "major.minor" */
  minCudaVersion: string;
  /**
   * RUNPOD_REST_COMMAND_FIELDS: `cmd` sends `cmd`/`entrypoint` arrays (the newest runpod/runpodctl,
   * `internal/api/podcreate_v2.go`); `args` one `args` string (the kept document, runpodctl's
   * `internal/api/pods_v2.go`). RunPod refuses the form it does not take with a 422.
   */
  commandFields?: "cmd" | "args";
  /** the balance: REST v2 has no balance endpoint, so it still comes from GraphQL while that lives */
  balance: () => Promise<Balance>;
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<void>;
  timeoutMs?: number;
  retries?: number;
}

const STOCKED = new Set(["LOW", "MEDIUM", "HIGH"]);

/** Pods asked for per page: what runpodctl's ListPodsV2 asks. RunPod may answer fewer. */
const POD_PAGE_LIMIT = 1000;

/**
 * Pages one pod listing reads per call at most (docs/providers.md#runpod-rest-pages): bounds the
 * subrequests and the time of one reaper run or label lookup. listOwn hands back the cursor where
 * it stopped; findByLabel throws, since a lookup that saw part of the account proves nothing.
 */
export const POD_PAGES_PER_CALL = 10;

/** What a refused listing cursor (expired, unknown) can come back as, with RunPod's problem body. */
const CURSOR_REFUSALS = new Set([400, 404, 410, 422]);

/**
 * RunPod over REST v2 (docs/providers.md#runpod-rest-v2): catalogue stock per cloud and GPU
 * count, pods by id, own pods by the label prefix on `name`, problem+json errors.
 */
export function createRunpodRestProvider(options: RunpodRestOptions): Provider {
  const http = new HttpClient({
    provider: "runpod",
    apiKey: options.apiKey,
    fetch: options.fetch,
    sleep: options.sleep,
    timeoutMs: options.timeoutMs,
    retries: options.retries,
  });
  const fetchImpl = options.fetch ?? ((input: RequestInfo | URL, init?: RequestInit) => fetch(input, init));
  const url = (path: string) => `${options.baseUrl}${path}`;
  const proxyUrl = (podId: string, port: number) => podProxyUrl(options.proxyTemplate, podId, port);
  const problem = (response: HttpResponse) => problemOf(response.status, response.json);

  /** Any status but `ok` throws: a problem+json detail when RunPod sent one, else its raw text. */
  function expect(response: HttpResponse, ok: number, what: string): void {
    if (response.status === ok) return;
    const body = problem(response);
    if (body) {
      const kind = response.status === 401 || response.status === 403 ? "auth" : "api";
      throw http.error(kind, `${what}: HTTP ${response.status}: ${body.detail}`, response.status);
    }
    throw http.unexpected(response, what);
  }

  /** One catalogue read: stock depends on the cloud and the GPU count, so each pair is asked. */
  async function catalog(cloud: (typeof clouds)[number], count: number): Promise<CatalogGpu[]> {
    const query = new URLSearchParams({
      include: "AVAILABILITY",
      product: "POD",
      count: String(count),
      cloud,
      minCudaVersion: options.minCudaVersion,
    });
    const response = await http.send({ method: "GET", url: url(`/v2/catalog/gpus?${query}`) });
    expect(response, 200, `gpu catalogue (${cloud})`);
    // A GPU type RunPod adds with a field we do not expect is skipped, never the whole cloud.
    return http.parse(response, CatalogSchema, `gpu catalogue (${cloud})`).gpus.flatMap((entry) => {
      const gpu = CatalogGpuSchema.safeParse(entry);
      return gpu.success ? [gpu.data] : [];
    });
  }

  async function listOffers(query: OfferQuery): Promise<ProviderOffer[]> {
    const count = query.gpu_count ?? 1;
    const perCloud = await Promise.all(clouds.map(async (cloud) => ({ cloud, gpus: await catalog(cloud, count) })));
    const nameFilter = query.gpu?.toLowerCase();
    const offers: ProviderOffer[] = [];
    for (const { cloud, gpus } of perCloud) {
      const key = cloud === "SECURE" ? "secure" : "community";
      for (const gpu of gpus) {
        // The catalogue is not stock: only LOW/MEDIUM/HIGH for this cloud and count can be rented.
        const availability = gpu.availability?.toUpperCase();
        if (!availability || !STOCKED.has(availability)) continue;
        if (!gpu[key]) continue;
        // AMD cards cannot run the CUDA images we start.
        if (gpu.manufacturer.toUpperCase() === "AMD") continue;
        const maxCount = gpu.maxCount[key];
        if (maxCount != null && maxCount < count) continue;
        const pricePerGpu = gpu.price[key];
        if (!pricePerGpu || pricePerGpu <= 0) continue;
        const vram = gpu.memory * count;
        if (query.vram_gb !== undefined && vram < query.vram_gb) continue;
        if (nameFilter && !gpu.name.toLowerCase().includes(nameFilter) && !gpu.id.toLowerCase().includes(nameFilter))
          continue;
        const price = round4(pricePerGpu * count);
        if (query.max_price_usd !== undefined && price > query.max_price_usd) continue;
        offers.push({
          offer_id: count === 1 ? `runpod:${cloud}:${gpu.id}` : `runpod:${cloud}:${gpu.id}:${count}`,
          provider: "runpod",
          gpu: gpu.name,
          // Matched on the GPU id: display names differ across RunPod's own endpoints.
          gpu_key: gpuSpecFor("runpod", gpu.id)?.key ?? null,
          gpu_count: count,
          vram_gb: vram,
          price_per_hour: price,
          currency: "USD",
          cloud,
          availability: availability.toLowerCase(),
          location: null,
          bandwidth_gbs: null,
          download_mbs: null,
          download_cost_per_gb: 0,
          min_billed_minutes: 0,
          templates: ["ollama", "custom"],
        });
      }
    }
    return offers;
  }

  /**
   * `CreatePodRequest` has `unevaluatedProperties: false`: only fields the schema names. There is
   * no terminateAfter, no public-IP flag and no host RAM/vCPU minimum in v2 (so no leaner retry).
   */
  function createBody(offer: ParsedOffer, spec: MachineSpec): Record<string, unknown> {
    const ports = podPorts(spec);
    return {
      name: spec.label,
      image: spec.image,
      ...commandOf(spec, options.commandFields ?? "cmd"),
      disk: Math.max(25, spec.disk_gb),
      env: podEnv(spec),
      ports,
      cloud: offer.cloud,
      // A host with an older driver bills while the image never starts.
      gpu: { id: offer.gpuTypeId, count: offer.gpuCount, minCudaVersion: options.minCudaVersion },
      ...(ports.includes(`${SSH_PORT}/tcp`) ? { startSsh: true } : {}),
    };
  }

  async function rent(offer: ProviderOffer, spec: MachineSpec): Promise<RentResult> {
    const parsed = parseOfferId(offer.offer_id);
    if (!parsed) return { ok: false, kind: "rejected", error: `not a RunPod offer: ${offer.offer_id}` };
    // A community host without a public IP never maps a TCP port, and v2 has no flag to ask for
    // one: a lease that asks for ssh (port 22) rents on SECURE only, refused here before any create.
    if (parsed.cloud === "COMMUNITY" && spec.ports.includes(SSH_PORT))
      return {
        ok: false,
        kind: "rejected",
        error: "a lease that asks for ssh (port 22) rents on SECURE only: a COMMUNITY host may have no public IP",
      };
    let response: HttpResponse;
    try {
      // Never repeated blindly: a create that failed in transit may have made a pod. A 429 was
      // refused before anything was made: it is sent again after Retry-After, within the budget.
      response = await http.send({
        method: "POST",
        url: url("/v2/pods"),
        body: createBody(parsed, spec),
        retry: false,
        rateLimitWaitMs: CREATE_RATE_LIMIT_WAIT_MS,
      });
    } catch (cause) {
      if (!(cause instanceof ProviderError)) throw cause;
      // A 429 that outlasted the budget made nothing; a timeout, network failure or 5xx may hide a pod.
      return { ok: false, kind: cause.kind === "rate_limited" ? "rejected" : "ambiguous", error: cause.message };
    }
    if (response.status === 201 || response.status === 200) {
      const pod = RestPodSchema.safeParse(response.json);
      if (pod.success) return { ok: true, ref: pod.data.id, price_per_hour: runningPrice(pod.data) };
      return { ok: false, kind: "ambiguous", error: `create pod: HTTP ${response.status} without a readable pod` };
    }
    const body = problem(response);
    const error = http.scrub(
      `create pod: HTTP ${response.status}: ${body ? body.detail : response.text || "(empty body)"}`,
    );
    // Create does not search for capacity or fall back: no capacity is a 400 whose detail says so.
    if (response.status === 400 && body && isNoCapacityDetail(body.detail))
      return { ok: false, kind: "no_capacity", error };
    // 400/402/404/422 with RunPod's own problem body, and 401/403: refused before anything was made.
    if (body && response.status >= 400 && response.status < 500) return { ok: false, kind: "rejected", error };
    if (response.status === 401 || response.status === 403) return { ok: false, kind: "rejected", error };
    return { ok: false, kind: "ambiguous", error };
  }

  function accessOf(pod: RestPod): Access {
    const httpPorts = httpPortsOf(pod.ports ?? []);
    // HTTP ports are reached only through the proxy; ssh through its published 22/tcp mapping.
    const urls = [...httpPorts].map((port) => proxyUrl(pod.id, port));
    const direct = pod.ssh?.direct;
    return { urls, ssh: direct ? { host: direct.host, port: direct.port } : null };
  }

  async function status(ref: string): Promise<MachineStatus> {
    const response = await http.send({ method: "GET", url: url(`/v2/pods/${encodeURIComponent(ref)}`) });
    // Gone only on RunPod's own word: a 404 whose problem body says "pod not found". An HTML 404
    // (a proxy) or an unknown route's 404 (a wrong base URL) throws below: in doubt the pod bills.
    if (isPodNotFound(response.status, response.json)) return goneStatus();
    expect(response, 200, "pod status");
    const pod = http.parse(response, RestPodSchema, "pod status");
    const state = restStateOf(pod);
    const exists = state !== "gone";
    return {
      state,
      access: exists && state !== "exited" ? accessOf(pod) : null,
      cost: null,
      traffic_cost: null,
      price_per_hour: exists ? runningPrice(pod) : null,
      error: state === "exited" ? `RunPod: ${pod.status}` : null,
    };
  }

  async function terminate(ref: string): Promise<void> {
    const response = await http.send({ method: "DELETE", url: url(`/v2/pods/${encodeURIComponent(ref)}`) });
    if (response.status === 204 || response.status === 200) return;
    // Already gone is success, but only with RunPod's own "pod not found"; a locked pod (409) is not gone.
    if (isPodNotFound(response.status, response.json)) return;
    expect(response, 204, "terminate pod");
  }

  /**
   * The account's pods page by page, as runpodctl's ListPodsV2 reads them: `limit`, then
   * `cursor=<nextCursor>` while `hasNextPage`; no name filter in v2. At most POD_PAGES_PER_CALL
   * pages: `next` is where a listing cut short goes on. A pod created seconds ago may be missing
   * (listing lag): callers reconciling an ambiguous create look again later.
   */
  async function podPages(from: string | null): Promise<{ pods: RestPod[]; next: string | null }> {
    const pods: RestPod[] = [];
    const seen = new Set(from === null ? [] : [from]);
    let cursor = from;
    for (let page = 0; page < POD_PAGES_PER_CALL; page++) {
      const query = new URLSearchParams({ limit: String(POD_PAGE_LIMIT) });
      if (cursor !== null) query.set("cursor", cursor);
      const response = await http.send({ method: "GET", url: url(`/v2/pods?${query}`) });
      const refusal = cursor !== null && CURSOR_REFUSALS.has(response.status) ? problem(response) : null;
      if (refusal) {
        const message = `list pods: the cursor was refused: HTTP ${response.status}: ${refusal.detail}`;
        throw new CursorRefusedError("runpod", http.scrub(message), response.status);
      }
      expect(response, 200, "list pods");
      const body = http.parse(response, PodListSchema, "list pods");
      pods.push(...body.pods);
      if (!body.pagination?.hasNextPage) return { pods, next: null };
      const next = body.pagination.nextCursor;
      // runpodctl stops with an error here too: another page that cannot be asked for.
      if (!next) throw http.error("parse", "list pods: hasNextPage without a nextCursor");
      if (seen.has(next)) throw http.error("api", "list pods: nextCursor repeats; paging would never end");
      seen.add(next);
      cursor = next;
    }
    return { pods, next: cursor };
  }

  const ownMachine = (pod: RestPod): OwnMachine => ({
    ref: pod.id,
    label: pod.name ?? null,
    state: restStateOf(pod),
    created_at: pod.createdAt ?? null,
    price_per_hour: runningPrice(pod),
  });

  async function findByLabel(label: string): Promise<OwnMachine | null> {
    const { pods, next } = await podPages(null);
    // "Not found" from part of the account would read as "no pod was made" and leak one that bills.
    if (next !== null)
      throw http.error("api", `list pods: more than ${POD_PAGES_PER_CALL} pages; the label lookup saw only part`);
    // RunPod does not enforce unique names: prefer a pod that still exists.
    const matches = pods.filter((pod) => pod.name === label).map(ownMachine);
    return matches.find((m) => m.state !== "gone") ?? matches[0] ?? null;
  }

  async function listOwn(prefix: string, from: string | null): Promise<OwnListing> {
    const { pods, next } = await podPages(from);
    return { machines: pods.filter((pod) => pod.name?.startsWith(`${prefix}-`)).map(ownMachine), next };
  }

  async function billedDays(ref: string, from: string, to: string): Promise<BilledDay[]> {
    const query = new URLSearchParams({
      podId: ref,
      bucketSize: "day",
      startTime: dayStart(from),
      endTime: to,
    });
    const response = await http.send({ method: "GET", url: url(`/v2/billing/pods?${query}`) });
    expect(response, 200, "pod billing");
    const days = new Map<string, number>();
    for (const record of http.parse(response, BillingSchema, "pod billing").records) {
      if (record.podId !== ref) continue;
      const day = record.startTime.slice(0, 10);
      days.set(day, (days.get(day) ?? 0) + record.totalAmount);
    }
    return [...days].map(([day, amount]) => ({ day, amount: round4(amount) }));
  }

  return {
    name: "runpod",
    currency: "USD",
    labelled: true,
    billingStartsAt: "accepted",
    minimumBilledMinutes: 0,
    listOffers,
    rent,
    status,
    terminate,
    findByLabel,
    listOwn: (prefix, _knownRefs, from) => listOwn(prefix, from ?? null),
    balance: options.balance,
    billedDays,
    // The proxy answers 502 until Ollama listens, and a RUNNING pod may not be ready for minutes.
    ollamaProbe: (ref, _status, model) => probeOllama(proxyUrl(ref, OLLAMA_PORT), model, fetchImpl),
  };
}

/**
 * The container command of a create, in the form RunPod is set to take. Nothing is sent for an
 * image that runs as built (Ollama's own `serve`). A custom command replaces the image CMD, as
 * `bash -c`; a model lease's container runs the start script under `/bin/sh -c` so it pulls its
 * model itself. One `args` string cannot replace an ENTRYPOINT, so that form carries the
 * `{"cmd": [...], "entrypoint": [...]}` JSON that RunPod's backend decodes from a docker-args
 * string (runpod/runpodctl `internal/api/podcreate_v2.go` `ParseDockerArgs`).
 */
function commandOf(spec: MachineSpec, fields: "cmd" | "args"): Record<string, unknown> {
  if (pullsModel(spec)) {
    const start = { entrypoint: OLLAMA_START_ENTRYPOINT, cmd: [OLLAMA_START_SCRIPT] };
    return fields === "cmd" ? start : { args: JSON.stringify({ cmd: start.cmd, entrypoint: start.entrypoint }) };
  }
  if (spec.template !== "custom" || !spec.cmd) return {};
  return fields === "cmd" ? { cmd: ["bash", "-c", spec.cmd] } : { args: `bash -c ${shellQuote(spec.cmd)}` };
}

/**
 * A REST v2 pod's state. v2 says RUNNING from the moment of creation, several polls before the
 * container runs: `runtime` (with uptime or ports) is what proves it runs, never `status`.
 */
export function restStateOf(pod: RestPod): MachineState {
  switch (pod.status) {
    case "TERMINATED":
      return "gone";
    case "EXITED":
    case "ERROR":
      return "exited";
  }
  const runtime = pod.runtime;
  if (!runtime) return "booting";
  const hasPorts = (runtime.ports?.length ?? 0) > 0;
  // RunPod's own create example shows `runtime: {}`: no uptime, no ports, not running.
  return hasPorts || (runtime.uptime ?? 0) > 0 ? "running" : "booting";
}

/** `cost` is the price while the pod bills; a 0.0 from a stopping or stopped pod is not a price. */
function runningPrice(pod: RestPod): number | null {
  if (pod.status === "EXITED" || pod.status === "TERMINATED" || pod.status === "ERROR") return null;
  return pod.cost && pod.cost > 0 ? pod.cost : null;
}

function goneStatus(): MachineStatus {
  return { state: "gone", access: null, cost: null, traffic_cost: null, price_per_hour: null, error: null };
}

function dayStart(iso: string): string {
  return `${iso.slice(0, 10)}T00:00:00Z`;
}
