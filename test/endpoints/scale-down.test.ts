import { createExecutionContext, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import worker from "../../src/index";
import type { Lease } from "../../src/leases/schema";
import { simCloud } from "../../src/sim/cloud";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { OllamaRegistryFake } from "../fakes/ollama-registry";
import { api } from "../helpers";
import { TestClock } from "../support/clock";
import { driveTo, ledgerLease } from "../support/keeper";

// Scale-downs never cut a request: an endpoint kept between one and two replicas is scaled down
// again and again while a stream runs and a request arrives; every answer must be whole. Also the
// figure bench/endpoints.mjs prints (ENDPOINT_SCALE_DOWNS).
const clock = new TestClock(Date.parse("2035-08-01T00:00:00Z"));
const MODEL = "llama3.2:1b";
/** ENDPOINT_SCALE_DOWNS (vitest.config.ts): 3 in the suite, 20 for the bench */
const CYCLES = Math.max(1, Math.min(100, Number(env.ENDPOINT_SCALE_DOWNS) || 3));
let fakes: InstalledFakes;

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  fakes = installFakes(new OllamaRegistryFake());
  await simCloud(env.SIM_CLOUD).reset();
  await simCloud(env.SIM_CLOUD).configure({ bootSeconds: 20, readySeconds: 5, lingerSeconds: 0, creditUsd: 100_000 });
});

afterEach(async () => {
  await api("/v1/endpoints/shrink", { method: "DELETE" });
  const leases = ((await (await api("/v1/leases?status=active&limit=200")).json()) as { leases: Lease[] }).leases;
  for (const lease of leases) {
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await driveTo(lease.id, "stopped", { clock, maxAlarms: 400 });
  }
  fakes.restore();
});

async function call(key: string, stream: boolean): Promise<{ res: Response; settled: () => Promise<void> }> {
  const ctx = createExecutionContext();
  const request = new Request("http://gpulease.test/llm/v1/chat/completions", {
    method: "POST",
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
    body: JSON.stringify({ model: "shrink", messages: [{ role: "user", content: "tell me more" }], stream }),
  });
  const res = await worker.fetch(request as Request<unknown, IncomingRequestCfProperties>, env, ctx);
  return { res, settled: () => waitOnExecutionContext(ctx) };
}

async function fire(): Promise<void> {
  const row = await env.DB.prepare("SELECT id FROM endpoints WHERE name = 'shrink'").first<{ id: string }>();
  await runInDurableObject(env.ENDPOINT.getByName(row?.id ?? ""), async (instance, state) => {
    await state.storage.deleteAlarm();
    await (instance as unknown as { alarm(): Promise<void> }).alarm();
  });
}

async function replicas(): Promise<{ lease_id: string | null; status: string }[]> {
  return (
    (await (await api("/v1/endpoints/shrink")).json()) as { replicas: { lease_id: string | null; status: string }[] }
  ).replicas;
}

describe("scale-downs", () => {
  it(`lose no request over ${CYCLES} scale-downs`, async () => {
    const res = await api("/v1/endpoints", {
      method: "POST",
      json: { name: "shrink", model: MODEL, provider: "sim", min_replicas: 1, max_replicas: 2, idle_minutes: 1 },
    });
    const { key } = (await res.json()) as { key: string };
    let requests = 0;
    let lost = 0;
    let scaleDowns = 0;
    for (let cycle = 0; cycle < CYCLES; cycle++) {
      // Up to two replicas (min_replicas 2), both running.
      await api("/v1/endpoints/shrink", { method: "PATCH", json: { min_replicas: 2 } });
      await fire();
      for (const r of await replicas())
        if (r.lease_id && r.status !== "running") await driveTo(r.lease_id, "running", { clock, maxAlarms: 200 });
      await fire();
      expect((await replicas()).filter((r) => r.status === "running")).toHaveLength(2);
      await api("/v1/endpoints/shrink", { method: "PATCH", json: { min_replicas: 1 } });

      // A stream in flight on one replica while the other, quiet past idle_minutes, is scaled down;
      // a request arriving after the scale-down decision.
      const stream = await call(key, true);
      requests += 1;
      clock.advance(61_000);
      await fire();
      const after = await replicas();
      const stopping = after.filter((r) => r.status === "stopping");
      if (stopping.length === 1) scaleDowns += 1;
      const next = await call(key, false);
      requests += 1;
      const nextText = await next.res.text();
      await next.settled();
      if (next.res.status !== 200 || !JSON.parse(nextText).choices?.[0]?.message) lost += 1;
      const streamText = await stream.res.text();
      await stream.settled();
      if (stream.res.status !== 200 || !streamText.includes("data: [DONE]")) lost += 1;
      for (const r of stopping) if (r.lease_id) await driveTo(r.lease_id, "stopped", { clock, maxAlarms: 200 });
      await fire();
      for (const r of stopping) {
        if (!r.lease_id) continue;
        const lease = await ledgerLease(r.lease_id);
        expect(lease.teardown_verified_at).not.toBeNull();
      }
    }
    console.log(`ENDPOINT_SCALE_DOWNS scale_downs=${scaleDowns} requests=${requests} lost=${lost}`);
    expect(scaleDowns).toBe(CYCLES);
    expect(lost).toBe(0);
  }, 240_000);
});
