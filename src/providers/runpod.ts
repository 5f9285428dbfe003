import type { z } from "zod";
import { gpuSpecFor } from "./gpus";
import { HttpClient, ProviderError } from "./http";
import { OLLAMA_PORT, probeOllama } from "./ollama";
import { OLLAMA_START_ENTRYPOINT, OLLAMA_START_SCRIPT, pullsModel } from "./ollama-start";
import {
  BALANCE_QUERY,
  BalanceDataSchema,
  DEPLOY_MUTATION,
  DeployDataSchema,
  errorText,
  GraphqlEnvelopeSchema,
  type GraphqlError,
  isNoCapacity,
  isPodNotFound,
  isUnauthorized,
  MY_PODS_QUERY,
  MyPodsDataSchema,
  OFFERS_QUERY,
  OffersDataSchema,
  POD_QUERY,
  type Pod,
  PodDataSchema,
  TERMINATE_MUTATION,
  TerminateDataSchema,
} from "./runpod-graphql";
import { type HostSizing, hostSizing, leanHostSizing } from "./sizing";
import type {
  Access,
  Balance,
  MachineSpec,
  MachineState,
  MachineStatus,
  OfferQuery,
  OllamaProbe,
  OwnListing,
  OwnMachine,
  Provider,
  ProviderOffer,
  RentResult,
} from "./types";

export interface RunpodOptions {
  apiKey: string;
  /** the GraphQL endpoint, RUNPOD_GRAPHQL_URL */
  url: string;
  /** how an HTTP port is reached, RUNPOD_PROXY_TEMPLATE, with `{id}` and `{port}` */
  proxyTemplate: string;
  /** MIN_CUDA_VERSION: hosts with an older driver are not rented */
  minCudaVersion?: string;
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<void>;
  timeoutMs?: number;
  retries?: number;
  now?: () => number;
}

export const SSH_PORT = 22;
export const clouds = ["SECURE", "COMMUNITY"] as const;
export type Cloud = (typeof clouds)[number];

// runpodctl's order (betterStock): High > Medium > Low. null or "None" means no stock at all.
const STOCK_RANK: Record<string, number> = { high: 3, medium: 2, low: 1 };

interface GraphqlAnswer {
  data: Record<string, unknown> | null;
  errors: GraphqlError[];
}

export interface ParsedOffer {
  cloud: Cloud;
  gpuTypeId: string;
  gpuCount: number;
}

/**
 * The RunPod adapter: GraphQL over the shared HttpClient. RunPod retires GraphQL in early 2027
 * for REST v2 (docs/providers.md#runpod-rest-v2); everything GraphQL-shaped stays in this file and
 * runpod-graphql.ts so the transport can be swapped behind the Provider interface.
 */
/**
 * How long one create may wait out RunPod's 429s (`Retry-After`, seconds: "back off using
 * Retry-After, then resume"; the document's example window is 12 s). Below the rent's own
 * deadline (`RENT_DEADLINE_MS`, 15 s); the same over GraphQL, so a burst delays the rental instead of failing the offer.
 */
export const CREATE_RATE_LIMIT_WAIT_MS = 12_000;

export function createRunpodProvider(options: RunpodOptions): Provider {
  const http = new HttpClient({
    provider: "runpod",
    apiKey: options.apiKey,
    fetch: options.fetch,
    sleep: options.sleep,
    timeoutMs: options.timeoutMs,
    retries: options.retries,
  });
  const fetchImpl = options.fetch ?? ((input: RequestInfo | URL, init?: RequestInit) => fetch(input, init));
  const now = options.now ?? Date.now;

  const proxyUrl = (podId: string, port: number) => podProxyUrl(options.proxyTemplate, podId, port);

  /**
   * One GraphQL call. RunPod answers application errors with HTTP 200 and an `errors` array
   * (dstack: "Runpod returns 200 on client errors"), so the caller always gets `errors` to judge;
   * schema and variable errors come as HTTP 400 and a bad key as 401, which throw here.
   */
  async function graphql(
    what: string,
    query: string,
    variables?: Record<string, unknown>,
    retry = true,
    rateLimitWaitMs?: number,
  ): Promise<GraphqlAnswer> {
    const response = await http.send({
      method: "POST",
      url: options.url,
      body: { query, variables },
      retry,
      rateLimitWaitMs,
    });
    if (response.status === 400) {
      const body = GraphqlEnvelopeSchema.safeParse(response.json);
      const reason =
        body.success && body.data.errors?.length ? errorText(body.data.errors) : response.text || "(empty body)";
      throw http.error("api", `${what}: HTTP 400: ${reason}`, 400);
    }
    if (response.status !== 200) throw http.unexpected(response, what);
    const body = http.parse(response, GraphqlEnvelopeSchema, what);
    return { data: body.data ?? null, errors: body.errors ?? [] };
  }

  /** The data of an answer that must carry no errors, parsed; errors and odd shapes throw. */
  function dataOf<T extends z.ZodType>(answer: GraphqlAnswer, schema: T, what: string): z.output<T> {
    if (answer.errors.length > 0) {
      // A key without the needed permission: HTTP 200 "Unauthorized" (skypilot #8411), not 401.
      const kind = answer.errors.some(isUnauthorized) ? "auth" : "api";
      throw http.error(kind, `${what}: ${errorText(answer.errors)}`, 200);
    }
    const parsed = schema.safeParse(answer.data);
    if (!parsed.success) {
      const first = parsed.error.issues[0];
      throw http.error(
        "parse",
        `${what}: unexpected shape at ${first?.path.join(".") || "(root)"}: ${first?.message ?? "invalid"}`,
        200,
      );
    }
    return parsed.data;
  }

  async function listOffers(query: OfferQuery): Promise<ProviderOffer[]> {
    const count = query.gpu_count ?? 1;
    const variables = { count, minCuda: options.minCudaVersion ?? null };
    const data = dataOf(await graphql("gpu offers", OFFERS_QUERY, variables), OffersDataSchema, "gpu offers");
    const nameFilter = query.gpu?.toLowerCase();
    const offers: ProviderOffer[] = [];
    for (const type of data.gpuTypes) {
      // AMD cards cannot run the CUDA images we start.
      if (type.manufacturer?.toLowerCase() === "amd" || /^(amd\b|mi\d)/i.test(type.displayName)) continue;
      if (type.maxGpuCount != null && type.maxGpuCount < count) continue;
      const vram = (type.memoryInGb ?? 0) * count;
      if (query.vram_gb !== undefined && vram < query.vram_gb) continue;
      if (
        nameFilter &&
        !type.displayName.toLowerCase().includes(nameFilter) &&
        !type.id.toLowerCase().includes(nameFilter)
      )
        continue;
      for (const cloud of clouds) {
        const secure = cloud === "SECURE";
        const inCloud = secure ? type.secureCloud : type.communityCloud;
        const pricePerGpu = secure ? type.securePrice : type.communityPrice;
        const maxInCloud = secure ? type.maxGpuCountSecureCloud : type.maxGpuCountCommunityCloud;
        // gpuTypes is the catalogue, not the stock: only this cloud's stock for this count counts.
        // null or "None" means no stock at all (gpuhunt drops those).
        const availability = (secure ? type.secureStock : type.communityStock)?.stockStatus?.toLowerCase();
        if (!availability || !(availability in STOCK_RANK)) continue;
        if (!inCloud || !pricePerGpu || pricePerGpu <= 0) continue;
        if (maxInCloud != null && maxInCloud < count) continue;
        const price = round4(pricePerGpu * count);
        if (query.max_price_usd !== undefined && price > query.max_price_usd) continue;
        offers.push({
          offer_id: count === 1 ? `runpod:${cloud}:${type.id}` : `runpod:${cloud}:${type.id}:${count}`,
          provider: "runpod",
          gpu: type.displayName,
          // Matched on gpuTypeId: display names differ across RunPod's own endpoints.
          gpu_key: gpuSpecFor("runpod", type.id)?.key ?? null,
          gpu_count: count,
          vram_gb: vram,
          price_per_hour: price,
          currency: "USD",
          cloud,
          availability,
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

  function deployInput(offer: ParsedOffer, spec: MachineSpec, sizing: HostSizing): Record<string, unknown> {
    const env = podEnv(spec);
    const ports = podPorts(spec);
    return {
      name: spec.label,
      cloudType: offer.cloud,
      gpuTypeId: offer.gpuTypeId,
      gpuCount: offer.gpuCount,
      imageName: spec.image,
      // ports go in (and come out) as one comma-separated string; env goes in as {key,value}.
      ports: ports.join(","),
      env: Object.entries(env).map(([key, value]) => ({ key, value })),
      // dockerArgs replaces the image CMD; "" keeps the image default (Ollama's `serve`).
      dockerArgs: pullsModel(spec)
        ? // dstack's form for an entrypoint override on GraphQL: the container pulls its model itself.
          JSON.stringify({ cmd: [OLLAMA_START_SCRIPT], entrypoint: OLLAMA_START_ENTRYPOINT })
        : spec.template === "custom" && spec.cmd
          ? `bash -c ${shellQuote(spec.cmd)}`
          : "",
      containerDiskInGb: Math.max(sizing.diskGb, spec.disk_gb),
      // dstack always sends it: a host with an old driver bills while the image never starts.
      ...(options.minCudaVersion ? { minCudaVersion: options.minCudaVersion } : {}),
      // A community pod's TCP ports (ssh) need a public IP; secure pods always have one (runpodctl).
      ...(offer.cloud === "COMMUNITY" && ports.some((p) => p.endsWith("/tcp")) ? { supportPublicIp: true } : {}),
      minVcpuCount: sizing.vcpus,
      minMemoryInGb: sizing.ramGb,
      volumeInGb: 0,
      // A courtesy only: RunPod accepts terminateAfter but does not enforce it (runpod/docs #820);
      // our reaper is what ends the pod. The DateTime scalar wants ISO, not "1h".
      terminateAfter: new Date(now() + (spec.max_minutes + 60) * 60_000).toISOString(),
    };
  }

  async function deploy(offer: ParsedOffer, spec: MachineSpec, sizing: HostSizing): Promise<RentResult> {
    let answer: GraphqlAnswer;
    try {
      // Never repeated blindly: a create that failed in transit may have made a pod. A 429 was
      // refused at the door, so it is waited out within the rent's deadline, as over REST.
      const input = { input: deployInput(offer, spec, sizing) };
      answer = await graphql("create pod", DEPLOY_MUTATION, input, false, CREATE_RATE_LIMIT_WAIT_MS);
    } catch (cause) {
      if (!(cause instanceof ProviderError)) throw cause;
      return { ok: false, kind: createFailureKind(cause), error: cause.message };
    }
    const parsed = DeployDataSchema.safeParse(answer.data ?? {});
    const pod = parsed.success ? parsed.data.podFindAndDeployOnDemand : null;
    // An id means a pod exists and bills, whatever errors ride along.
    if (pod?.id) return { ok: true, ref: pod.id, price_per_hour: pod.costPerHr ?? null };
    if (answer.errors.length > 0) {
      const error = http.scrub(errorText(answer.errors));
      if (answer.errors.some(isNoCapacity)) return { ok: false, kind: "no_capacity", error };
      // A key without permission is refused at the door.
      if (answer.errors.some(isUnauthorized)) return { ok: false, kind: "rejected", error };
      // Anything else may sit on a pod: "Something went wrong" has come with the pod starting
      // (runpodctl #45), with or without extensions.code, so the caller looks it up by label.
      return { ok: false, kind: "ambiguous", error };
    }
    return { ok: false, kind: "ambiguous", error: "create pod: RunPod answered without a pod id" };
  }

  async function rent(offer: ProviderOffer, spec: MachineSpec): Promise<RentResult> {
    const parsed = parseOfferId(offer.offer_id);
    if (!parsed) return { ok: false, kind: "rejected", error: `not a RunPod offer: ${offer.offer_id}` };
    const first = await deploy(parsed, spec, hostSizing(spec.weights_gb));
    if (first.ok || first.kind !== "no_capacity") return first;
    // Exactly one leaner try: hosts with a free GPU often lack the RAM/vCPU we asked for.
    return deploy(parsed, spec, leanHostSizing(spec.weights_gb));
  }

  function accessOf(pod: Pod): Access {
    const httpPorts = httpPortsOf((pod.ports ?? "").split(","));
    for (const port of pod.runtime?.ports ?? []) if (port.type === "http") httpPorts.add(port.privatePort);
    // HTTP ports show an internal 100.65.x.x address (isIpPublic false): only the proxy reaches them.
    const urls = [...httpPorts].map((port) => proxyUrl(pod.id, port));
    const ssh = pod.runtime?.ports?.find(
      (p) => p.privatePort === SSH_PORT && p.type === "tcp" && p.isIpPublic && p.ip && p.publicPort,
    );
    return { urls, ssh: ssh ? { host: ssh.ip!, port: ssh.publicPort! } : null };
  }

  function statusOf(pod: Pod | null): MachineStatus {
    const state = stateOf(pod);
    const exists = pod !== null && state !== "gone";
    return {
      state,
      access: exists && state !== "exited" ? accessOf(pod) : null,
      cost: null, // RunPod reports no cost so far per pod
      traffic_cost: null,
      price_per_hour: exists ? (pod.costPerHr ?? null) : null,
      error:
        state === "exited"
          ? `RunPod: ${pod?.desiredStatus}${pod?.lastStatusChange ? ` (${pod.lastStatusChange})` : ""}`
          : null,
    };
  }

  async function status(ref: string): Promise<MachineStatus> {
    // Any failed or unreadable answer throws: in doubt the pod still runs and still bills.
    const data = dataOf(await graphql("pod status", POD_QUERY, { input: { podId: ref } }), PodDataSchema, "pod status");
    return statusOf(data.pod);
  }

  async function terminate(ref: string): Promise<void> {
    const answer = await graphql("terminate pod", TERMINATE_MUTATION, { input: { podId: ref } });
    // A repeat answers "pod not found to terminate": already gone is success. podTerminate
    // returns null even when it worked (no receipt), so only status() proves the pod is gone.
    if (answer.errors.length > 0 && answer.errors.every(isPodNotFound)) return;
    const data = dataOf(answer, TerminateDataSchema, "terminate pod");
    if (!data || !("podTerminate" in data))
      throw http.error("parse", "terminate pod: answer without podTerminate", 200);
  }

  /**
   * The account's pods. `myself: null` means no (valid) key, never "no pods". A pod created a
   * few seconds ago may be missing here (listing lag, docs/providers.md#runpod-ambiguous-create): callers reconciling after an
   * ambiguous create must look again before concluding nothing was made.
   */
  async function myPods(): Promise<Pod[]> {
    const data = dataOf(await graphql("list pods", MY_PODS_QUERY), MyPodsDataSchema, "list pods");
    if (!data.myself)
      throw http.error("auth", "list pods: RunPod answered myself: null (API key missing or invalid)", 200);
    return data.myself.pods ?? [];
  }

  function ownMachine(pod: Pod): OwnMachine {
    return {
      ref: pod.id,
      label: pod.name ?? null,
      state: stateOf(pod),
      created_at: rentedAtOf(pod.lastStatusChange),
      price_per_hour: pod.costPerHr ?? null,
    };
  }

  async function findByLabel(label: string): Promise<OwnMachine | null> {
    // RunPod does not enforce unique names: prefer a pod that still exists.
    const matches = (await myPods()).filter((pod) => pod.name === label).map(ownMachine);
    return matches.find((m) => m.state !== "gone") ?? matches[0] ?? null;
  }

  /** `myself { pods }` takes no paging arguments (runpod/runpodctl `api/pod.go` myPods): one read is the whole account. */
  async function listOwn(prefix: string): Promise<OwnListing> {
    const machines = (await myPods()).filter((pod) => pod.name?.startsWith(`${prefix}-`)).map(ownMachine);
    return { machines, next: null };
  }

  async function balance(): Promise<Balance> {
    const data = dataOf(await graphql("balance", BALANCE_QUERY), BalanceDataSchema, "balance");
    if (!data.myself)
      throw http.error("auth", "balance: RunPod answered myself: null (API key missing or invalid)", 200);
    return { amount: data.myself.clientBalance, currency: "USD" };
  }

  function ollamaProbe(ref: string, model: string | null): Promise<OllamaProbe> {
    // The proxy answers 502 until Ollama listens, and a RUNNING pod may not be ready for minutes.
    return probeOllama(proxyUrl(ref, OLLAMA_PORT), model, fetchImpl);
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
    listOwn: (prefix) => listOwn(prefix),
    balance,
    ollamaProbe: (ref, _status, model) => ollamaProbe(ref, model),
  };
}

/**
 * A pod's state by the rules in docs/providers.md#runpod-readiness. `desiredStatus` is what RunPod wants, not what is:
 * RUNNING with `runtime: null` is billed but not started (image pull, or never: stuck booting).
 */
export function stateOf(pod: Pod | null): MachineState {
  if (!pod || pod.desiredStatus === "TERMINATED") return "gone";
  if (pod.desiredStatus === "EXITED" || pod.desiredStatus === "DEAD") return "exited";
  if (!pod.runtime) return "booting";
  // runtime appears with uptime 0 and ports null while the image is still being pulled.
  const hasPorts = (pod.runtime.ports?.length ?? 0) > 0;
  return hasPorts || (pod.runtime.uptimeInSeconds ?? 0) > 0 ? "running" : "booting";
}

/** The pod's environment, for both transports (as an object; GraphQL turns it into {key, value}). */
export function podEnv(spec: MachineSpec): Record<string, string> {
  return spec.template === "ollama"
    ? {
        OLLAMA_KEEP_ALIVE: "-1",
        ...spec.env,
        // Without it Ollama listens on 127.0.0.1 and the proxy never reaches it.
        OLLAMA_HOST: "0.0.0.0",
        ...(spec.context_length ? { OLLAMA_CONTEXT_LENGTH: String(spec.context_length) } : {}),
      }
    : { ...spec.env };
}

/** `["11434/http"]` for Ollama; a custom lease's ports as http plus ssh as `22/tcp`. */
export function podPorts(spec: MachineSpec): string[] {
  return spec.template === "ollama"
    ? [`${OLLAMA_PORT}/http`]
    : [...new Set(spec.ports.filter((p) => p !== SSH_PORT))].map((p) => `${p}/http`).concat(`${SSH_PORT}/tcp`);
}

/** `runpod:<CLOUD>:<gpuTypeId>` for one GPU, `runpod:<CLOUD>:<gpuTypeId>:<count>` for more. */
export function parseOfferId(offerId: string): ParsedOffer | null {
  const match = /^runpod:(SECURE|COMMUNITY):(.+?)(?::(\d+))?$/.exec(offerId);
  if (!match) return null;
  const gpuCount = match[3] ? Number(match[3]) : 1;
  if (!match[2] || gpuCount < 1) return null;
  return { cloud: match[1] as Cloud, gpuTypeId: match[2], gpuCount };
}

/** How a create that threw ends: only failures that prove nothing was made are definite. */
function createFailureKind(error: ProviderError): "rejected" | "ambiguous" {
  // 400 = schema/variable validation, before anything is deployed; 401/403 (including
  // Cloudflare's 1010) and 429 are refusals at the door.
  if (error.status === 400 || error.kind === "auth" || error.kind === "rate_limited") return "rejected";
  // timeout, network failure, 5xx, a body that is not GraphQL: the pod may exist.
  return "ambiguous";
}

/** A pod's HTTP port as the proxy serves it (RUNPOD_PROXY_TEMPLATE, `{id}` and `{port}`). */
export function podProxyUrl(template: string, podId: string, port: number): string {
  return template.replaceAll("{id}", podId).replaceAll("{port}", String(port));
}

/** The HTTP ports among port specs such as `11434/http` or `22/tcp` (both transports use them). */
export function httpPortsOf(specs: Iterable<string>): Set<number> {
  const ports = new Set<number>();
  for (const entry of specs) {
    const [port, type] = entry.trim().split("/");
    if (type === "http" && port && /^\d+$/.test(port)) ports.add(Number(port));
  }
  return ports;
}

export function shellQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

export function round4(value: number): number {
  return Math.round(value * 10_000) / 10_000;
}

/**
 * When a pod was rented, from `lastStatusChange` ("Rented by User: Fri Nov 29 2026 02:00:00 GMT"),
 * which the official clients query on myself.pods; `createdAt` is not among those fields. Any
 * other status change (an exit, a restart) says nothing about the start: null, and a found pod
 * then bills from the create's sending.
 */
function rentedAtOf(lastStatusChange: string | null | undefined): string | null {
  const match = /^Rented by User:\s*(.+)$/i.exec(lastStatusChange?.trim() ?? "");
  const at = match ? Date.parse(match[1]!) : Number.NaN;
  return Number.isFinite(at) ? new Date(at).toISOString() : null;
}
