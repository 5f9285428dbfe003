import {
  createExecutionContext,
  runDurableObjectAlarm,
  runInDurableObject,
  waitOnExecutionContext,
} from "cloudflare:test";
import { env } from "cloudflare:workers";
import OpenAI from "openai";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import { takeReleases } from "../../src/endpoints/release-hold";
import worker from "../../src/index";
import type { Lease } from "../../src/leases/schema";
import { createServices } from "../../src/services";
import { simCloud } from "../../src/sim/cloud";
import { signatureHeader, standardWebhookHeaders } from "../../src/webhooks/signing";
import { OUTBOX_SENDER } from "../../src/webhooks/wake";
import { issueToken } from "../auth/tokens-helper";
import { browse, signIn } from "../dashboard/support";
import { type FakeService, type InstalledFakes, installFakes } from "../fakes/install";
import { OllamaRegistryFake } from "../fakes/ollama-registry";
import { ADMIN_TOKEN, api } from "../helpers";
import { TestClock } from "../support/clock";
import { driveTo, ledgerLease } from "../support/keeper";

// Model endpoints through the public surface: /v1/endpoints, the one base URL /llm/v1 called
// with the official openai client, the endpoint's Durable Object driven by its alarms (fired by
// the test, on the test's clock) and its replicas' keepers driven to running and stopped.
const clock = new TestClock(Date.parse("2035-06-01T00:00:00Z"));
const MODEL = "llama3.2:1b";
const BASE = "http://gpulease.test/llm/v1";

let fakes: InstalledFakes;
/** every request's execution context: its waitUntil work (usage, the replica's release) */
let pending: ExecutionContext[] = [];

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  fakes = installFakes(new OllamaRegistryFake());
  await simCloud(env.SIM_CLOUD).reset();
  await simCloud(env.SIM_CLOUD).configure({
    bootSeconds: 20,
    readySeconds: 5,
    lingerSeconds: 0,
    creditUsd: 100_000,
    downloadMbs: 500,
  });
});

afterEach(async () => {
  await settle();
  const endpoints = ((await (await api("/v1/endpoints")).json()) as { endpoints: { name: string }[] }).endpoints;
  for (const endpoint of endpoints) await api(`/v1/endpoints/${endpoint.name}`, { method: "DELETE" });
  const leases = ((await (await api("/v1/leases?status=active&limit=200")).json()) as { leases: Lease[] }).leases;
  for (const lease of leases) {
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await driveTo(lease.id, "stopped", { clock, maxAlarms: 400 });
  }
  fakes.restore();
});

/** The worker's fetch with the context kept, so that the request's waitUntil work can be awaited. */
const workerFetch: typeof fetch = async (input, init) => {
  const request = new Request(input as RequestInfo, init);
  const ctx = createExecutionContext();
  pending.push(ctx);
  return worker.fetch(request as Request<unknown, IncomingRequestCfProperties>, env, ctx);
};

async function settle(): Promise<void> {
  const contexts = pending;
  pending = [];
  await Promise.all(contexts.map((ctx) => waitOnExecutionContext(ctx)));
}

const client = (apiKey: string) => new OpenAI({ baseURL: BASE, apiKey, fetch: workerFetch, maxRetries: 0 });

interface EndpointView {
  name: string;
  state: string;
  replicas: { lease_id: string | null; status: string; in_flight: number; last_request_at: string | null }[];
  cold_starts: { at: string; duration_ms: number }[];
  spend_today_usd: number;
  failed_starts: number;
  base_url: string;
}

async function createEndpoint(body: Record<string, unknown>): Promise<{ endpoint: EndpointView; key: string }> {
  const res = await api("/v1/endpoints", { method: "POST", json: { model: MODEL, provider: "sim", ...body } });
  const text = await res.text();
  if (res.status !== 201) throw new Error(`create endpoint: ${res.status} ${text}`);
  return JSON.parse(text) as { endpoint: EndpointView; key: string };
}

async function view(name: string): Promise<EndpointView> {
  const res = await api(`/v1/endpoints/${name}`);
  if (res.status !== 200) throw new Error(`GET endpoint ${name}: ${res.status}`);
  return (await res.json()) as EndpointView;
}

async function endpointObject(name: string) {
  const row = await env.DB.prepare("SELECT id FROM endpoints WHERE name = ?").bind(name).first<{ id: string }>();
  if (!row) throw new Error(`no endpoint ${name}`);
  return env.ENDPOINT.getByName(row.id);
}

/** Fires the endpoint object's alarm (moving the clock to it when it is later); false when none is set. */
async function fireEndpoint(name: string, options: { moveClock?: boolean } = {}): Promise<boolean> {
  const stub = await endpointObject(name);
  return runInDurableObject(stub, async (instance, state) => {
    const at = await state.storage.getAlarm();
    if (at === null) return false;
    if (at > clock.now && options.moveClock !== false) clock.set(at);
    await state.storage.deleteAlarm();
    await (instance as unknown as { alarm(): Promise<void> }).alarm();
    return true;
  });
}

/** The endpoint's replicas' lease ids, in any phase. */
async function replicaIds(name: string): Promise<string[]> {
  return (await view(name)).replicas.map((r) => r.lease_id).filter((id): id is string => id !== null);
}

/**
 * A first request (answered 503 endpoint_starting unless min_replicas keeps a replica) has the
 * endpoint rent its first replica (its alarm); the replica is driven to running and the endpoint
 * sees it on its next look.
 */
async function warm(name: string, key: string | null = null): Promise<string> {
  if (key) {
    const res = await workerFetch(`${BASE}/chat/completions`, {
      method: "POST",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
      body: JSON.stringify(chat(name)),
    });
    expect(res.status).toBe(503);
    await settle();
  }
  await fireEndpoint(name, { moveClock: false });
  const [leaseId] = await replicaIds(name);
  if (!leaseId) throw new Error(`endpoint ${name} rented nothing: ${JSON.stringify(await view(name))}`);
  await driveTo(leaseId, "running", { clock, maxAlarms: 200 });
  await fireEndpoint(name, { moveClock: false });
  return leaseId;
}

const chat = (model: string, content = "hello") => ({ model, messages: [{ role: "user" as const, content }] });

describe("/v1/endpoints", () => {
  it("creates an endpoint with defaults, shows its key once, refuses a taken name and a bad one", async () => {
    const { endpoint, key } = await createEndpoint({ name: "crud" });
    expect(key).toMatch(/^gle_/);
    expect(endpoint).toMatchObject({
      name: "crud",
      min_replicas: 0,
      max_replicas: 2,
      idle_minutes: 15,
      cold_start_wait_s: 0,
      target_in_flight: 4,
      state: "idle",
      replicas: [],
      base_url: "http://gpulease.test/llm/v1",
    });
    expect(JSON.stringify(await view("crud"))).not.toContain(key);
    const again = await api("/v1/endpoints", { method: "POST", json: { name: "crud", model: MODEL } });
    expect(again.status).toBe(409);
    expect(((await again.json()) as { code: string }).code).toBe("endpoint_exists");
    const bad = await api("/v1/endpoints", { method: "POST", json: { name: "Bad Name", model: MODEL } });
    expect(bad.status).toBe(400);
    const inverted = await api("/v1/endpoints", {
      method: "POST",
      json: { name: "inv", model: MODEL, min_replicas: 3, max_replicas: 1 },
    });
    expect(inverted.status).toBe(400);
  });

  it("needs the rent scope to create and change; read lists", async () => {
    const reader = (await issueToken(["read"])).token;
    const created = await api("/v1/endpoints", {
      method: "POST",
      json: { name: "scoped", model: MODEL },
      token: reader,
    });
    expect(created.status).toBe(403);
    await createEndpoint({ name: "scoped" });
    expect((await api("/v1/endpoints", { token: reader })).status).toBe(200);
    const patch = await api("/v1/endpoints/scoped", { method: "PATCH", json: { idle_minutes: 5 }, token: reader });
    expect(patch.status).toBe(403);
    const renter = (await issueToken(["rent"])).token;
    const patched = await api("/v1/endpoints/scoped", { method: "PATCH", json: { idle_minutes: 5 }, token: renter });
    expect(patched.status).toBe(200);
    expect(((await patched.json()) as { idle_minutes: number }).idle_minutes).toBe(5);
    const conflict = await api("/v1/endpoints/scoped", { method: "PATCH", json: { min_replicas: 9 }, token: renter });
    expect(conflict.status).toBe(409);
  });

  it("rotates the key: the old one gets 401 in OpenAI's shape at once, the new one works", async () => {
    const { key } = await createEndpoint({ name: "rot" });
    const rotated = await api("/v1/endpoints/rot/keys", { method: "POST" });
    const { key: fresh } = (await rotated.json()) as { key: string };
    expect(fresh).toMatch(/^gle_/);
    const old = await workerFetch(`${BASE}/models`, { headers: { Authorization: `Bearer ${key}` } });
    expect(old.status).toBe(401);
    const models = await client(fresh).models.list();
    expect(models.data.map((m) => m.id)).toEqual(["rot"]);
  });
});

describe("the one base URL", () => {
  it("a wrong key gets 401 in OpenAI's shape", async () => {
    await createEndpoint({ name: "keyed" });
    const res = await workerFetch(`${BASE}/chat/completions`, {
      method: "POST",
      headers: { Authorization: "Bearer gle_wrong", "Content-Type": "application/json" },
      body: JSON.stringify(chat("keyed")),
    });
    expect(res.status).toBe(401);
    const body = (await res.json()) as { error: { message: string; type: string; code: string } };
    expect(body.error).toMatchObject({ type: "authentication_error", code: "unauthorized" });
    expect(typeof body.error.message).toBe("string");
    await expect(client("gle_wrong").chat.completions.create(chat("keyed"))).rejects.toMatchObject({ status: 401 });
  });

  it("an endpoint's key opens only its own endpoint; an infer token opens every one", async () => {
    const { key } = await createEndpoint({ name: "one" });
    await createEndpoint({ name: "two" });
    await expect(client(key).chat.completions.create(chat("two"))).rejects.toMatchObject({
      status: 404,
      code: "model_not_found",
    });
    const infer = (await issueToken(["infer"])).token;
    const listed = await client(infer).models.list();
    expect(listed.data.map((m) => m.id).sort()).toEqual(["one", "two"]);
  });

  it("min_replicas 0: a request starts a replica, gets 503 endpoint_starting with Retry-After, and the openai client's calls answer once it runs (streaming and not)", async () => {
    const { key } = await createEndpoint({ name: "cold" });
    expect((await view("cold")).replicas).toEqual([]);
    const openai = client(key);
    const refused = await openai.chat.completions.create(chat("cold")).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.APIError);
    const apiError = refused as InstanceType<typeof OpenAI.APIError>;
    expect(apiError.status).toBe(503);
    expect(apiError.code).toBe("endpoint_starting");
    expect(Number(apiError.headers?.get("retry-after"))).toBeGreaterThan(0);
    expect(apiError.message).toMatch(/starting, expected by/);
    await settle();

    const leaseId = await warm("cold");
    expect((await view("cold")).state).toBe("serving");
    const answer = await openai.chat.completions.create(chat("cold", "say hi"));
    expect(answer.choices[0]?.message.content?.length).toBeGreaterThan(0);
    const stream = await openai.chat.completions.create({ ...chat("cold", "count"), stream: true });
    let streamed = "";
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
    expect(streamed.length).toBeGreaterThan(0);
    await settle();

    const shown = await view("cold");
    expect(shown.cold_starts).toHaveLength(1);
    expect(shown.replicas).toEqual([expect.objectContaining({ lease_id: leaseId, status: "running", in_flight: 0 })]);
    // The replica is a model lease like any other.
    const lease = (await (await api(`/v1/leases/${leaseId}`)).json()) as Lease;
    expect(lease).toMatchObject({ status: "running", name: "endpoint cold", endpoint: "cold", spec: { model: MODEL } });
    // Listed too, tagged with its endpoint; a lease of no endpoint shows null.
    const listed = (await (await api("/v1/leases?status=active")).json()) as { leases: Lease[] };
    expect(listed.leases.find((l) => l.id === leaseId)?.endpoint).toBe("cold");

    // The dashboard's Endpoints page: the endpoint, its replica, its cold start charted and tabled.
    const { cookie } = await signIn();
    const res = await browse("/endpoints", { cookie });
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toContain(`href="/leases/${leaseId}"`);
    expect(html).toContain('data-chart="cold-cold"');
    expect(html).toContain('<figure class="chart"');
    expect(html).toContain("Every cold start");
    // The replica's lease page names its endpoint, linked to it.
    const leasePage = await (await browse(`/leases/${leaseId}`, { cookie })).text();
    expect(leasePage).toContain('<a href="/endpoints#endpoint-cold">cold</a>');
  });

  it("holds a request up to cold_start_wait_s and answers it once the replica runs", async () => {
    const { key } = await createEndpoint({ name: "hold", cold_start_wait_s: 120 });
    const held = client(key).chat.completions.create(chat("hold", "hi"));
    // The request armed the endpoint's alarm: it rents; the replica's keeper brings it up.
    let leaseId: string | undefined;
    for (let i = 0; i < 50 && !leaseId; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      if (await fireEndpoint("hold", { moveClock: false })) leaseId = (await replicaIds("hold"))[0];
    }
    if (!leaseId) throw new Error("no replica rented");
    await driveTo(leaseId, "running", { clock, maxAlarms: 200 });
    const answer = await held;
    expect(answer.choices[0]?.message.content?.length).toBeGreaterThan(0);
    await settle();
    expect((await view("hold")).cold_starts).toHaveLength(1);
  });

  it("/llm/e/{name}/… addresses one endpoint: OpenAI and Ollama routes, the model named for the machine", async () => {
    const { key } = await createEndpoint({ name: "direct" });
    await warm("direct", key);
    const models = await workerFetch("http://gpulease.test/llm/e/direct/v1/models", {
      headers: { Authorization: `Bearer ${key}` },
    });
    expect(((await models.json()) as { data: { id: string; state: string }[] }).data).toEqual([
      expect.objectContaining({ id: "direct", state: "serving" }),
    ]);
    const direct = new OpenAI({
      baseURL: "http://gpulease.test/llm/e/direct/v1",
      apiKey: key,
      fetch: workerFetch,
      maxRetries: 0,
    });
    const answer = await direct.chat.completions.create(chat("anything"));
    expect(answer.choices[0]?.message.content?.length).toBeGreaterThan(0);
    const ollama = await workerFetch("http://gpulease.test/llm/e/direct/api/chat", {
      method: "POST",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
      body: JSON.stringify({ model: "direct", messages: [{ role: "user", content: "hi" }], stream: false }),
    });
    expect(ollama.status).toBe(200);
    expect(((await ollama.json()) as { message: { content: string } }).message.content.length).toBeGreaterThan(0);
    // Ollama's model-changing routes are refused here too, in the API's envelope.
    const pull = await workerFetch("http://gpulease.test/llm/e/direct/api/pull", {
      method: "POST",
      headers: { Authorization: `Bearer ${key}` },
      body: JSON.stringify({ model: "x" }),
    });
    expect(pull.status).toBe(403);
    expect(((await pull.json()) as { code: string }).code).toBe("forbidden");
    // The lease gateway's body checks hold here too: no unloading the model, no context above its sizing.
    for (const asked of [{ keep_alive: 0 }, { options: { num_ctx: 1_000_000 } }]) {
      const refused = await workerFetch("http://gpulease.test/llm/e/direct/api/chat", {
        method: "POST",
        headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
        body: JSON.stringify({ model: "direct", messages: [{ role: "user", content: "hi" }], ...asked }),
      });
      expect(refused.status).toBe(400);
      expect(((await refused.json()) as { code: string }).code).toBe("invalid_request");
    }
    await settle();
    expect((await view("direct")).replicas[0]?.in_flight).toBe(0);
  });

  it("goes quiet and is back to zero replicas, verified, within idle_minutes and one keeper interval", async () => {
    const { key } = await createEndpoint({ name: "quiet", idle_minutes: 5 });
    const leaseId = await warm("quiet", key);
    await client(key).chat.completions.create(chat("quiet"));
    await settle();
    const lastRequest = clock.now;
    // The endpoint's own alarm is its next look: the idle deadline.
    for (let i = 0; i < 10 && (await replicaIds("quiet")).length > 0; i++) {
      await fireEndpoint("quiet");
      const lease = await ledgerLease(leaseId);
      if (lease.status === "stopping" || lease.status === "stopped") break;
    }
    const stopping = await ledgerLease(leaseId);
    expect(stopping.stop_requested_at).not.toBeNull();
    const stoppedAfter = Date.parse(stopping.stop_requested_at as string) - lastRequest;
    expect(stoppedAfter).toBeGreaterThanOrEqual(5 * 60_000);
    expect(stoppedAfter).toBeLessThanOrEqual(5 * 60_000 + 10_000);
    const stopped = await driveTo(leaseId, "stopped", { clock, maxAlarms: 200 });
    expect(stopped.teardown_verified_at).not.toBeNull();
    expect(stopped.error ?? "").toBe("");
    // Stopped for being idle, said as its own reason, on a lease that names its endpoint.
    const shown = (await (await api(`/v1/leases/${leaseId}`)).json()) as Lease;
    expect(shown).toMatchObject({ stop_reason: "idle", endpoint: "quiet" });
    await fireEndpoint("quiet");
    expect((await view("quiet")).replicas).toEqual([]);
    expect((await view("quiet")).state).toBe("idle");
    // Idle cost after the window: no machine alive at the provider.
    const sim = (await (await api("/v1/sim")).json()) as { machines: unknown[] };
    expect(sim.machines).toEqual([]);
  });

  it("a burst scales to max_replicas, a scale-down during a long stream completes the stream, and back to zero", async () => {
    const { key } = await createEndpoint({ name: "burst", max_replicas: 2, target_in_flight: 1, idle_minutes: 2 });
    const first = await warm("burst", key);
    // Two long streams in flight on the one replica: above the target of 1 per replica.
    const openai = client(key);
    const long1 = await openai.chat.completions.create({ ...chat("burst", "a long story ".repeat(4)), stream: true });
    const long2 = await openai.chat.completions.create({ ...chat("burst", "another long one"), stream: true });
    expect((await view("burst")).replicas[0]?.in_flight).toBe(2);
    clock.advance(31_000);
    await fireEndpoint("burst", { moveClock: false });
    const ids = await replicaIds("burst");
    expect(ids).toHaveLength(2);
    const second = ids.find((id) => id !== first) as string;
    await driveTo(second, "running", { clock, maxAlarms: 200 });
    await fireEndpoint("burst", { moveClock: false });
    expect((await view("burst")).replicas.filter((r) => r.status === "running")).toHaveLength(2);
    // Never above max_replicas, however long the overload lasts.
    clock.advance(31_000);
    await fireEndpoint("burst", { moveClock: false });
    expect(await replicaIds("burst")).toHaveLength(2);

    // The second replica stays quiet past idle_minutes while the streams still run on the first:
    // it is stopped, the first (with requests in flight) is not, and both streams complete.
    clock.advance(2 * 60_000 + 1_000);
    await fireEndpoint("burst", { moveClock: false });
    expect((await ledgerLease(second)).status).toBe("stopping");
    expect((await ledgerLease(first)).status).toBe("running");
    let text = "";
    for await (const chunk of long1) text += chunk.choices[0]?.delta?.content ?? "";
    for await (const chunk of long2) text += chunk.choices[0]?.delta?.content ?? "";
    expect(text.length).toBeGreaterThan(0);
    await settle();
    clock.advance(2 * 60_000 + 1_000);
    await fireEndpoint("burst", { moveClock: false });
    await driveTo(first, "stopped", { clock, maxAlarms: 200 });
    await driveTo(second, "stopped", { clock, maxAlarms: 200 });
    await fireEndpoint("burst", { moveClock: false });
    expect((await view("burst")).replicas).toEqual([]);
  });

  it("a replica whose machine vanishes mid-stream is replaced on another rental and the next request succeeds", async () => {
    const { key } = await createEndpoint({ name: "lost", cold_start_wait_s: 0 });
    const leaseId = await warm("lost", key);
    const openai = client(key);
    const stream = await openai.chat.completions.create({ ...chat("lost", "a long story"), stream: true });
    const lease = await ledgerLease(leaseId);
    const vanished = await api(`/v1/sim/machines/${lease.provider_ref}`, { method: "DELETE" });
    expect(vanished.status).toBe(200);
    // The stream ends (cut or finished); the keeper finds the machine gone and ends the lease.
    try {
      for await (const _chunk of stream) {
        // drain
      }
    } catch {
      // cut mid-stream: expected when the machine vanished
    }
    await settle();
    await driveTo(leaseId, "stopped", { clock, maxAlarms: 200 });
    await fireEndpoint("lost", { moveClock: false });
    const replacement = (await replicaIds("lost")).find((id) => id !== leaseId);
    expect(replacement).toBeDefined();
    await driveTo(replacement as string, "running", { clock, maxAlarms: 200 });
    await fireEndpoint("lost", { moveClock: false });
    const answer = await openai.chat.completions.create(chat("lost"));
    expect(answer.choices[0]?.message.content?.length).toBeGreaterThan(0);
    await settle();
  });

  it("the budget stops the replicas and answers 402 budget_exceeded in OpenAI's shape", async () => {
    const { key } = await createEndpoint({ name: "budget", budget_daily_usd: 0.01 });
    const leaseId = await warm("budget", key);
    // An hour of a sim GPU costs more than a cent.
    clock.advance(3_600_000);
    await fireEndpoint("budget", { moveClock: false });
    expect((await view("budget")).state).toBe("budget_exhausted");
    expect(["stopping", "stopped"]).toContain((await ledgerLease(leaseId)).status);
    expect((await ledgerLease(leaseId)).stop_reason).toBe("budget");
    const refused = await client(key)
      .chat.completions.create(chat("budget"))
      .catch((error: unknown) => error as InstanceType<typeof OpenAI.APIError>);
    expect(refused).toMatchObject({ status: 402, code: "budget_exceeded" });
    expect((refused as Error).message).toMatch(/daily budget/);
    await driveTo(leaseId, "stopped", { clock, maxAlarms: 200 });
    // No new rental while the budget is spent.
    await fireEndpoint("budget", { moveClock: false });
    expect(await replicaIds("budget")).toEqual([]);
  });

  it("DELETE stops every replica, verified", async () => {
    await createEndpoint({ name: "gone", min_replicas: 1 });
    const leaseId = await warm("gone");
    const res = await api("/v1/endpoints/gone", { method: "DELETE" });
    expect(await res.json()).toEqual({ ok: true, stopped: 1 });
    const stopped = await driveTo(leaseId, "stopped", { clock, maxAlarms: 200 });
    expect(stopped.teardown_verified_at).not.toBeNull();
    expect((await api("/v1/endpoints/gone")).status).toBe(404);
  });
});

/** The worker with every D1 query its requests make counted, and every call to an endpoint's object. */
function instrumented(holdMs = 0) {
  const d1: string[] = [];
  const objectCalls: string[] = [];
  const countingDb = new Proxy(env.DB, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        d1.push(`${String(name)} ${typeof args[0] === "string" ? args[0].slice(0, 50) : ""}`);
        return value.apply(target, args);
      };
    },
  });
  const namespace = env.ENDPOINT;
  const endpoints = new Proxy(namespace, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver);
      if (typeof value !== "function") return value;
      if (name !== "getByName" && name !== "get") return value.bind(target);
      return (...args: unknown[]) => {
        const stub = value.apply(target, args) as Record<string, unknown>;
        return new Proxy(stub, {
          get(object, method) {
            const call = Reflect.get(object, method);
            if (typeof call !== "function") return call;
            return (...callArgs: unknown[]) => {
              objectCalls.push(String(method));
              return Reflect.apply(call, object, callArgs);
            };
          },
        });
      };
    },
  });
  const app = createApp({
    services: (e) => ({
      ...createServices({ ...e, ENDPOINT: endpoints } as Env, { ...loadConfig(e), gatewayUsageHoldMs: holdMs }),
      db: countingDb,
    }),
  });
  const call = async (key: string, body: unknown, path = "chat/completions") => {
    const ctx = createExecutionContext();
    const res = await app.fetch(
      new Request(`${BASE}/${path}`, {
        method: "POST",
        headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
        body: JSON.stringify(body),
      }),
      env,
      ctx,
    );
    const text = await res.text();
    // A held release waits in waitUntil for its hold: only a request without one is settled here.
    if (holdMs === 0) await waitOnExecutionContext(ctx);
    return { status: res.status, text };
  };
  const reset = () => {
    d1.length = 0;
    objectCalls.length = 0;
  };
  return { d1, objectCalls, call, reset };
}

describe("the warm path", () => {
  it("a warm request reads nothing from D1 and makes one call to the endpoint's object before its answer", async () => {
    const { key } = await createEndpoint({ name: "warm" });
    await warm("warm", key);
    const { d1, objectCalls, call, reset } = instrumented();
    // The isolate's first request for the name finds the endpoint's id in D1; none after it does.
    expect((await call(key, chat("warm"))).status).toBe(200);
    reset();
    for (let i = 0; i < 3; i++) expect((await call(key, chat("warm"))).status).toBe(200);
    // The bootstrap admin token needs no D1 either (a scoped token is one read, as on the lease gateway).
    expect((await call(ADMIN_TOKEN, chat("warm"))).status).toBe(200);
    expect(d1).toEqual([]);
    // acquire before each answer; the release after it (waitUntil), nothing else.
    expect(objectCalls).toEqual(Array(4).fill(["acquire", "release"]).flat());
    const shown = await view("warm");
    expect(shown.replicas).toEqual([expect.objectContaining({ status: "running", in_flight: 0 })]);
  });

  it("a busy endpoint: each request's release rides on the next one's call, one call to the object per request", async () => {
    const { key } = await createEndpoint({ name: "busy" });
    await warm("busy", key);
    const { objectCalls, call } = instrumented(60_000);
    for (let i = 0; i < 3; i++) expect((await call(key, chat("busy"))).status).toBe(200);
    expect(objectCalls).toEqual(["acquire", "acquire", "acquire"]);
    // The last request's release still waits in the hold: its replica counts it in flight until sent.
    expect((await view("busy")).replicas[0]?.in_flight).toBe(1);
    const row = await env.DB.prepare("SELECT id FROM endpoints WHERE name = 'busy'").first<{ id: string }>();
    const held = takeReleases(row?.id as string);
    expect(held).toEqual([{ ticket: expect.any(String), ok: true }]);
    await (await endpointObject("busy")).release(held);
    expect((await view("busy")).replicas[0]?.in_flight).toBe(0);
  });

  it("a rotated key is refused at once on the warm path, the new one works, another endpoint's key is a 404", async () => {
    const { key } = await createEndpoint({ name: "turn" });
    const other = await createEndpoint({ name: "other" });
    await warm("turn", key);
    const { call } = instrumented();
    expect((await call(key, chat("turn"))).status).toBe(200);
    const rotated = await api("/v1/endpoints/turn/keys", { method: "POST" });
    const { key: fresh } = (await rotated.json()) as { key: string };
    const old = await call(key, chat("turn"));
    expect(old.status).toBe(401);
    expect(JSON.parse(old.text)).toMatchObject({ error: { type: "authentication_error", code: "unauthorized" } });
    expect((await call(fresh, chat("turn"))).status).toBe(200);
    const foreign = await call(other.key, chat("turn"));
    expect(foreign.status).toBe(404);
    expect(JSON.parse(foreign.text)).toMatchObject({ error: { code: "model_not_found" } });
    expect((await call(`gle_${"x".repeat(43)}`, chat("turn"))).status).toBe(401);
  });

  it("a name deleted and created again reaches the new endpoint, not the old one's object", async () => {
    const first = await createEndpoint({ name: "again" });
    await warm("again", first.key);
    const { call } = instrumented();
    expect((await call(first.key, chat("again"))).status).toBe(200);
    expect((await api("/v1/endpoints/again", { method: "DELETE" })).status).toBe(200);
    // The isolate still maps the name to the deleted endpoint's id: its object says gone.
    const deleted = await call(first.key, chat("again"));
    expect(deleted.status).toBe(401);
    const second = await createEndpoint({ name: "again" });
    const cold = await call(second.key, chat("again"));
    expect(cold.status).toBe(503);
    expect(JSON.parse(cold.text)).toMatchObject({ error: { code: "endpoint_starting" } });
    expect((await call(first.key, chat("again"))).status).toBe(401);
    await settle();
  });
});

/** A webhook receiver at hooks.example.com: every delivery's headers and body, as sent. */
class HookReceiver implements FakeService {
  readonly received: { headers: Headers; body: string }[] = [];
  handles(url: URL): boolean {
    return url.hostname === "hooks.example.com";
  }
  async handle(request: Request): Promise<Response> {
    this.received.push({ headers: request.headers, body: await request.text() });
    return new Response(null, { status: 204 });
  }
}

/**
 * A webhook for the endpoint events, delivered to a receiver installed beside the registry fake;
 * `delivered` runs the outbox's sender until `count` deliveries are in, and checks each one's
 * signatures (Gpulease-Signature and the Standard Webhooks header) with the hook's secret.
 */
async function endpointHook(): Promise<{
  delivered(count: number): Promise<{ type: string; data: Record<string, unknown> }[]>;
}> {
  await env.DB.batch([env.DB.prepare("DELETE FROM webhook_deliveries"), env.DB.prepare("DELETE FROM webhook_events")]);
  const receiver = new HookReceiver();
  fakes.restore();
  fakes = installFakes(new OllamaRegistryFake(), receiver);
  const events = [
    "endpoint.replica_started",
    "endpoint.replica_stopped",
    "endpoint.replica_replaced",
    "endpoint.breaker_open",
  ];
  const res = await api("/v1/webhooks", { method: "POST", json: { url: "https://hooks.example.com/e", events } });
  expect(res.status).toBe(201);
  const { id, secret } = (await res.json()) as { id: string; secret: string };
  return {
    async delivered(count) {
      const sender = env.WEBHOOK_SENDER.getByName(OUTBOX_SENDER);
      for (let i = 0; i < 50 && receiver.received.length < count; i++) {
        await runDurableObjectAlarm(sender);
        if (receiver.received.length < count) await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(receiver.received).toHaveLength(count);
      const bodies = [];
      for (const { headers, body } of receiver.received) {
        const signature = headers.get("Gpulease-Signature") ?? "";
        const t = Number(/^t=(\d+),/.exec(signature)?.[1]);
        expect(signature).toBe(await signatureHeader(secret, body, t * 1000));
        const standard = await standardWebhookHeaders(
          secret,
          headers.get("webhook-id") ?? "",
          body,
          Number(headers.get("webhook-timestamp")) * 1000,
        );
        expect(headers.get("webhook-signature")).toBe(standard["webhook-signature"]);
        const parsed = JSON.parse(body) as { type: string; data: Record<string, unknown> };
        expect(headers.get("Gpulease-Event")).toBe(parsed.type);
        bodies.push(parsed);
      }
      await api(`/v1/webhooks/${id}`, { method: "DELETE" });
      return bodies;
    },
  };
}

describe("the circuit breaker and the endpoint's webhooks", () => {
  it("three failed starts open the breaker: shown by the endpoint and /llm/v1/models, 503 endpoint_unavailable in OpenAI's shape, announced signed; it closes after its window", async () => {
    const hook = await endpointHook();
    const { key } = await createEndpoint({ name: "flaky" });
    await simCloud(env.SIM_CLOUD).configure({ faults: { no_capacity: true } });
    const first = await workerFetch(`${BASE}/chat/completions`, {
      method: "POST",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
      body: JSON.stringify(chat("flaky")),
    });
    expect(first.status).toBe(503);
    await settle();
    // Each look rents, and the sim has no capacity: a failed start each time.
    for (let i = 0; i < 3; i++) await fireEndpoint("flaky");
    const shown = await view("flaky");
    expect(shown).toMatchObject({ state: "breaker_open", failed_starts: 3, replicas: [] });
    const models = await client(key).models.list();
    expect(models.data).toEqual([expect.objectContaining({ id: "flaky", state: "breaker_open" })]);
    const refused = await workerFetch(`${BASE}/chat/completions`, {
      method: "POST",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
      body: JSON.stringify(chat("flaky")),
    });
    expect(refused.status).toBe(503);
    expect(Number(refused.headers.get("Retry-After"))).toBeGreaterThan(14 * 60);
    const error = ((await refused.json()) as { error: { message: string; type: string; code: string } }).error;
    expect(error).toMatchObject({ type: "server_error", code: "endpoint_unavailable" });
    expect(error.message).toMatch(/3 replica starts failed in a row/);
    await settle();
    // No rental while it is open, however often the object looks.
    await fireEndpoint("flaky", { moveClock: false });
    expect(await replicaIds("flaky")).toEqual([]);
    const [announced] = await hook.delivered(1);
    expect(announced).toMatchObject({ type: "endpoint.breaker_open", data: { endpoint: "flaky", failedStarts: 3 } });

    // After its window (15 minutes) the next request rents again.
    await simCloud(env.SIM_CLOUD).configure({ faults: { no_capacity: false } });
    clock.advance(15 * 60_000 + 1_000);
    const again = await client(key)
      .chat.completions.create(chat("flaky"))
      .catch((e: unknown) => e as InstanceType<typeof OpenAI.APIError>);
    expect(again).toMatchObject({ status: 503, code: "endpoint_starting" });
    await settle();
    await fireEndpoint("flaky", { moveClock: false });
    expect(await replicaIds("flaky")).toHaveLength(1);
    expect((await view("flaky")).state).toBe("starting");
  });

  it("a replica started, lost and replaced, and stopped when idle: each announced, signed", async () => {
    const hook = await endpointHook();
    const { key } = await createEndpoint({ name: "told", idle_minutes: 3 });
    const first = await warm("told", key);
    const lease = await ledgerLease(first);
    expect((await api(`/v1/sim/machines/${lease.provider_ref}`, { method: "DELETE" })).status).toBe(200);
    await client(key)
      .chat.completions.create(chat("told"))
      .catch(() => undefined);
    await settle();
    await driveTo(first, "stopped", { clock, maxAlarms: 200 });
    await fireEndpoint("told", { moveClock: false });
    const second = (await replicaIds("told")).find((id) => id !== first) as string;
    expect(second).toBeDefined();
    await driveTo(second, "running", { clock, maxAlarms: 200 });
    await fireEndpoint("told", { moveClock: false });
    // Quiet past idle_minutes: drained and stopped.
    for (let i = 0; i < 10 && (await ledgerLease(second)).status === "running"; i++) await fireEndpoint("told");
    expect((await ledgerLease(second)).stop_reason).toBe("idle");
    const bodies = await hook.delivered(4);
    expect(bodies.map((b) => `${b.type} ${b.data.leaseId}`).sort()).toEqual(
      [
        `endpoint.replica_started ${first}`,
        `endpoint.replica_replaced ${first}`,
        `endpoint.replica_started ${second}`,
        `endpoint.replica_stopped ${second}`,
      ].sort(),
    );
    expect(bodies.find((b) => b.type === "endpoint.replica_stopped")?.data).toMatchObject({
      endpoint: "told",
      reason: "idle",
    });
    await driveTo(second, "stopped", { clock, maxAlarms: 200 });
  });
});
