import { SELF } from "cloudflare:test";
import { env } from "cloudflare:workers";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { statusByCode } from "../../src/errors";
import { LeaseInputSchema } from "../../src/leases/schema";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { OllamaRegistryFake } from "../fakes/ollama-registry";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { VramfarmFake } from "../fakes/vramfarm";
import { ADMIN_TOKEN } from "../helpers";
import { apiDirect as api, workerFetch } from "./direct";
import {
  describeRequest,
  type FuzzRequest,
  type Operation,
  printable,
  requestFor,
  toRequest,
} from "./fuzz-arbitraries";

/*
 * Bad-input fuzzing over every route of the worker's own OpenAPI document (so a route added
 * later is fuzzed without touching this file) plus invented routes. Promises checked on every
 * answer: never a 5xx; every 4xx is the {error, code} envelope with the status its code
 * belongs to, and `issues` on a 400; no 2xx under /v1 without a valid token, and no write with a
 * read-only one; a body that fails LeaseInputSchema never reaches the rent path. Every provider
 * refuses to rent (the sim's no_capacity fault, Vast without credit, VRAMfarm without room,
 * RunPod without capacity), so even a valid body cannot start a machine; the end checks count
 * machines. Requests go to the worker's fetch handler directly (workerFetch), not through SELF,
 * which slows down with every call in a file (see direct.ts).
 */

const SEED = 0x6a1ea5e;
/**
 * Requests in flight at once: their D1 and Durable Object waits overlap (5,000 requests alone on
 * 2 cores: 8 at a time 11.2 s, 25 at a time 8.7 s, 50 at a time 6.6 s), and the worker answers a
 * burst, as it must in production.
 */
const BATCH = 50;
/** requests to send: FUZZ_RUNS from the environment (vitest.config.ts), 5,000 by default */
const REQUESTS = Number(env.FUZZ_RUNS);
const BATCHES = Math.ceil(REQUESTS / BATCH);
/** a request that takes longer than this is a hang (an SSE stream that never ends, a stuck route) */
const REQUEST_TIMEOUT_MS = 15_000;
const SLOW_MS = 1_000;

const UNKNOWN_ROUTES: Operation[] = [
  "/",
  "/v1",
  "/v1/",
  "/v2/leases",
  "//v1//leases",
  "/v1/leases/",
  "/v1/leases/../tokens",
  "/v1/%2e%2e/tokens",
  "/v1/leases/stop-all/now",
  "/v1/leases/{id}/secret",
  "/v1/schedules/{id}/runs/{id2}",
  "/.env",
  "/openapi.json/..",
  "/docs/x",
  "/v1/sim/../tokens",
  "/v1/tokens%00",
  "/v1/TOKENS",
].map((path) => ({
  method: "GET",
  path,
  pathParams: [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!),
  queryParams: [],
  hasBody: false,
}));

const LEASE_SEEDS = [
  { provider: "sim", gpu: "4090", max_minutes: 30 },
  { offer_id: "sim:rtx-4090:1", max_minutes: 5, max_cost: 1 },
  {
    name: "fuzz",
    provider: "sim",
    gpu: "4090",
    vram_gb: 24,
    gpu_count: 1,
    max_price: 2,
    weights_gb: 18,
    template: "custom",
    image: "ghcr.io/you/batch:1",
    cmd: "python /app/run.py",
    env: { KEY: "value" },
    ports: [8080],
    disk_gb: 60,
    max_minutes: 120,
    max_cost: 3,
  },
  { template: "ollama", context_length: 8192, ports: [11434], max_minutes: 10080 },
];

/**
 * Webhook targets that name a loopback, private or metadata host (or this worker, gpulease.test)
 * in another spelling: IPv4 inside IPv6, the DNS root's trailing dot. Any 2xx for one is a hole.
 */
const PRIVATE_WEBHOOK_URLS = [
  "https://[::127.0.0.1]/hook",
  "https://[::ffff:0:127.0.0.1]/hook",
  "https://[64:ff9b::a9fe:a9fe]/latest/meta-data",
  "https://[2002:7f00:1::]/hook",
  "https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook",
  "https://localhost./hook",
  "https://metadata.google.internal./computeMetadata/v1/",
  "https://gpulease.test./v1/leases",
];

/** Near-valid bodies per "METHOD /path" of the OpenAPI document. */
const SEEDS: Record<string, unknown[]> = {
  "POST /v1/leases": LEASE_SEEDS,
  "POST /v1/leases/{id}/done": [{ exit_code: 0 }, { exit_code: -1 }],
  "POST /v1/tokens": [
    { name: "fuzz", scopes: ["read"] },
    { name: "x", scopes: ["read", "rent", "stop", "admin"] },
  ],
  "POST /v1/schedules": [
    { name: "fuzz", cron: "0 2 * * *", timezone: "Europe/Berlin", enabled: false, lease: LEASE_SEEDS[0] },
  ],
  "PATCH /v1/schedules/{id}": [{ enabled: false }, { cron: "*/5 * * * *", timezone: "UTC" }, { lease: LEASE_SEEDS[2] }],
  "PUT /v1/sim/config": [
    { boot_seconds: 5, faults: { no_capacity: true } },
    { faults: { stuck_booting: true, ignore_terminates: 2 } },
  ],
  "POST /v1/webhooks": [
    { url: "https://hooks.example.com/fuzz", events: ["lease.stopped", "lease.running"], format: "json" },
    { url: "https://hooks.example.com/fuzz", events: ["*"], format: "slack" },
    ...PRIVATE_WEBHOOK_URLS.map((url) => ({ url, events: ["*"] })),
  ],
  "POST /v1/sim/machines": [{ label: "fuzz-plant", gpu: "rtx-4090", gpu_count: 1, age_seconds: 0 }],
  "POST /v1/sim/machines/{ref}/exit": [{ reason: "fuzz" }],
};

interface OpenApiDoc {
  paths: Record<string, Record<string, { parameters?: { name: string; in: string }[]; requestBody?: unknown }>>;
}

const HTTP_METHODS = new Set(["get", "post", "put", "patch", "delete", "head", "options"]);

/** Every operation of the document, with its path and query parameter names. */
function operationsOf(doc: OpenApiDoc): Operation[] {
  const operations: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (!HTTP_METHODS.has(method)) continue;
      const parameters = op.parameters ?? [];
      operations.push({
        method: method.toUpperCase(),
        path: path.replace(/:(\w+)/g, "{$1}"),
        pathParams: [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!),
        queryParams: parameters.filter((p) => p.in === "query").map((p) => p.name),
        hasBody: op.requestBody !== undefined,
      });
    }
  }
  return operations;
}

let fakes: InstalledFakes;
let runpod: RunpodFake;
let vast: VastFake;
let vramfarm: VramfarmFake;
let operations: Operation[] = [];
const realIds: string[] = [];
let readToken = "";

const histogram = new Map<number, number>();
const byRoute = new Map<string, Map<number, number>>();
const violations: string[] = [];
/** requests slower than SLOW_MS, reported with the histogram (a slow route is a DoS lever) */
const slow: string[] = [];
let sent = 0;
let validLeaseBodies = 0;

/** The sim refuses every rental; the fuzzer may switch that off through /v1/sim, so it is set again after each batch. */
async function simRefusesEverything(): Promise<void> {
  const res = await api("/v1/sim/config", { method: "PUT", json: { faults: { no_capacity: true } } });
  if (res.status !== 200) throw new Error(`sim config: ${res.status} ${await res.text()}`);
}

function webhookUrlOf(request: FuzzRequest): string | null {
  try {
    const url = (JSON.parse(request.body ?? "null") as { url?: unknown } | null)?.url;
    return typeof url === "string" ? url : null;
  } catch {
    return null;
  }
}

function isSchemaValidLease(request: FuzzRequest): boolean {
  if (request.body === null) return false;
  let parsed: unknown;
  try {
    parsed = JSON.parse(request.body);
  } catch {
    return false;
  }
  return LeaseInputSchema.safeParse(parsed).success;
}

/** What is wrong with this answer, or null. `pathname` is the path the worker saw (normalised). */
function problemWith(request: FuzzRequest, pathname: string, status: number, text: string): string | null {
  if (status >= 500) return `${status}: ${printable(text.slice(0, 300))}`;
  const ok = status >= 200 && status < 300;
  if (ok && pathname.startsWith("/v1") && !["admin", "read"].includes(request.auth))
    return `${status} for a /v1 request without a valid token`;
  if (ok && request.auth === "read" && !["GET", "HEAD"].includes(request.method))
    return `${status} for a ${request.method} with a read-only token`;
  if (status >= 400 && request.method !== "HEAD") {
    let body: { error?: unknown; code?: unknown; issues?: unknown };
    try {
      body = JSON.parse(text) as typeof body;
    } catch {
      return `${status} without a JSON body: ${printable(text.slice(0, 200))}`;
    }
    if (typeof body.error !== "string" || typeof body.code !== "string")
      return `${status} not in the envelope: ${printable(text.slice(0, 200))}`;
    const expected = (statusByCode as Record<string, number>)[body.code];
    if (expected !== status)
      return `${status} with code ${body.code} (that code is sent with ${expected ?? "no status"})`;
    if (status === 400) {
      const issues = body.issues;
      const wellFormed =
        Array.isArray(issues) &&
        issues.length > 0 &&
        issues.every((i) => typeof i?.path === "string" && typeof i?.message === "string");
      if (!wellFormed) return `400 without issues: ${printable(text.slice(0, 200))}`;
    }
  }
  const hooks =
    request.operation.method === "POST" && request.operation.path === "/v1/webhooks" && request.method === "POST";
  if (hooks && ok && PRIVATE_WEBHOOK_URLS.includes(webhookUrlOf(request) ?? "")) {
    return `a webhook at a private host was accepted (${status}): ${printable(text.slice(0, 200))}`;
  }
  const rents =
    request.operation.method === "POST" && request.operation.path === "/v1/leases" && request.method === "POST";
  if (rents && [200, 202, 402, 409, 502].includes(status) && !isSchemaValidLease(request)) {
    return `a body that fails LeaseInputSchema reached the rent path (${status}): ${printable(text.slice(0, 200))}`;
  }
  return null;
}

/** Violations grouped by what went wrong (the answer, without the request), with a few requests each. */
function summarise(found: string[]): string {
  const groups = new Map<string, string[]>();
  for (const violation of found) {
    const [problem = violation, request = ""] = violation.split(" — ");
    const list = groups.get(problem.slice(0, 160)) ?? [];
    list.push(request);
    groups.set(problem.slice(0, 160), list);
  }
  return [...groups.entries()]
    .sort(([, a], [, b]) => b.length - a.length)
    .map(
      ([problem, requests]) =>
        `\n  ${requests.length}× ${problem}\n${requests
          .slice(0, 3)
          .map((r) => `      e.g. ${r.slice(0, 400)}`)
          .join("\n")}`,
    )
    .join("");
}

async function send(request: FuzzRequest): Promise<void> {
  const built = toRequest(request, { admin: ADMIN_TOKEN, read: readToken });
  if (!built) return;
  sent += 1;
  const startedAt = Date.now();
  if (request.operation.path === "/v1/leases" && request.operation.method === "POST" && isSchemaValidLease(request))
    validLeaseBodies += 1;
  let status: number;
  let text: string;
  try {
    const answer = (async () => {
      const res = await workerFetch(built);
      return { status: res.status, text: await res.text() };
    })();
    const timeout = new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`no answer in ${REQUEST_TIMEOUT_MS} ms`)), REQUEST_TIMEOUT_MS),
    );
    ({ status, text } = await Promise.race([answer, timeout]));
  } catch (error) {
    violations.push(`threw ${error instanceof Error ? error.message : String(error)} — ${describeRequest(request)}`);
    return;
  }
  const took = Date.now() - startedAt;
  if (took > SLOW_MS) {
    slow.push(`${took} ms: ${status} ${describeRequest(request).slice(0, 400)}`);
    console.log(`slow request (${sent} sent): ${slow.at(-1)}`);
  }
  histogram.set(status, (histogram.get(status) ?? 0) + 1);
  const route = `${request.operation.method} ${request.operation.path}`;
  const perRoute = byRoute.get(route) ?? new Map<number, number>();
  perRoute.set(status, (perRoute.get(status) ?? 0) + 1);
  byRoute.set(route, perRoute);
  const problem = problemWith(request, new URL(built.url).pathname, status, text);
  if (problem) violations.push(`${problem} — ${describeRequest(request)}`);
}

beforeAll(async () => {
  // Every real provider refuses: no credit at Vast, no room at VRAMfarm, no capacity at RunPod.
  runpod = new RunpodFake({ quirks: { noCapacity: { variant: "requested", times: Number.MAX_SAFE_INTEGER } } });
  vast = new VastFake();
  vast.credit = 0;
  vramfarm = new VramfarmFake();
  vramfarm.quirks.maxServers = 0;
  // The model registry answers (a model a generated body names is unknown there: a 400).
  fakes = installFakes(runpod, vast, vramfarm, new OllamaRegistryFake());
  await simRefusesEverything();

  const doc = (await (await SELF.fetch("http://gpulease.test/openapi.json")).json()) as OpenApiDoc;
  operations = [...operationsOf(doc), ...UNKNOWN_ROUTES];

  // Real ids, so the fuzzer also reaches the handlers behind the id checks.
  // The reader's id stays out of the fuzzer's hands (a DELETE would revoke it); a victim's is in.
  const reader = (await (
    await api("/v1/tokens", { method: "POST", json: { name: "fuzz-reader", scopes: ["read"] } })
  ).json()) as { token: string };
  readToken = reader.token;
  const victim = (await (
    await api("/v1/tokens", { method: "POST", json: { name: "fuzz-victim", scopes: ["stop"] } })
  ).json()) as { id: string };
  realIds.push(victim.id);
  const refused = (await (
    await api("/v1/leases", { method: "POST", json: { provider: "sim", max_minutes: 5 } })
  ).json()) as { lease_id?: string };
  if (refused.lease_id) realIds.push(refused.lease_id);
  const schedule = (await (
    await api("/v1/schedules", { method: "POST", json: SEEDS["POST /v1/schedules"]![0] })
  ).json()) as { id?: string };
  if (schedule.id) realIds.push(schedule.id);
  const plant = (await (await api("/v1/sim/machines", { method: "POST", json: { label: "fuzz-plant" } })).json()) as {
    machine?: { ref: string };
  };
  if (plant.machine) realIds.push(plant.machine.ref);
}, 60_000);

afterAll(() => fakes?.restore());

describe("bad-input fuzzing", () => {
  it("sends a whole number of requests, as FUZZ_RUNS asked", () => {
    expect(Number.isInteger(REQUESTS) && REQUESTS > 0, `FUZZ_RUNS=${env.FUZZ_RUNS}`).toBe(true);
  });

  it(`${BATCH * BATCHES} generated requests over every route: no 5xx, every 4xx in the envelope, no rental`, async () => {
    expect(realIds.length).toBe(4);
    expect(operations.length).toBeGreaterThan(UNKNOWN_ROUTES.length + 20);

    const documented = operations.slice(0, operations.length - UNKNOWN_ROUTES.length);
    const anyOperation = fc.oneof(
      { weight: 5, arbitrary: fc.constantFrom(...documented) },
      { weight: 1, arbitrary: fc.constantFrom(...UNKNOWN_ROUTES) },
    );
    // One request arbitrary per operation, built once and reused by every draw.
    const perOperation = new Map<Operation, fc.Arbitrary<FuzzRequest>>();
    const oneRequest = anyOperation.chain((operation) => {
      let arbitrary = perOperation.get(operation);
      if (!arbitrary) {
        arbitrary = requestFor(operation, SEEDS[`${operation.method} ${operation.path}`] ?? [], realIds);
        perOperation.set(operation, arbitrary);
      }
      return arbitrary;
    });
    await fc.assert(
      fc.asyncProperty(fc.array(oneRequest, { minLength: BATCH, maxLength: BATCH }), async (batch) => {
        // Sim control requests can switch the refusal off: they run alone, then it is set again.
        const isSim = (r: FuzzRequest) => r.operation.path.startsWith("/v1/sim");
        await Promise.all(batch.filter((r) => !isSim(r)).map(send));
        const simRequests = batch.filter(isSim);
        for (const request of simRequests) await send(request);
        if (simRequests.length) await simRefusesEverything();
        // Violations are collected, not thrown: one run shows every kind of failure at once.
        return true;
      }),
      { seed: SEED, numRuns: BATCHES, endOnFailure: true },
    );

    const statuses = [...histogram.entries()].sort(([a], [b]) => a - b);
    console.log(
      `\nfuzz: ${sent} requests sent (seed ${SEED}), ${operations.length} operations (${operations.length - UNKNOWN_ROUTES.length} from /openapi.json, ${UNKNOWN_ROUTES.length} invented)\n` +
        `status histogram: ${statuses.map(([s, n]) => `${s}: ${n}`).join(", ")}\n` +
        `per route:\n${[...byRoute.entries()]
          .sort(([a], [b]) => (a < b ? -1 : 1))
          .map(
            ([route, counts]) =>
              `  ${route}: ${[...counts.entries()]
                .sort(([a], [b]) => a - b)
                .map(([s, n]) => `${s}×${n}`)
                .join(" ")}`,
          )
          .join("\n")}\n` +
        `schema-valid lease bodies sent: ${validLeaseBodies}; create calls at the fakes: runpod ${runpod.calls("deploy").length}, ` +
        `vast ${vast.requests.filter((r) => r.method === "PUT").length}, vramfarm ${vramfarm.requests.filter((r) => r.method === "POST" && r.path === "/instances").length}\n` +
        `slower than ${SLOW_MS} ms: ${slow.length}${slow.length ? `\n  ${slow.slice(0, 20).join("\n  ")}` : ""}\n` +
        `violations: ${violations.length}${summarise(violations)}`,
    );

    expect(sent).toBeGreaterThanOrEqual(REQUESTS);
    expect(summarise(violations), "violations, grouped").toBe("");
  }, 600_000);

  it("nothing was rented: no lease has a machine, the fakes and the sim hold none of ours", async () => {
    // Valid bodies did reach the providers (the refusals were exercised), and none of them rented.
    expect(validLeaseBodies).toBeGreaterThan(0);
    expect(runpod.calls("deploy").length + vast.requests.filter((r) => r.method === "PUT").length).toBeGreaterThan(0);
    const rented = await env.DB.prepare(
      "SELECT id, provider, provider_ref FROM leases WHERE provider_ref IS NOT NULL",
    ).all();
    expect(rented.results).toEqual([]);
    expect(runpod.model.list()).toEqual([]);
    expect(vast.model.list()).toEqual([]);
    expect(vramfarm.model.list()).toEqual([]);
    const sim = (await (await api("/v1/sim")).json()) as { machines: { label: string | null }[] };
    expect(sim.machines.filter((m) => m.label?.startsWith("gpulease-"))).toEqual([]);
  });
});

describe("the fuzzer's findings, one request each", () => {
  // Both answers come from app.onError's HTTPException branch (src/app.ts), which sends no `issues`.
  it("a body that is not JSON is a 400 invalid_request with issues", async () => {
    const res = await api("/v1/tokens", {
      method: "POST",
      body: '{"name":',
      headers: { "Content-Type": "application/json" },
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { code: string; issues?: unknown[] };
    expect(body.code).toBe("invalid_request");
    expect(body.issues?.length).toBeGreaterThan(0);
  });

  it("a JSON body sent without its content type is a 400 invalid_request with issues", async () => {
    const res = await api("/v1/tokens", {
      method: "POST",
      body: JSON.stringify({ name: "x", scopes: ["read"] }),
      headers: { "Content-Type": "text/plain" },
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { code: string; issues?: unknown[] };
    expect(body.code).toBe("invalid_request");
    expect(body.issues?.length).toBeGreaterThan(0);
  });
});
