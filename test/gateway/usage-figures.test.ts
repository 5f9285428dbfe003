import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { flushStatement } from "../../src/gateway/usage-store";
import worker from "../../src/index";
import { emptyMeter } from "../../src/keeper/meter";
import type { Lease } from "../../src/leases/schema";
import { api, apiRequest } from "../helpers";
import { TestClock } from "../support/clock";
import { fireNext } from "../support/keeper";
import { simModelLeases } from "../support/sim-model-lease";

// A lease's usage figures agree with the lease they sit on: every answered request counted once,
// and the cost per million tokens from the lease's own `cost`.
const clock = new TestClock(Date.parse("2035-07-01T00:00:00Z"));
const MODEL = "llama3.2:1b";
const runningModel = simModelLeases(clock, MODEL);

/** One gateway request as a client makes it; the body read whole, its waitUntil work awaited. */
async function call(leaseId: string, key: string, path: string, json?: unknown): Promise<number> {
  const ctx = createExecutionContext();
  const request = apiRequest(`/llm/${leaseId}/${path}`, {
    method: json === undefined ? "GET" : "POST",
    json,
    token: key,
  });
  const res = await worker.fetch(request as Request<unknown, IncomingRequestCfProperties>, env, ctx);
  await res.arrayBuffer();
  await waitOnExecutionContext(ctx);
  return res.status;
}

const lease = async (id: string) => (await (await api(`/v1/leases/${id}`)).json()) as Lease;
const chat = (extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [{ role: "user", content: "Say hi" }],
  ...extra,
});

describe("usage on a lease", () => {
  it("13 answered calls of both clients' kinds are 13 requests", async () => {
    const a = await runningModel();
    const calls: [string, unknown?][] = [
      ["v1/chat/completions", chat()],
      ["v1/chat/completions", chat({ stream: true })],
      ["v1/models"],
      ["api/chat", chat({ stream: false })],
      ["api/chat", chat()],
      ["api/tags"],
      ["v1/completions", { model: MODEL, prompt: "Hi" }],
      ["api/generate", { model: MODEL, prompt: "Hi", stream: false }],
      ["api/generate", { model: MODEL, prompt: "Hi" }],
      ["v1/embeddings", { model: MODEL, input: "Hi" }],
      ["api/embed", { model: MODEL, input: "Hi" }],
      ["api/show", { model: MODEL }],
      ["api/ps"],
    ];
    const statuses = [];
    for (const [path, json] of calls) statuses.push(await call(a.id, a.key, path, json));
    expect(statuses.filter((s) => s < 500)).toHaveLength(13);
    await fireNext(clock, a.id);
    expect((await lease(a.id)).usage?.requests).toBe(13);
  });

  it("usd_per_million_tokens is the lease's own `cost` over its tokens, between the keeper's polls too", async () => {
    const a = await runningModel();
    expect(await call(a.id, a.key, "v1/chat/completions", chat())).toBe(200);
    expect(await call(a.id, a.key, "api/chat", chat({ stream: false }))).toBe(200);
    await fireNext(clock, a.id);
    // Forty seconds on, before the keeper's next poll moves `cost`.
    clock.advance(40_000);
    const now = await lease(a.id);
    const usage = now.usage;
    expect(usage?.requests).toBe(2);
    const tokens = (usage?.prompt_tokens ?? 0) + (usage?.completion_tokens ?? 0);
    expect(tokens).toBeGreaterThan(0);
    expect(now.currency).toBe("USD");
    expect(usage?.usd_per_million_tokens).toBe(Math.round((now.cost / tokens) * 1e6 * 10_000) / 10_000);
  });
});

describe("the meter's writes to D1", () => {
  it("a write that lands after a later one (two flushes in flight) never lowers the counts", async () => {
    const a = await runningModel();
    const meter = (requests: number) => ({ ...emptyMeter, requests, prompt_tokens: requests * 10, dirty: true });
    // The keeper's flush of 13 lands first; its earlier flush of 12 was slower and lands after.
    await flushStatement(env.DB, a.id, meter(13), new Date(clock.now).toISOString()).run();
    await flushStatement(env.DB, a.id, meter(12), new Date(clock.now - 1_000).toISOString()).run();
    expect((await lease(a.id)).usage).toMatchObject({ requests: 13, prompt_tokens: 130 });
  });
});
