import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { VramfarmFake } from "../fakes/vramfarm";
import { api, apiViaSelf, errorBody } from "../helpers";
import {
  clock,
  drainLeases,
  driveUntil,
  envWith,
  fetchWith,
  fireCron,
  resetSim,
  simLease,
  useFakeClock,
} from "../schedules/support";

// GET /v1/account/spend: the ledger's spend per UTC day and provider, every day of the window.

interface SpendAnswer {
  days: { day: string; providers: Record<string, number>; total: number; billed: number | null }[];
  currency: string;
  budget: { daily: number | null };
}

const HOUR = 3_600_000;
let start = Date.parse("2033-05-10T23:00:00Z");
let fakes: InstalledFakes | null = null;

beforeEach(async () => {
  // 40 days apart, so one test's leases stay out of the next one's recent days.
  start += 40 * 24 * HOUR;
  useFakeClock(start);
  await resetSim();
});

afterEach(async () => {
  fakes?.restore();
  fakes = null;
  await drainLeases();
});

async function spend(query = ""): Promise<SpendAnswer> {
  const res = await api(`/v1/account/spend${query}`);
  expect(res.status).toBe(200);
  return res.json();
}

async function rentAndStop(body: Record<string, unknown>, hours: number): Promise<Lease> {
  const res = await api("/v1/leases", { method: "POST", json: body });
  expect(res.status).toBe(202);
  const lease = (await res.json()) as Lease;
  await driveUntil(lease.id, "running");
  clock.set(clock.now + hours * HOUR);
  expect((await api(`/v1/leases/${lease.id}/stop`, { method: "POST" })).status).toBe(200);
  return driveUntil(lease.id, "stopped");
}

const dayOf = (t: number) => new Date(t).toISOString().slice(0, 10);

describe("GET /v1/account/spend", () => {
  it("has every UTC day of the window, oldest first, zero days included (30 by default)", async () => {
    const answer = await spend();
    expect(answer.currency).toBe("USD");
    expect(answer.days).toHaveLength(30);
    expect(answer.days.at(-1)!.day).toBe(dayOf(clock.now));
    expect(answer.days[0]!.day).toBe(dayOf(clock.now - 29 * 24 * HOUR));
    for (const d of answer.days) expect(d).toEqual({ day: d.day, providers: {}, total: 0, billed: null });
    expect((await spend("?days=1")).days).toHaveLength(1);
    expect((await spend("?days=366")).days).toHaveLength(366);
  });

  it("splits a lease running over midnight pro rata between its two days", async () => {
    // Rented at 23:00, stopped two hours later: about half on each side of midnight.
    const lease = await rentAndStop(simLease({ max_minutes: 600 }), 2);
    const answer = await spend("?days=2");
    const [before, after] = answer.days;
    expect(before!.day).toBe(dayOf(start));
    expect(after!.day).toBe(dayOf(start + 24 * HOUR));
    expect(before!.total + after!.total).toBeCloseTo(lease.cost, 3);
    expect(before!.providers.sim).toBeCloseTo(before!.total, 4);
    // The sim boots for a few seconds before 23:00's hour runs, so the first day has a little more.
    expect(before!.total).toBeGreaterThan(lease.cost * 0.45);
    expect(after!.total).toBeGreaterThan(lease.cost * 0.45);
    expect(before!.billed).toBeNull();
  });

  it("shows per provider spend and what RunPod billed, and the daily budget", async () => {
    fakes = installFakes(new RunpodFake(), new VastFake());
    clock.set(start + 2 * HOUR);
    const runpod = await rentAndStop({ provider: "runpod", gpu: "4090", max_minutes: 600 }, 1);
    const sim = await rentAndStop(simLease({ max_minutes: 600 }), 1);
    clock.set(clock.now + HOUR);
    await fireCron("*/10 * * * *", clock.now);

    const res = await fetchWith(envWith({ BUDGET_DAILY_USD: "10" }), "/v1/account/spend?days=3");
    expect(res.status).toBe(200);
    const answer = (await res.json()) as SpendAnswer;
    expect(answer.budget).toEqual({ daily: 10 });
    const today = answer.days.at(-1)!;
    expect(today.providers.runpod).toBeCloseTo(runpod.cost, 3);
    expect(today.providers.sim).toBeCloseTo(sim.cost, 3);
    expect(today.total).toBeCloseTo(runpod.cost + sim.cost, 3);
    // Only RunPod reports its bill per machine; the fake bills as the ledger counts.
    expect(today.billed).not.toBeNull();
    expect(Math.abs(today.billed! - runpod.cost) / runpod.cost).toBeLessThan(0.05);
    expect((await spend("?days=3")).budget).toEqual({ daily: null });
  });

  it("converts a EUR lease to USD with EUR_USD", async () => {
    fakes = installFakes(new RunpodFake(), new VastFake(), new VramfarmFake());
    clock.set(start + 2 * HOUR);
    const lease = await rentAndStop(
      { provider: "vramfarm", gpu: "4090", template: "custom", image: "ghcr.io/x/y:1", max_minutes: 600 },
      1,
    );
    expect(lease.currency).toBe("EUR");
    expect(lease.cost).toBeGreaterThan(0.4);
    const today = (await spend("?days=1")).days[0]!;
    // EUR_USD defaults to 1.08.
    expect(today.providers.vramfarm).toBeCloseTo(lease.cost * 1.08, 3);
    expect(today.total).toBeCloseTo(lease.cost * 1.08, 3);
  });

  it.each(["0", "367", "abc", "1.5", "-1", ""])("refuses days=%s with the 400 envelope", async (days) => {
    const res = await api(`/v1/account/spend?days=${days}`);
    expect(res.status).toBe(400);
    const body = await errorBody(res);
    expect(body.code).toBe("invalid_request");
    expect(body.issues?.[0]?.path).toBe("days");
  });

  it("needs a token, and answers through the runtime's own entry", async () => {
    expect((await api("/v1/account/spend", { token: null })).status).toBe(401);
    expect((await apiViaSelf("/v1/account/spend?days=7")).status).toBe(200);
  });
});
