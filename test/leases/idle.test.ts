import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import worker from "../../src/index";
import type { Lease } from "../../src/leases/schema";
import { simCloud } from "../../src/sim/cloud";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { OllamaRegistryFake } from "../fakes/ollama-registry";
import { api, apiRequest, errorBody } from "../helpers";
import { TestClock } from "../support/clock";
import { driveTo, driveUntil, ledgerLease } from "../support/keeper";
import { rent } from "../support/lease";

// `idle_minutes` on a plain model lease: its keeper stops it once the gateway has carried no
// request for that long, within one poll interval of the deadline.
const clock = new TestClock(Date.parse("2035-07-01T00:00:00Z"));
const MODEL = "llama3.2:1b";
let fakes: InstalledFakes;

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  fakes = installFakes(new OllamaRegistryFake());
  await simCloud(env.SIM_CLOUD).reset();
  await simCloud(env.SIM_CLOUD).configure({ bootSeconds: 20, readySeconds: 5, lingerSeconds: 0, creditUsd: 100_000 });
});

afterEach(async () => {
  const leases = ((await (await api("/v1/leases?status=active&limit=200")).json()) as { leases: Lease[] }).leases;
  for (const lease of leases) {
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await driveTo(lease.id, "stopped", { clock, maxAlarms: 400 });
  }
  fakes.restore();
});

async function chat(leaseId: string, key: string): Promise<number> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(
    apiRequest(`/llm/${leaseId}/v1/chat/completions`, {
      method: "POST",
      token: key,
      json: { model: MODEL, messages: [{ role: "user", content: "hi" }] },
    }) as Request<unknown, IncomingRequestCfProperties>,
    env,
    ctx,
  );
  await res.text();
  await waitOnExecutionContext(ctx);
  return res.status;
}

describe("idle_minutes on a model lease", () => {
  it("stops the lease after that long with no request through the gateway, counted from the last one", async () => {
    const res = await rent({ provider: "sim", model: MODEL, max_minutes: 120, idle_minutes: 3 });
    expect(res.status).toBe(202);
    const { id, inference_key: key } = (await res.json()) as Lease & { inference_key: string };
    await driveTo(id, "running", { clock, maxAlarms: 200 });
    clock.advance(2 * 60_000);
    expect(await chat(id, key)).toBe(200);
    const lastRequest = clock.now;
    const end = await driveUntil(id, ["stopping", "stopped"], { clock, maxAlarms: 200 });
    expect(end.reached).toBe(true);
    const stopping = await ledgerLease(id);
    const after = Date.parse(stopping.stop_requested_at as string) - lastRequest;
    expect(after).toBeGreaterThanOrEqual(3 * 60_000);
    expect(after).toBeLessThanOrEqual(3 * 60_000 + 10_000);
    const events = (await (await api(`/v1/leases/${id}/events`)).json()) as {
      events: { kind: string; detail: string }[];
    };
    expect(events.events.find((e) => e.kind === "stop_requested")?.detail).toMatch(/idle: no request/);
    const stopped = await driveTo(id, "stopped", { clock, maxAlarms: 200 });
    expect(stopped.teardown_verified_at).not.toBeNull();
    // Its own stop reason, through the API: the lease and its stop events say `idle`.
    const shown = (await (await api(`/v1/leases/${id}`)).json()) as Lease;
    expect(shown).toMatchObject({ status: "stopped", stop_reason: "idle", endpoint: null });
    const ended = (await (await api(`/v1/leases/${id}/events`)).json()) as {
      events: { kind: string; reason: string | null }[];
    };
    expect(ended.events.find((e) => e.kind === "stop_requested")?.reason).toBe("idle");
  });

  it("is refused on a lease without a model", async () => {
    const res = await rent({
      provider: "sim",
      gpu: "4090",
      template: "custom",
      image: "x/y:1",
      max_minutes: 30,
      idle_minutes: 3,
    });
    expect(res.status).toBe(400);
    expect((await errorBody(res)).issues?.map((i) => i.path)).toContain("idle_minutes");
  });
});
