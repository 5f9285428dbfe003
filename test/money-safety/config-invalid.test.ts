import {
  createExecutionContext,
  createScheduledController,
  runInDurableObject,
  waitOnExecutionContext,
} from "cloudflare:test";
import { env } from "cloudflare:workers";
import { beforeEach, describe, expect, it } from "vitest";
import worker from "../../src/index";
import { simCloud } from "../../src/sim/cloud";
import { REAPER_CRON } from "../../src/worker-crons";
import { ADMIN_TOKEN } from "../helpers";
import { driveUntil, Recorder, TestClock } from "../robustness/drive";
import { keeperOf } from "../support/keeper";

// Finding 5: one malformed var (EUR_USD=1,08) made every keeper alarm and the cron throw.
const BAD = { EUR_USD: "1,08" };
const badEnv = () => ({ ...env, ...BAD }) as Env;
const clock = new TestClock();

async function fetchWith(e: Env, path: string): Promise<Response> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(
    new Request(`http://gpulease.test${path}`, {
      headers: { Authorization: `Bearer ${ADMIN_TOKEN}` },
    }) as Request<unknown, IncomingRequestCfProperties>,
    e,
    ctx,
  );
  await waitOnExecutionContext(ctx);
  return res;
}

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  await simCloud(env.SIM_CLOUD).reset();
  await env.DB.prepare("UPDATE leases SET status = 'stopped' WHERE status != 'stopped'").run();
});

describe("a malformed setting", () => {
  it("answers 503 config_invalid naming the var on /health and /v1", async () => {
    const health = await fetchWith(badEnv(), "/health");
    expect(health.status).toBe(503);
    const body = (await health.json()) as { ok: boolean; code: string; error: string };
    expect(body).toMatchObject({ ok: false, code: "config_invalid" });
    expect(body.error).toContain("EUR_USD");
    const leases = await fetchWith(badEnv(), "/v1/leases");
    expect(leases.status).toBe(503);
    expect(await leases.json()).toMatchObject({ code: "config_invalid" });
    expect((await fetchWith(env, "/health")).status).toBe(200);
  });

  it("keepers go on: a stop with a malformed var still ends in a verified teardown", async () => {
    const recorder = new Recorder();
    const rented = await recorder.call("/v1/leases", {
      method: "POST",
      json: { provider: "sim", gpu: "4090", gpu_count: 1, template: "custom", image: "x/y:1", max_minutes: 30 },
    });
    expect(rented.status).toBe(202);
    const id = (rented.json as { id: string }).id;
    expect((await driveUntil(clock, recorder, id, ["running"])).reached).toBe(true);
    await recorder.call(`/v1/leases/${id}/stop`, { method: "POST" });
    // The keeper's env gets the malformed var (as after a deploy with a typo).
    await runInDurableObject(keeperOf(id), (instance) => {
      (instance as unknown as { env: Env }).env = badEnv();
    });
    // Failed on main: the alarm threw "invalid configuration: EUR_USD: expected a positive number".
    const end = await driveUntil(clock, recorder, id, ["stopped"]);
    expect(end.lease.status).toBe("stopped");
    expect(end.lease.teardown_verified_at).not.toBeNull();
    expect((await simCloud(env.SIM_CLOUD).describe()).machines).toEqual([]);
  });

  it("the cron does not throw before the reaper: a leaked machine is still adopted", async () => {
    const planted = await simCloud(env.SIM_CLOUD).plant({
      label: "gpulease-lse_01ts2kx1xrghyp8hnrh47z",
      age_seconds: 3600,
    });
    const ctx = createExecutionContext();
    // Failed on main: scheduled() threw ConfigError before the reaper ran.
    await worker.scheduled(createScheduledController({ scheduledTime: clock.now, cron: REAPER_CRON }), badEnv(), ctx);
    await waitOnExecutionContext(ctx);
    const row = await env.DB.prepare("SELECT status, provider_ref FROM leases WHERE provider_ref = ?")
      .bind(planted.ref)
      .first<{ status: string }>();
    expect(row?.status).toBe("stopping");
  });
});
