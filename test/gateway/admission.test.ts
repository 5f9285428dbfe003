import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import { AdmissionCache, admissionFacts } from "../../src/gateway/admission";
import type { UsageSample } from "../../src/gateway/usage";
import { takeHeld } from "../../src/gateway/usage-hold";
import type { KeeperPort } from "../../src/keeper/client";
import { getLease, type LeaseRow } from "../../src/leases/ledger";
import type { Lease } from "../../src/leases/schema";
import { createServices } from "../../src/services";
import { api, apiRequest } from "../helpers";
import { TestClock } from "../support/clock";
import { driveTo, fireNext } from "../support/keeper";
import { rent } from "../support/lease";
import { simModelLeases } from "../support/sim-model-lease";

// The gateway admits a request from the lease's keeper (its Durable Object), not from D1: one
// keeper call per request, which also carries the usage of the isolate's earlier requests.
const clock = new TestClock(Date.parse("2035-06-01T00:00:00Z"));
const MODEL = "llama3.2:1b";
const runningModel = simModelLeases(clock, MODEL);

/** The worker with every D1 query it makes counted, and its keeper calls recorded. */
function instrumented(holdMs: number) {
  const d1: string[] = [];
  const keeperCalls: { method: string; leaseId: string; samples?: UsageSample[] }[] = [];
  const countingDb = new Proxy(env.DB, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        d1.push(`${String(name)} ${typeof args[0] === "string" ? args[0].slice(0, 40) : ""}`);
        return value.apply(target, args);
      };
    },
  });
  const app = createApp({
    services: (e) => {
      const real = createServices(e, { ...loadConfig(e), gatewayUsageHoldMs: holdMs });
      const keepers = new Proxy(real.keepers, {
        get(target, name) {
          const method = target[name as keyof KeeperPort] as (...a: unknown[]) => Promise<unknown>;
          return (leaseId: string, ...args: unknown[]) => {
            keeperCalls.push({
              method: String(name),
              leaseId,
              ...(name === "admission" ? { samples: args[0] as UsageSample[] } : {}),
            });
            return method(leaseId, ...args);
          };
        },
      });
      return { ...real, db: countingDb, keepers };
    },
  });
  /** One gateway request, its body read whole; `settled` waits for its waitUntil work. */
  const call = async (leaseId: string, key: string, path = "api/tags", json?: unknown) => {
    const ctx = createExecutionContext();
    const init = json === undefined ? { token: key } : { token: key, method: "POST", json };
    const res = await app.fetch(apiRequest(`/llm/${leaseId}/${path}`, init), env, ctx);
    const text = await res.text();
    return { res, text, settled: () => waitOnExecutionContext(ctx) };
  };
  return { d1, keeperCalls, call };
}

describe("admission from the lease's keeper", () => {
  it("a key holder's request reads nothing from D1 and makes one keeper call; its usage rides on the next request's", async () => {
    const lease = await runningModel();
    const { d1, keeperCalls, call } = instrumented(60_000);
    const first = await call(lease.id, lease.key);
    expect(first.res.status, first.text).toBe(200);
    const second = await call(lease.id, lease.key);
    expect(second.res.status).toBe(200);
    expect(d1).toEqual([]);
    expect(keeperCalls.map((c) => [c.method, c.leaseId, c.samples?.length])).toEqual([
      ["admission", lease.id, 0],
      ["admission", lease.id, 1],
    ]);
    expect(keeperCalls[1]?.samples?.[0]).toMatchObject({ ok: true, prompt_tokens: 0 });
    // Counted once it reached the keeper; the second request's usage still waits in the hold.
    await fireNext(clock, lease.id);
    expect((await (await api(`/v1/leases/${lease.id}`)).json()) as Lease).toMatchObject({ usage: { requests: 1 } });
    expect(takeHeld(lease.id)).toHaveLength(1);
  });

  it("a busy lease: an earlier sample's wait never sends a later request's sample (one call per request)", async () => {
    const lease = await runningModel();
    const { keeperCalls, call } = instrumented(150);
    const chatJson = (stream: boolean) => ({ model: MODEL, messages: [{ role: "user", content: "hi" }], stream });
    const kinds = [
      ["api/tags", undefined],
      ["v1/chat/completions", chatJson(false)],
      ["v1/chat/completions", chatJson(true)],
      ["api/chat", chatJson(true)],
    ] as const;
    // Requests 50 ms apart for about half a second: each earlier wait of 150 ms ends while a
    // later sample is held.
    const settled: (() => Promise<void>)[] = [];
    for (let i = 0; i < 12; i++) {
      const [path, json] = kinds[i % kinds.length] as (typeof kinds)[number];
      const r = await call(lease.id, lease.key, path, json);
      expect(r.res.status).toBe(200);
      settled.push(r.settled);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await Promise.all(settled.map((s) => s()));
    // Twelve admissions, each after the first carrying the one before; the last sent alone.
    expect(keeperCalls.map((c) => c.samples?.length)).toEqual([0, ...Array(11).fill(1), 1]);
  });

  it("a sample no request picks up within the hold is sent on its own, once", async () => {
    const lease = await runningModel();
    const { keeperCalls, call } = instrumented(30);
    const one = await call(lease.id, lease.key);
    const two = await call(lease.id, lease.key);
    await one.settled();
    await two.settled();
    // Two requests: two admissions (the second carrying the first's usage), then the second's alone.
    expect(keeperCalls.map((c) => c.samples?.length)).toEqual([0, 1, 1]);
    await fireNext(clock, lease.id);
    const usage = ((await (await api(`/v1/leases/${lease.id}`)).json()) as Lease).usage;
    expect(usage).toMatchObject({ requests: 2, errors: 0 });
  });

  it("the keeper's copy follows its writes: 409 while provisioning, 200 once running, 401 for a rotated key, 409 once stopping", async () => {
    const res = await rent({ provider: "sim", model: MODEL, max_minutes: 30 });
    const rented = (await res.json()) as Lease & { inference_key: string };
    const { d1, call } = instrumented(0);
    const early = await call(rented.id, rented.inference_key);
    expect(early.res.status).toBe(409);
    expect(early.text).toContain("provisioning");
    await driveTo(rented.id, "running", { clock, maxAlarms: 200 });
    expect((await call(rented.id, rented.inference_key)).res.status).toBe(200);
    const rotated = await api(`/v1/leases/${rented.id}/inference-key`, { method: "POST" });
    expect(rotated.status).toBe(200);
    const { inference_key: fresh } = (await rotated.json()) as { inference_key: string };
    expect((await call(rented.id, rented.inference_key)).res.status).toBe(401);
    expect((await call(rented.id, fresh)).res.status).toBe(200);
    expect((await api(`/v1/leases/${rented.id}/stop`, { method: "POST" })).status).toBe(200);
    const stopping = await call(rented.id, fresh);
    expect(stopping.res.status).toBe(409);
    expect(stopping.text).toContain("stopping");
    expect(d1).toEqual([]);
  });

  it("an unknown lease is a 404 to anyone, a wrong key a 401, without D1", async () => {
    const lease = await runningModel();
    const { d1, call } = instrumented(0);
    const unknown = await call(`lse_${"0".repeat(22)}`, lease.key);
    expect(unknown.res.status).toBe(404);
    const wrong = await call(lease.id, `glk_${"1".repeat(43)}`);
    expect(wrong.res.status).toBe(401);
    expect(wrong.res.headers.get("WWW-Authenticate")).toContain("gpulease-llm");
    expect(d1).toEqual([]);
  });
});

describe("the keeper's copy of the admission facts", () => {
  async function rows(): Promise<{ old: LeaseRow; rotated: LeaseRow }> {
    const res = await rent({ provider: "sim", model: MODEL, max_minutes: 30 });
    const old = (await getLease(env.DB, ((await res.json()) as Lease).id)) as LeaseRow;
    return { old, rotated: { ...old, inference_key_hash: "f".repeat(64) } };
  }

  it("a load that began before a write never replaces what the write set", async () => {
    const { old, rotated } = await rows();
    const cache = new AdmissionCache();
    let release: (row: LeaseRow) => void = () => undefined;
    const loading = cache.get(() => new Promise<LeaseRow>((resolve) => (release = resolve)));
    // The key is rotated while the row read is on its way.
    cache.written(rotated);
    release(old);
    expect((await loading)?.keyHash).toBe(old.inference_key_hash);
    const after = await cache.get(() => Promise.reject(new Error("the cache must answer")));
    expect(after).toEqual(admissionFacts(rotated));
  });

  it("a write whose guard failed (null) makes the next request read the row again", async () => {
    const { old, rotated } = await rows();
    const cache = new AdmissionCache();
    expect(await cache.get(async () => old)).toEqual(admissionFacts(old));
    cache.written(null);
    expect(await cache.get(async () => rotated)).toEqual(admissionFacts(rotated));
  });
});
