import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { VramfarmFake } from "../fakes/vramfarm";
import { api, errorBody, PROVIDER_SECRETS } from "../helpers";
import {
  clock,
  drainLeases,
  driveUntil,
  envWith,
  fetchWith,
  fireCron,
  getLease,
  resetSim,
  simLease,
  useFakeClock,
} from "../schedules/support";

interface Account {
  providers: {
    provider: string;
    configured: boolean;
    balance: number | null;
    currency: string | null;
    error: string | null;
  }[];
  spend: { today: number; month: number; currency: string; committed_today: number; committed_month: number };
  budget: { daily: number | null; monthly: number | null };
  active_leases: number;
  limits: { max_active_leases: number };
}

let day = Date.parse("2031-04-01T08:00:00Z");
let fakes: InstalledFakes | null = null;

beforeEach(async () => {
  // Each test on its own UTC day, so spend of earlier tests does not count against it.
  day += 24 * 3_600_000;
  useFakeClock(day);
  await resetSim();
});

afterEach(async () => {
  fakes?.restore();
  fakes = null;
  await drainLeases();
});

async function rentWith(vars: Partial<Record<keyof Env, string>>, body: Record<string, unknown>): Promise<Response> {
  return fetchWith(envWith(vars), "/v1/leases", { method: "POST", json: simLease(body) });
}

describe("budget refusal", () => {
  it("refuses with 402 a rental whose worst case would cross the daily budget", async () => {
    // 0.69 USD/h × 120 min = 1.38 USD worst case, over a 1 USD day.
    const res = await rentWith({ BUDGET_DAILY_USD: "1" }, { max_minutes: 120 });
    expect(res.status).toBe(402);
    const body = await errorBody(res);
    expect(body.code).toBe("budget_exceeded");
    expect(body.error).toMatch(/daily budget of 1 USD/);
  });

  it("counts what active leases may still cost: the second of two 0.69 USD rentals is refused under 1 USD", async () => {
    const first = await rentWith({ BUDGET_DAILY_USD: "1" }, { max_minutes: 60 });
    expect(first.status).toBe(202);
    const second = await rentWith({ BUDGET_DAILY_USD: "1" }, { max_minutes: 60 });
    expect(second.status).toBe(402);
    // A max_cost cap lowers the worst case: 0.05 USD fits beside the first one's 0.92.
    const capped = await rentWith({ BUDGET_DAILY_USD: "1" }, { max_minutes: 60, max_cost: 0.05 });
    expect(capped.status).toBe(202);
  });

  it("applies the monthly budget too", async () => {
    const res = await rentWith({ BUDGET_MONTHLY_USD: "0.5" }, { max_minutes: 60 });
    expect(res.status).toBe(402);
    expect((await errorBody(res)).error).toMatch(/monthly budget/);
  });

  it("a scheduled run refused by the budget is skipped with the reason", async () => {
    const created = await api("/v1/schedules", {
      method: "POST",
      json: { name: "b", cron: "0 10 * * *", lease: simLease({ max_minutes: 120 }) },
    });
    const schedule = (await created.json()) as { id: string; next_run_at: string };
    const due = Date.parse(schedule.next_run_at);
    clock.set(due + 1000);
    await fireCron("* * * * *", due, envWith({ BUDGET_DAILY_USD: "1" }));
    const after = (await (await api(`/v1/schedules/${schedule.id}`)).json()) as {
      last_skip: { detail: string } | null;
      last_lease_id: string | null;
    };
    expect(after.last_lease_id).toBeNull();
    expect(after.last_skip?.detail).toMatch(/^budget: /);
    await api(`/v1/schedules/${schedule.id}`, { method: "DELETE" });
  });
});

describe("budget stop", () => {
  async function runningLease(): Promise<Lease> {
    const res = await api("/v1/leases", { method: "POST", json: simLease({ max_minutes: 600 }) });
    expect(res.status).toBe(202);
    const lease = (await res.json()) as Lease;
    return driveUntil(lease.id, "running");
  }

  it("the dispatcher stops every active lease with stop_reason budget once spend reaches the budget", async () => {
    const a = await runningLease();
    const b = await runningLease();
    // Two machines at 0.69 USD/h for 1 hour: 1.38 USD, over a 1 USD day.
    clock.advance(3600);
    await fireCron("* * * * *", clock.now, envWith({ BUDGET_DAILY_USD: "5" }));
    expect((await getLease(a.id)).status).toBe("running");

    await fireCron("* * * * *", clock.now, envWith({ BUDGET_DAILY_USD: "1" }));
    for (const lease of [a, b]) {
      const stopping = await getLease(lease.id);
      expect(stopping).toMatchObject({ status: "stopping", stop_reason: "budget" });
      const stopped = await driveUntil(lease.id, "stopped");
      expect(stopped.teardown_verified_at).not.toBeNull();
    }
  });

  it("the reaper enforces the budget too, and records it", async () => {
    const lease = await runningLease();
    clock.advance(2 * 3600);
    await fireCron("*/10 * * * *", clock.now, envWith({ BUDGET_MONTHLY_USD: "1" }));
    expect(await getLease(lease.id)).toMatchObject({ status: "stopping", stop_reason: "budget" });
    const runs = (await (await api("/v1/reaper/runs?limit=1")).json()) as {
      runs: { actions: { kind: string; lease_id: string }[] }[];
    };
    expect(runs.runs[0]!.actions).toContainEqual(expect.objectContaining({ kind: "budget_stop", lease_id: lease.id }));
  });
});

describe("GET /v1/account", () => {
  it("shows spend, budget, limits and every provider's balance, each failure in its error", async () => {
    const runpod = new RunpodFake();
    const vast = new VastFake();
    const vramfarm = new VramfarmFake();
    vast.inject("user", { kind: "http", status: 500 }, 10);
    fakes = installFakes(runpod, vast, vramfarm);

    const lease = await driveUntil(
      ((await (await api("/v1/leases", { method: "POST", json: simLease({ max_minutes: 600 }) })).json()) as Lease).id,
      "running",
    );
    clock.advance(3600);

    const res = await fetchWith(envWith({ BUDGET_DAILY_USD: "10", BUDGET_MONTHLY_USD: "200" }), "/v1/account");
    expect(res.status).toBe(200);
    const text = await res.text();
    for (const secret of PROVIDER_SECRETS) expect(text).not.toContain(secret);
    const account = JSON.parse(text) as Account;
    const byName = Object.fromEntries(account.providers.map((p) => [p.provider, p]));
    expect(byName.runpod).toMatchObject({ configured: true, balance: 42.17, currency: "USD", error: null });
    expect(byName.vramfarm).toMatchObject({ configured: true, balance: 12.5, currency: "EUR", error: null });
    expect(byName.vast).toMatchObject({ configured: true, balance: null });
    expect(byName.vast!.error).toBeTruthy();
    expect(byName.sim).toMatchObject({ configured: true, currency: "USD", error: null });
    expect(account.budget).toEqual({ daily: 10, monthly: 200 });
    expect(account.limits).toEqual({ max_active_leases: 4 });
    expect(account.active_leases).toBe(1);
    // One hour at 0.69 USD/h (plus the few seconds of booting the sim bills too).
    expect(account.spend.today).toBeGreaterThanOrEqual(0.69);
    expect(account.spend.today).toBeLessThan(0.75);
    expect(account.spend.month).toBeGreaterThanOrEqual(account.spend.today);
    // START_TIMEOUT_MIN (20) + 600 minutes at 0.69 USD/h may still be spent (the sim bills while it boots).
    expect(account.spend.committed_today).toBeCloseTo(7.13, 1);
    expect(lease.id).toBeTruthy();
  });

  it("needs the read scope", async () => {
    const res = await api("/v1/account", { token: null });
    expect(res.status).toBe(401);
  });
});
