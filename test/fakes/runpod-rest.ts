import type { ModelMachine } from "../../src/sim/model";
import { checkRunpodSchema } from "./openapi-check";
import { json } from "./respond";
import {
  BOT_USER_AGENT,
  hang,
  NO_CAPACITY_MESSAGES,
  parsePorts,
  podId,
  type RecordedRunpodRequest,
  type RunpodFake,
  type RunpodFault,
  type RunpodOperation,
} from "./runpod";

/*
 * RunPod REST v2 (`/v2/...` on the fake's host), as RunPod's OpenAPI document describes it
 * (docs/runpod-rest-v2.openapi.json) and docs/providers.md#runpod-rest-v2 records: problem+json
 * errors, create bodies checked against `CreatePodRequest` (unknown fields are a 422), no
 * capacity as a 400 with RunPod's recorded detail text, `status: "RUNNING"` from creation while
 * `runtime` is still null, `cost` 0.0 once a pod stops, 404 problem+json for a deleted pod, 409
 * for a locked one, `GET /v2/pods` in pages of `podsPageSize` behind a cursor. It shares the
 * RunpodFake's pods, quirks and fault queues with the GraphQL front, so one fake serves both
 * transports.
 */

const PROBLEM_TITLES: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  402: "Payment Required",
  404: "Not Found",
  409: "Conflict",
  422: "Unprocessable Entity",
  429: "Too Many Requests",
  500: "Internal Server Error",
};

export function problem(status: number, detail: string, errors?: string[]): Response {
  return new Response(
    JSON.stringify({ title: PROBLEM_TITLES[status] ?? "Error", status, detail, ...(errors ? { errors } : {}) }),
    { status, headers: { "Content-Type": "application/problem+json" } },
  );
}

/**
 * RunPod's `TooManyRequestsError`: a problem+json 429 with `Retry-After` in seconds for the
 * exceeded window (the OpenAPI example is 12), refused before anything was made. A fault, so it
 * can stand in front of any operation (`fake.fault("deploy", tooManyRequests(2), 2)`).
 */
export function tooManyRequests(retryAfterS: number): RunpodFault {
  return {
    kind: "status",
    status: 429,
    body: JSON.stringify({
      title: "Too Many Requests",
      status: 429,
      detail: "rate limit exceeded; retry after the window resets",
    }),
    headers: { "Content-Type": "application/problem+json", "Retry-After": String(retryAfterS) },
  };
}

const ROUTES: { method: string; path: RegExp; operation: RunpodOperation }[] = [
  { method: "GET", path: /^\/v2\/catalog\/gpus$/, operation: "gpuTypes" },
  { method: "POST", path: /^\/v2\/pods$/, operation: "deploy" },
  { method: "GET", path: /^\/v2\/pods$/, operation: "myself" },
  { method: "GET", path: /^\/v2\/pods\/([^/]+)$/, operation: "pod" },
  { method: "DELETE", path: /^\/v2\/pods\/([^/]+)$/, operation: "terminate" },
  { method: "POST", path: /^\/v2\/pods\/([^/]+)\/action$/, operation: "terminate" },
  { method: "GET", path: /^\/v2\/billing\/pods$/, operation: "billing" },
];

export async function handleRest(fake: RunpodFake, request: Request): Promise<Response> {
  const url = new URL(request.url);
  const route = ROUTES.find((r) => r.method === request.method && r.path.test(url.pathname));
  const record: RecordedRunpodRequest = {
    transport: "rest",
    url: request.url,
    method: request.method,
    userAgent: request.headers.get("user-agent"),
    authorization: request.headers.get("authorization"),
    operations: route ? [route.operation] : [],
    query: `${request.method} ${url.pathname}${url.search}`,
    variables: {},
    status: 0,
  };
  const podRef = route ? route.path.exec(url.pathname)?.[1] : undefined;
  // The pod id in GraphQL's variable shape, so call checks read the same on both transports.
  if (podRef) record.variables = { input: { podId: decodeURIComponent(podRef) } };
  fake.requests.push(record);
  const response = await answer(fake, request, url, route, record);
  record.status = response.status;
  return response;
}

async function answer(
  fake: RunpodFake,
  request: Request,
  url: URL,
  route: (typeof ROUTES)[number] | undefined,
  record: RecordedRunpodRequest,
): Promise<Response> {
  // Cloudflare sits in front of the REST API too (lumpenspace/raft PR #14: "every pod creation fails with 403/1010").
  const userAgent = record.userAgent ?? "";
  if (fake.quirks.cloudflareBlocksBots && (userAgent.trim() === "" || BOT_USER_AGENT.test(userAgent)))
    return new Response("error code: 1010", { status: 403, headers: { "Content-Type": "text/plain" } });
  if (!route) return problem(404, "resource not found");
  const fault = fake.faults[route.operation].shift();
  if (fault) return fake.injected(fault, request);

  const bearer = /^Bearer\s+(.+)$/i.exec(record.authorization ?? "")?.[1]?.trim() ?? null;
  if (bearer === null) return problem(401, "missing bearer token");
  if (fake.quirks.auth === "bad_key" || bearer !== fake.apiKey) return problem(401, "invalid bearer token");
  if (fake.quirks.auth === "no_permission" && route.operation !== "gpuTypes") return problem(403, "access denied");

  const id = decodeURIComponent(route.path.exec(url.pathname)?.[1] ?? "");
  switch (route.operation) {
    case "gpuTypes":
      return catalog(fake, url);
    case "deploy":
      return create(fake, request);
    case "myself":
      return list(fake, url);
    case "pod": {
      const m = fake.model.get(id);
      const pod = m ? restPod(fake, m) : null;
      return pod ? json(pod) : problem(404, "pod not found");
    }
    case "terminate":
      return remove(fake, request, id, url.pathname.endsWith("/action"));
    case "billing":
      return billing(fake, url);
    default:
      return problem(404, "resource not found");
  }
}

function catalog(fake: RunpodFake, url: URL): Response {
  const include = url.searchParams.get("include");
  const product = url.searchParams.get("product");
  if (include === "AVAILABILITY" && !product) return problem(400, "product is required with include=AVAILABILITY");
  const count = Number(url.searchParams.get("count") ?? "1");
  if (!Number.isInteger(count) || count < 1) return problem(422, "Request validation failed.", ["count"]);
  const cloud = (url.searchParams.get("cloud") ?? "SECURE") as "SECURE" | "COMMUNITY";
  if (cloud !== "SECURE" && cloud !== "COMMUNITY") return problem(422, "Request validation failed.", ["cloud"]);
  const minCuda = url.searchParams.get("minCudaVersion");
  if (minCuda !== null && !/^\d+(\.\d+)?$/.test(minCuda))
    return problem(422, "Request validation failed.", ["minCudaVersion"]);
  const gpus = fake.gpuTypes.map((t) => {
    const availability = fake.stockIn(t.id, cloud, count);
    return {
      id: t.id,
      name: t.displayName,
      pool: null,
      manufacturer: t.manufacturer === "AMD" ? "AMD" : "NVIDIA",
      memory: t.memoryInGb,
      secure: t.secureCloud,
      community: t.communityCloud,
      price: { secure: t.securePrice ?? 0, community: t.communityPrice ?? 0 },
      maxCount: { secure: t.secureCloud ? t.maxGpuCount : 0, community: t.communityCloud ? t.maxGpuCount : 0 },
      ...(include === "AVAILABILITY"
        ? {
            availability,
            ...(availability === "NONE"
              ? {}
              : {
                  dataCenters: fake.dataCenters
                    .filter((dc) => dc.gpuAvailability?.some((a) => a.gpuTypeId === t.id && a.available))
                    .map((dc) => ({ id: dc.id, name: dc.name, availability })),
                }),
            ...(t.manufacturer === "AMD" ? {} : { cudaVersions: [{ version: "12.8", available: true }] }),
          }
        : {}),
    };
  });
  return json({ gpus: [...gpus, ...fake.quirks.restCatalogExtras] });
}

async function create(fake: RunpodFake, request: Request): Promise<Response> {
  let body: unknown;
  try {
    body = await request.json();
  } catch {
    return problem(400, "request body is not valid JSON");
  }
  // Which command form RunPod takes is set by `restCommandFields`: `cmd` and `entrypoint` arrays
  // (the newest runpodctl, internal/api/podcreate_v2.go), or the document's one `args` string.
  // The other form, like any field the contract does not name, is a 422 ("a leftover v1 field is
  // a 422"); the rest is checked against the document (unevaluatedProperties: false).
  const { entrypoint, cmd, ...documented } = (body ?? {}) as Record<string, unknown>;
  const arraysForm = fake.quirks.restCommandFields === "cmd";
  if (arraysForm && "args" in documented) return problem(422, "Request validation failed.", ["$.args: unknown field"]);
  if (!arraysForm && (entrypoint !== undefined || cmd !== undefined))
    return problem(422, "Request validation failed.", ["$.cmd, $.entrypoint: unknown field"]);
  const stringArray = (v: unknown) => v === undefined || (Array.isArray(v) && v.every((s) => typeof s === "string"));
  if (!stringArray(entrypoint) || !stringArray(cmd))
    return problem(422, "Request validation failed.", ["$.entrypoint and $.cmd: arrays of strings"]);
  const problems = checkRunpodSchema("CreatePodRequest", documented);
  if (problems.length > 0) return problem(422, "Request validation failed.", problems);
  const input = body as {
    name: string;
    image: string;
    args?: string;
    entrypoint?: string[];
    cmd?: string[];
    disk?: number;
    env?: Record<string, string>;
    ports?: string[];
    cloud?: "SECURE" | "COMMUNITY";
    gpu?: { id: string; count?: number; minCudaVersion?: string };
  };
  if (!input.gpu) return problem(400, "exactly one of gpu or cpu must be set");
  const type = fake.gpuTypes.find((t) => t.id === input.gpu?.id);
  if (!type) return problem(404, `gpu type ${input.gpu.id} not found`);
  const cloud = input.cloud ?? "SECURE";
  const gpuCount = input.gpu.count ?? 1;

  // The listing may say HIGH and the create still finds nothing; create does not fall back.
  const refusal = fake.quirks.noCapacity;
  if (refusal && refusal.times > 0) {
    refusal.times -= 1;
    return problem(400, NO_CAPACITY_MESSAGES.requested);
  }
  const price = cloud === "COMMUNITY" ? type.communityPrice : type.securePrice;
  if (price === null || fake.stockIn(type.id, cloud, gpuCount) === "NONE")
    return problem(400, NO_CAPACITY_MESSAGES.requested);
  const dataCenter =
    fake.dataCenters.find((dc) => dc.gpuAvailability?.some((a) => a.gpuTypeId === type.id && a.available))?.id ??
    "EU-RO-1";
  const m = fake.model.create({
    id: podId(),
    label: input.name,
    offerKey: type.id,
    gpuCount,
    pricePerHour: Math.round(price * gpuCount * 10_000) / 10_000,
    bootMs: fake.quirks.stuckBooting ? Number.POSITIVE_INFINITY : fake.quirks.bootMs,
    lingerMs: fake.quirks.lingerMs,
    ignoreTerminates: fake.quirks.ignoreTerminates,
    meta: {
      imageName: input.image,
      // Kept in the GraphQL front's shapes ("K=V" strings, one ports string) so both fronts read one pod.
      env: Object.entries(input.env ?? {}).map(([k, v]) => `${k}=${v}`),
      ports: (input.ports ?? []).join(","),
      dockerArgs: input.args ?? "",
      cmd: input.cmd ?? [],
      entrypoint: input.entrypoint ?? [],
      cloudType: cloud,
      dataCenterId: dataCenter,
      gpuDisplayName: type.displayName,
      containerDiskInGb: input.disk ?? 50,
      minVcpuCount: 4,
      minMemoryInGb: 16,
      volumeInGb: 0,
      terminateAfter: null,
      minCudaVersion: input.gpu.minCudaVersion ?? null,
      listedAt: Date.now() + fake.quirks.listingLagMs,
    },
  });
  // The pod exists and bills, but the answer says otherwise (REST v1 did this; v2 may too).
  const afterwards = fake.quirks.errorButCreated;
  if (afterwards === "http_500" || afterwards === "graphql_error")
    return problem(500, "internal error while reading back the created pod");
  if (afterwards === "hang") return hang(request);
  // The create answers PROVISIONING with runtime null, whatever the pod does next (OpenAPI createPod).
  return json(restPod(fake, m, true), 201);
}

/** Where the fake's listing cursors point: after the pod with this listing position. */
interface PodCursor {
  afterSeq: number;
  issuedAt: number;
}

/** Per fake: the listing position of every pod it has listed, and the cursors it issued. */
interface ListingState {
  seq: WeakMap<ModelMachine, number>;
  nextSeq: number;
  cursors: Map<string, PodCursor>;
}
const listingStates = new WeakMap<RunpodFake, ListingState>();

function listingState(fake: RunpodFake): ListingState {
  let state = listingStates.get(fake);
  if (!state) {
    state = { seq: new WeakMap(), nextSeq: 0, cursors: new Map() };
    listingStates.set(fake, state);
  }
  return state;
}

/**
 * `GET /v2/pods?limit=&cursor=`, paged as runpodctl reads it (docs/providers.md#runpod-rest-pages):
 * `{pods, pagination: {nextCursor, hasNextPage}}`. A keyset cursor: a pod gets its position when
 * it first shows in a listing, so one created (or past its listing lag) while a client pages
 * shows on a later page, never shifts a page already read. A cursor the fake did not issue, or
 * one older than `podsCursorTtlMs`, is a 400 problem+json.
 */
function list(fake: RunpodFake, url: URL): Response {
  const state = listingState(fake);
  let limit = fake.quirks.podsPageSize;
  const asked = url.searchParams.get("limit");
  if (asked !== null) {
    const n = Number(asked);
    if (!Number.isInteger(n) || n < 1) return problem(422, "Request validation failed.", ["limit"]);
    limit = Math.min(n, limit);
  }
  let afterSeq = -1;
  const cursor = url.searchParams.get("cursor");
  if (cursor !== null) {
    const known = state.cursors.get(cursor);
    const ttl = fake.quirks.podsCursorTtlMs;
    if (!known || (ttl !== null && Date.now() - known.issuedAt > ttl))
      return problem(400, "cursor is invalid or has expired");
    afterSeq = known.afterSeq;
  }
  const now = Date.now();
  const listed: { seq: number; pod: Record<string, unknown> }[] = [];
  for (const m of fake.model.list()) {
    if ((m.meta.listedAt as number) > now) continue;
    const pod = restPod(fake, m);
    if (!pod) continue;
    let seq = state.seq.get(m);
    if (seq === undefined) {
      seq = state.nextSeq++;
      state.seq.set(m, seq);
    }
    listed.push({ seq, pod });
  }
  const rest = listed.filter((p) => p.seq > afterSeq).sort((a, b) => a.seq - b.seq);
  const page = rest.slice(0, limit);
  if (rest.length <= limit)
    return json({ pods: page.map((p) => p.pod), pagination: { nextCursor: null, hasNextPage: false } });
  const nextCursor = `pc_${crypto.randomUUID().replaceAll("-", "")}`;
  state.cursors.set(nextCursor, { afterSeq: page[page.length - 1]!.seq, issuedAt: now });
  return json({ pods: page.map((p) => p.pod), pagination: { nextCursor, hasNextPage: true } });
}

async function remove(fake: RunpodFake, request: Request, id: string, viaAction: boolean): Promise<Response> {
  if (viaAction) {
    const body = (await request.json().catch(() => null)) as { action?: unknown } | null;
    if (checkRunpodSchema("PodActionRequest", body).length > 0) return problem(400, "invalid action");
    if (body?.action !== "terminate") return problem(409, "Action not valid for current pod status");
  }
  const m = fake.model.get(id);
  if (!m || fake.model.state(id) === "gone") return problem(404, "pod not found");
  if (fake.lockedPods.has(id)) return problem(409, "pod is locked");
  fake.model.terminate(id);
  return new Response(null, { status: 204 });
}

/** Per pod and UTC day: price x hours billed in that day (from creation; RunPod bills the image pull). */
function billing(fake: RunpodFake, url: URL): Response {
  const podFilter = url.searchParams.get("podId");
  const bucketSize = url.searchParams.get("bucketSize") ?? "day";
  if (bucketSize !== "day") return problem(422, "this fake bills per day only", ["bucketSize"]);
  const start = Date.parse(url.searchParams.get("startTime") ?? new Date(Date.now() - 30 * 86_400_000).toISOString());
  const end = Date.parse(url.searchParams.get("endTime") ?? new Date().toISOString());
  if (Number.isNaN(start) || Number.isNaN(end)) return problem(422, "Request validation failed.");
  const records: Record<string, unknown>[] = [];
  for (const m of fake.model.machines.values()) {
    if (podFilter && m.id !== podFilter) continue;
    const billedUntil = Math.min(
      Date.now(),
      m.terminateRequestedAt ?? Number.POSITIVE_INFINITY,
      m.exitedAt ?? Number.POSITIVE_INFINITY,
    );
    for (let day = Math.floor(start / 86_400_000) * 86_400_000; day < end; day += 86_400_000) {
      const from = Math.max(day, m.createdAt);
      const to = Math.min(day + 86_400_000, billedUntil);
      if (to <= from) continue;
      const amount = Math.round(((m.pricePerHour * (to - from)) / 3_600_000) * fake.quirks.billingFactor * 1e6) / 1e6;
      records.push({
        startTime: new Date(day).toISOString().replace(".000", ""),
        endTime: new Date(day + 86_400_000).toISOString().replace(".000", ""),
        podId: m.id,
        totalAmount: amount,
        gpuAmount: amount,
        cpuAmount: 0,
        diskAmount: 0,
      });
    }
  }
  const total = records.reduce((sum, r) => sum + (r.totalAmount as number), 0);
  return json({
    records,
    metadata: {
      query: {
        startTime: new Date(start).toISOString(),
        endTime: new Date(end).toISOString(),
        bucketSize,
        podId: podFilter,
      },
      recordCount: records.length,
      uniquePodCount: new Set(records.map((r) => r.podId)).size,
      totals: { totalAmount: total, gpuAmount: total, cpuAmount: 0, diskAmount: 0 },
    },
  });
}

/** A pod in the REST v2 `Pod` shape, by the model's state and the quirks; null once gone. */
export function restPod(fake: RunpodFake, m: ModelMachine, justCreated = false): Record<string, unknown> | null {
  const state = fake.model.state(m.id);
  if (state === "gone") return null;
  const meta = m.meta;
  const since = justCreated ? null : fake.model.runningSince(m.id);
  // PROVISIONING (being allocated), STARTING (the container starts: the image pull, the second
  // half of the boot), RUNNING once it runs; `restRunningBeforeRuntime` is the recorded case of
  // RUNNING from creation, several polls before `runtime` exists.
  const booting = Date.now() - m.createdAt < m.bootMs / 2 || justCreated ? "PROVISIONING" : "STARTING";
  let status = since !== null || fake.quirks.restRunningBeforeRuntime ? "RUNNING" : booting;
  let runtime: Record<string, unknown> | null = null;
  if (state === "terminating") status = fake.quirks.lingerShowsAs === "TERMINATED" ? "TERMINATED" : "RUNNING";
  else if (state === "exited") status = m.exitReason === "DEAD" ? "ERROR" : "EXITED";
  if (status === "RUNNING" || status === "STARTING") {
    if (since !== null) {
      const graphqlRuntime = fake.runtime(m, Date.now() - since);
      runtime = {
        uptime: graphqlRuntime.uptimeInSeconds,
        gpus: Array.from({ length: m.gpuCount }, () => ({ util: 0, memoryUtil: 3 })),
        cpu: { util: 1 },
        memory: { util: 2 },
        ports: ((graphqlRuntime.ports as Record<string, unknown>[] | null) ?? []).map((p) => ({
          private: p.privatePort,
          public: p.publicPort,
          type: p.type,
          ip: p.ip,
        })),
      };
    } else if (fake.quirks.restEmptyRuntime && !justCreated) runtime = {};
  }
  // A community host maps a public TCP port only if it has a public IP (runpodctl: "community
  // cloud only maps a public ssh port on a machine that has a public ip"); v2 cannot ask for one.
  if (runtime && meta.cloudType === "COMMUNITY" && !fake.quirks.communityPublicIp)
    runtime.ports = (runtime.ports as { type: string; ip: string }[]).map((p, i) =>
      p.type === "tcp" ? { ...p, ip: `100.65.22.${10 + i}` } : p,
    );
  const runtimePorts = (runtime?.ports as { private: number; public: number; type: string; ip: string }[]) ?? [];
  const sshPort = runtimePorts.find((p) => p.private === 22 && p.type === "tcp" && !p.ip.startsWith("100.65."));
  const stopped = status === "EXITED" || status === "TERMINATED" || status === "ERROR";
  const envEntries = (meta.env as string[]).map((e) => {
    const at = e.indexOf("=");
    return [e.slice(0, at), e.slice(at + 1)] as const;
  });
  return {
    id: m.id,
    name: m.label ?? "",
    status,
    actions: stopped ? ["start", "terminate"] : ["stop", "restart", "terminate"],
    image: meta.imageName,
    args: meta.dockerArgs ?? "",
    // Read back as the newest runpodctl's v2Pod does (internal/api/pods_v2.go).
    ...(fake.quirks.restCommandFields === "cmd" ? { cmd: meta.cmd ?? [], entrypoint: meta.entrypoint ?? [] } : {}),
    disk: meta.containerDiskInGb,
    mounts: {},
    ports: parsePorts(meta.ports as string).map((p) => `${p.port}/${p.type}`),
    env: Object.fromEntries(envEntries),
    registry: null,
    gpu: { id: m.offerKey, count: m.gpuCount },
    cloud: meta.cloudType === "COMMUNITY" ? "COMMUNITY" : "SECURE",
    dataCenterId: meta.dataCenterId ?? null,
    cudaVersion: "12.8",
    ssh: {
      proxy: {
        host: "ssh.runpod.io",
        port: 22,
        username: `${m.id}-64411eb2`,
        command: `ssh ${m.id}-64411eb2@ssh.runpod.io`,
      },
      direct: sshPort
        ? {
            host: sshPort.ip,
            port: sshPort.public,
            username: "root",
            command: `ssh root@${sshPort.ip} -p ${sshPort.public}`,
          }
        : null,
    },
    template: null,
    // "Current cost in USD per hour (0.0 when EXITED or TERMINATED)".
    cost: stopped ? 0 : m.pricePerHour,
    locked: fake.lockedPods.has(m.id),
    globalNetworking: { enabled: false },
    runtime,
    createdAt: new Date(m.createdAt).toISOString(),
    startedAt: since !== null ? new Date(since).toISOString() : null,
  };
}
