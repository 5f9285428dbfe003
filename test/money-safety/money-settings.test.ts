import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { forgetLastValid, loadSettings, overlayVars } from "../../src/config";
import type { Lease } from "../../src/leases/schema";
import type { Schedule } from "../../src/schedules/schema";
import { browse, csrfOf, signIn } from "../dashboard/support";
import { api } from "../helpers";
import {
  clock,
  drainLeases,
  driveUntil,
  envWith,
  fetchWith,
  fireCron,
  getLease,
  leasesOfSchedule,
  resetSim,
  simLease,
  useFakeClock,
} from "../schedules/support";

// A budget var mistyped in a deploy (a word for a number): it must never mean "no budget".
const BAD_DAILY = { BUDGET_DAILY_USD: "ten" };
const DISPATCHER = "* * * * *";
const REAPER = "*/10 * * * *";

let day = Date.parse("2031-05-01T08:00:00Z");

beforeEach(async () => {
  // Each test on its own UTC day, so spend of earlier tests does not count against it.
  day += 24 * 3_600_000;
  useFakeClock(day);
  await resetSim();
});

afterEach(async () => {
  overlayVars({});
  await drainLeases();
});

async function leaseCount(): Promise<number> {
  const row = await env.DB.prepare("SELECT COUNT(*) AS n FROM leases").first<{ n: number }>();
  return row?.n ?? 0;
}

async function runningLease(): Promise<Lease> {
  const res = await api("/v1/leases", { method: "POST", json: simLease({ max_minutes: 600 }) });
  expect(res.status).toBe(202);
  return driveUntil(((await res.json()) as Lease).id, "running");
}

describe("a malformed budget keeps the last valid budget enforced on running leases", () => {
  it("the dispatcher cron stops a lease past the last valid daily budget while BUDGET_DAILY_USD is malformed", async () => {
    const lease = await runningLease();
    // A valid 1 USD day: nothing spent yet, nothing stopped.
    await fireCron(DISPATCHER, clock.now, envWith({ BUDGET_DAILY_USD: "1" }));
    expect((await getLease(lease.id)).status).toBe("running");
    // Two hours at 0.69 USD/h (1.38 USD), and the next deploy mistypes the budget.
    clock.advance(2 * 3600);
    await fireCron(DISPATCHER, clock.now, envWith(BAD_DAILY));
    expect(await getLease(lease.id)).toMatchObject({ status: "stopping", stop_reason: "budget" });
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.teardown_verified_at).not.toBeNull();
  });

  it("any malformed var leaves the dispatcher's budget enforcement on: a valid budget still stops leases", async () => {
    const lease = await runningLease();
    clock.advance(2 * 3600);
    await fireCron(DISPATCHER, clock.now, envWith({ BUDGET_DAILY_USD: "1", OFFERS_CACHE_S: "soon" }));
    expect(await getLease(lease.id)).toMatchObject({ status: "stopping", stop_reason: "budget" });
  });

  it("a fresh isolate still enforces the persisted last valid budget (reaper cron)", async () => {
    const lease = await runningLease();
    await fireCron(DISPATCHER, clock.now, envWith({ BUDGET_DAILY_USD: "1" }));
    clock.advance(2 * 3600);
    // A new isolate knows nothing of the values this one parsed; only the ledger does.
    forgetLastValid();
    await fireCron(REAPER, clock.now, envWith(BAD_DAILY));
    expect(await getLease(lease.id)).toMatchObject({ status: "stopping", stop_reason: "budget" });
  });

  it("a fresh isolate's dispatcher enforces it too, and stays under a budget that is not reached", async () => {
    const lease = await runningLease();
    await fireCron(DISPATCHER, clock.now, envWith({ BUDGET_MONTHLY_USD: "5" }));
    clock.advance(3600);
    forgetLastValid();
    // 0.69 USD of a 5 USD month: the malformed EUR_USD changes nothing about a USD lease.
    await fireCron(DISPATCHER, clock.now, envWith({ BUDGET_MONTHLY_USD: "5", EUR_USD: "1,08" }));
    expect((await getLease(lease.id)).status).toBe("running");
    clock.advance(8 * 3600);
    forgetLastValid();
    await fireCron(DISPATCHER, clock.now, envWith({ BUDGET_MONTHLY_USD: "five" }));
    expect(await getLease(lease.id)).toMatchObject({ status: "stopping", stop_reason: "budget" });
  });

  it("a cron run hands the stored EUR_USD to its isolate: a keeper there counts EUR at that rate", async () => {
    await fireCron(DISPATCHER, clock.now, envWith({ EUR_USD: "1.2" }));
    forgetLastValid();
    await fireCron(REAPER, clock.now, envWith({ EUR_USD: "1,2" }));
    // Without it, the documented default (1.08) would count a EUR lease's cost low.
    expect(loadSettings(envWith({ EUR_USD: "1,2" })).config.eurUsd).toBe(1.2);
  });

  it("the last valid values are written only when they change", async () => {
    const rows = () =>
      env.DB.prepare("SELECT name, value, updated_at FROM money_settings ORDER BY name").all<{
        name: string;
        value: string;
        updated_at: string;
      }>();
    await fireCron(DISPATCHER, clock.now, envWith({ BUDGET_DAILY_USD: "3", EUR_USD: "1.2" }));
    const first = (await rows()).results;
    expect(first.map(({ name, value }) => [name, value])).toEqual([
      ["BUDGET_DAILY_USD", "3"],
      ["BUDGET_MONTHLY_USD", "null"],
      ["EUR_USD", "1.2"],
    ]);
    clock.advance(60);
    await fireCron(DISPATCHER, clock.now, envWith({ BUDGET_DAILY_USD: "3", EUR_USD: "1.2" }));
    expect((await rows()).results).toEqual(first);
    // A malformed value writes nothing: the last valid one stays.
    clock.advance(60);
    await fireCron(DISPATCHER, clock.now, envWith({ BUDGET_DAILY_USD: "three", EUR_USD: "1.2" }));
    expect((await rows()).results).toEqual(first);
    clock.advance(60);
    await fireCron(DISPATCHER, clock.now, envWith({ BUDGET_DAILY_USD: "4", EUR_USD: "1.2" }));
    const changed = (await rows()).results;
    expect(changed[0]).toMatchObject({
      name: "BUDGET_DAILY_USD",
      value: "4",
      updated_at: new Date(clock.now).toISOString(),
    });
    expect(changed.slice(1)).toEqual(first.slice(1));
  });
});

describe("nothing is rented while a money setting is malformed", () => {
  it("POST /v1/leases and a schedule's run-now answer 503 config_invalid and rent nothing", async () => {
    const created = await api("/v1/schedules", {
      method: "POST",
      json: { name: "n", cron: "0 3 * * *", lease: simLease() },
    });
    const schedule = (await created.json()) as Schedule;
    const before = await leaseCount();
    const rent = await fetchWith(envWith(BAD_DAILY), "/v1/leases", { method: "POST", json: simLease() });
    expect(rent.status).toBe(503);
    expect(await rent.json()).toMatchObject({ code: "config_invalid" });
    const run = await fetchWith(envWith(BAD_DAILY), `/v1/schedules/${schedule.id}/run`, { method: "POST" });
    expect(run.status).toBe(503);
    expect(await run.json()).toMatchObject({ code: "config_invalid" });
    expect(await leaseCount()).toBe(before);
    await api(`/v1/schedules/${schedule.id}`, { method: "DELETE" });
  });

  it("the dispatcher starts no due schedule, and leaves its due run for when the settings are fixed", async () => {
    const created = await api("/v1/schedules", {
      method: "POST",
      json: { name: "d", cron: "0 10 * * *", lease: simLease() },
    });
    const schedule = (await created.json()) as Schedule;
    const due = Date.parse(schedule.next_run_at as string);
    clock.set(due + 1000);
    await fireCron(DISPATCHER, due, envWith(BAD_DAILY));
    expect(await leasesOfSchedule(schedule.id)).toEqual([]);
    const after = (await (await api(`/v1/schedules/${schedule.id}`)).json()) as Schedule;
    expect(after.next_run_at).toBe(schedule.next_run_at);
    // Fixed a minute later: the run due then still starts.
    await fireCron(DISPATCHER, due + 60_000, envWith({ BUDGET_DAILY_USD: "10" }));
    expect(await leasesOfSchedule(schedule.id)).toHaveLength(1);
    await api(`/v1/schedules/${schedule.id}`, { method: "DELETE" });
  });

  it("the dashboard's rent form is refused with config_invalid and rents nothing", async () => {
    const { cookie } = await signIn();
    const csrf = await csrfOf(cookie, "/rent");
    const review = await browse("/rent", {
      cookie,
      form: { _csrf: csrf, provider: "sim", gpu: "4090", template: "ollama", max_minutes: "40", max_cost: "" },
    });
    const hidden = Object.fromEntries(
      [...(await review.text()).matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)"/g)].map((m) => [
        m[1],
        m[2],
      ]),
    ) as Record<string, string>;
    expect(hidden.confirm).toBe("1");
    const before = await leaseCount();
    // The whole isolate (the dashboard and the API it calls in-process) sees the mistyped budget.
    overlayVars(BAD_DAILY);
    const rent = await browse("/rent", { cookie, form: hidden });
    // The dashboard shows an API's server error as a bad gateway, with the API's reason.
    expect(rent.status).toBe(502);
    const html = await rent.text();
    expect(html).toContain("config_invalid");
    expect(html).toContain("BUDGET_DAILY_USD");
    expect(await leaseCount()).toBe(before);
  });

  it("/health answers 503 config_invalid naming the malformed money setting", async () => {
    const health = await fetchWith(envWith(BAD_DAILY), "/health");
    expect(health.status).toBe(503);
    const body = (await health.json()) as { ok: boolean; code: string; error: string };
    expect(body).toMatchObject({ ok: false, code: "config_invalid" });
    expect(body.error).toContain("BUDGET_DAILY_USD");
    expect(body.error).not.toContain("ten");
  });
});
