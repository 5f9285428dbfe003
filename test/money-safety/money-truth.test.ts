import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import worker from "../../src/index";
import type { Lease } from "../../src/leases/schema";
import { simCloud } from "../../src/sim/cloud";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { VastFake } from "../fakes/vast";
import { ADMIN_TOKEN } from "../helpers";
import { driveUntil, Recorder, TestClock } from "../robustness/drive";

// Finding 4: cost and budget undercount.

const clock = new TestClock();
let installed: InstalledFakes | null = null;
const SIM = { provider: "sim", gpu: "4090", gpu_count: 1, template: "custom", image: "x/y:1" };

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  await simCloud(env.SIM_CLOUD).reset();
  await env.DB.prepare("UPDATE leases SET status = 'stopped' WHERE status != 'stopped'").run();
});

afterEach(() => {
  installed?.restore();
  installed = null;
});

async function rentWith(e: Env, body: Record<string, unknown>): Promise<Response> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(
    new Request("http://gpulease.test/v1/leases", {
      method: "POST",
      headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    }) as Request<unknown, IncomingRequestCfProperties>,
    e,
    ctx,
  );
  await waitOnExecutionContext(ctx);
  return res;
}

describe("money truth", () => {
  it("the worst case counts billed boot time where the provider bills from the accepted rental", async () => {
    const recorder = new Recorder();
    const res = await recorder.call("/v1/leases", { method: "POST", json: { ...SIM, max_minutes: 30 } });
    expect(res.status).toBe(202);
    const lease = res.json as Lease & { expected_cost: number };
    // START_TIMEOUT_MIN (20) + max_minutes (30). Failed on main: price × 30 minutes only.
    expect(lease.expected_cost).toBeCloseTo(((lease.price_per_hour ?? 0) * 50) / 60, 5);
  });

  it("concurrent rentals cannot jointly cross the budget: check and insert are one step", async () => {
    const budgeted = { ...env, BUDGET_DAILY_USD: "1" } as Env;
    const body = { ...SIM, max_minutes: 600, max_cost: 0.6 };
    const answers = await Promise.all([rentWith(budgeted, body), rentWith(budgeted, body), rentWith(budgeted, body)]);
    const statuses = answers.map((r) => r.status).sort();
    // Failed on main: all three were accepted (3 × 0.6 USD against a 1 USD budget).
    expect(statuses).toEqual([202, 402, 402]);
    const { n } = (await env.DB.prepare("SELECT COUNT(*) AS n FROM leases WHERE status != 'stopped'").first<{
      n: number;
    }>())!;
    expect(n).toBe(1);
  });

  it("the running machine's own price replaces the offer's, with a price_updated event (Vast dph_total)", async () => {
    const vast = new VastFake({ bootMs: 30_000, lingerMs: 5_000 });
    installed = installFakes(vast);
    const recorder = new Recorder();
    const res = await recorder.call("/v1/leases", {
      method: "POST",
      json: { provider: "vast", gpu: "4090", template: "custom", image: "x/y:1", max_minutes: 60 },
    });
    expect(res.status).toBe(202);
    const rented = res.json as Lease;
    // The instance bills other than the offer said (the host's storage or price moved).
    const machine = vast.model.get(rented.provider_ref!)!;
    machine.pricePerHour = Math.round((rented.price_per_hour! + 0.0731) * 10_000) / 10_000;
    const run = await driveUntil(clock, recorder, rented.id, ["running"]);
    expect(run.reached).toBe(true);
    expect(machine.pricePerHour).not.toBe(rented.price_per_hour);
    // Failed on main: the lease kept the offer's price.
    expect(run.lease.price_per_hour).toBe(machine.pricePerHour);
    const events = (await recorder.call(`/v1/leases/${rented.id}/events`)).json as { events: { kind: string }[] };
    expect(events.events.map((e) => e.kind)).toContain("price_updated");
  });
});
