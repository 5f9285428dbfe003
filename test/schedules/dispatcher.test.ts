import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Lease } from "../../src/leases/schema";
import type { Schedule, ScheduleRun } from "../../src/schedules/schema";
import { api } from "../helpers";
import { clock, drainLeases, fireCron, leasesOfSchedule, resetSim, sim, simLease, useFakeClock } from "./support";

const DISPATCHER = "* * * * *";
const MINUTE = 60_000;
const at = (text: string) => Date.parse(text);

async function createSchedule(body: Record<string, unknown>): Promise<Schedule> {
  const res = await api("/v1/schedules", { method: "POST", json: { name: "nightly", lease: simLease(), ...body } });
  if (res.status !== 201) throw new Error(`create: ${res.status} ${await res.text()}`);
  return (await res.json()) as Schedule;
}

async function getSchedule(id: string): Promise<Schedule> {
  return (await (await api(`/v1/schedules/${id}`)).json()) as Schedule;
}

async function runs(id: string): Promise<ScheduleRun[]> {
  return ((await (await api(`/v1/schedules/${id}/runs`)).json()) as { runs: ScheduleRun[] }).runs;
}

/** The dispatcher cron at `time`, with the clock there too (a few seconds late, as in life). */
async function tick(time: number): Promise<void> {
  clock.set(time + 2_000);
  await fireCron(DISPATCHER, time);
}

/** Every minute from `from` to `to` inclusive. */
async function tickEveryMinute(from: number, to: number): Promise<void> {
  for (let t = from; t <= to; t += MINUTE) await tick(t);
}

beforeEach(async () => {
  useFakeClock(at("2031-03-01T00:00:00Z"));
  await resetSim();
  // Storage is shared by the tests of a file: no schedule of an earlier test may fire here.
  const list = (await (await api("/v1/schedules")).json()) as { schedules: Schedule[] };
  for (const s of list.schedules) await api(`/v1/schedules/${s.id}`, { method: "DELETE" });
});

afterEach(async () => {
  await drainLeases();
});

describe("exactly one lease per schedule and due time", () => {
  it("starts one lease when the cron fires twice for the same minute", async () => {
    const schedule = await createSchedule({ cron: "0 2 * * *" });
    const due = at("2031-03-01T02:00:00Z");
    expect(schedule.next_run_at).toBe(new Date(due).toISOString());

    await tick(due);
    await tick(due);

    const leases = await leasesOfSchedule(schedule.id);
    expect(leases).toHaveLength(1);
    expect(leases[0]).toMatchObject({
      status: "provisioning",
      provider: "sim",
      schedule_id: schedule.id,
      name: "nightly",
    });
    // The expected cost is recorded with the lease: 0.69 USD/h × (20 min boot allowance + 60 min).
    expect(leases[0]!.expected_cost).toBeCloseTo(0.92, 6);
    const after = await getSchedule(schedule.id);
    expect(after).toMatchObject({
      last_lease_id: leases[0]!.id,
      next_run_at: "2031-03-02T02:00:00.000Z",
      last_skip: null,
    });
    expect(after.last_run_at).not.toBeNull();
    expect(await runs(schedule.id)).toMatchObject([
      { due_at: "2031-03-01T02:00:00.000Z", status: "started", lease_id: leases[0]!.id, attempts: 1 },
    ]);
  });

  it("starts one lease when two dispatcher invocations overlap", async () => {
    const schedule = await createSchedule({ cron: "0 2 * * *" });
    const due = at("2031-03-01T02:00:00Z");
    clock.set(due + 1_000);
    await Promise.all([fireCron(DISPATCHER, due), fireCron(DISPATCHER, due), fireCron(DISPATCHER, due)]);
    expect(await leasesOfSchedule(schedule.id)).toHaveLength(1);
    expect(await runs(schedule.id)).toHaveLength(1);
  });

  it("does nothing before the due time and nothing for a disabled schedule", async () => {
    const schedule = await createSchedule({ cron: "0 2 * * *" });
    const disabled = await createSchedule({ cron: "0 2 * * *", enabled: false });
    await tick(at("2031-03-01T01:59:00Z"));
    expect(await leasesOfSchedule(schedule.id)).toHaveLength(0);
    await tick(at("2031-03-01T02:00:00Z"));
    expect(await leasesOfSchedule(schedule.id)).toHaveLength(1);
    expect(await leasesOfSchedule(disabled.id)).toHaveLength(0);
  });
});

describe("daylight saving in Europe/Berlin", () => {
  it("runs the 02:30 that does not exist (last Sunday of March) once, at 03:00 CEST", async () => {
    clock.set(at("2031-03-29T12:00:00Z"));
    const schedule = await createSchedule({ cron: "30 2 * * *", timezone: "Europe/Berlin" });
    // Clocks jump from 02:00 CET to 03:00 CEST: croner runs a fixed-time job at the first
    // minute after the gap, 03:00 CEST = 01:00 UTC.
    expect(schedule.next_run_at).toBe("2031-03-30T01:00:00.000Z");

    await tickEveryMinute(at("2031-03-30T00:25:00Z"), at("2031-03-30T01:35:00Z"));

    const leases = await leasesOfSchedule(schedule.id);
    expect(leases).toHaveLength(1);
    expect((await runs(schedule.id)).map((r) => [r.due_at, r.status])).toEqual([
      ["2031-03-30T01:00:00.000Z", "started"],
    ]);
    // The next day 02:30 exists again, in summer time.
    expect((await getSchedule(schedule.id)).next_run_at).toBe("2031-03-31T00:30:00.000Z");
  });

  it("runs the 02:30 that happens twice (last Sunday of October) once, at its first occurrence", async () => {
    clock.set(at("2031-10-25T12:00:00Z"));
    const schedule = await createSchedule({ cron: "30 2 * * *", timezone: "Europe/Berlin" });
    // 02:30 CEST (00:30 UTC) and, an hour later, 02:30 CET (01:30 UTC): croner takes the first.
    expect(schedule.next_run_at).toBe("2031-10-26T00:30:00.000Z");

    await tickEveryMinute(at("2031-10-26T00:25:00Z"), at("2031-10-26T01:35:00Z"));

    expect(await leasesOfSchedule(schedule.id)).toHaveLength(1);
    expect((await runs(schedule.id)).map((r) => [r.due_at, r.status])).toEqual([
      ["2031-10-26T00:30:00.000Z", "started"],
    ]);
    // Monday 02:30 CET.
    expect((await getSchedule(schedule.id)).next_run_at).toBe("2031-10-27T01:30:00.000Z");
  });
});

describe("missed runs and the catch-up window", () => {
  it("starts a run missed by 20 minutes (inside the 30-minute window)", async () => {
    const schedule = await createSchedule({ cron: "0 2 * * *" });
    await tick(at("2031-03-01T02:20:00Z"));
    const leases = await leasesOfSchedule(schedule.id);
    expect(leases).toHaveLength(1);
    expect(await runs(schedule.id)).toMatchObject([{ due_at: "2031-03-01T02:00:00.000Z", status: "started" }]);
    expect((await getSchedule(schedule.id)).next_run_at).toBe("2031-03-02T02:00:00.000Z");
  });

  it("skips a run missed by 45 minutes, visibly, and waits for the next one", async () => {
    const schedule = await createSchedule({ cron: "0 2 * * *" });
    await tick(at("2031-03-01T02:45:00Z"));
    expect(await leasesOfSchedule(schedule.id)).toHaveLength(0);
    const after = await getSchedule(schedule.id);
    expect(after.next_run_at).toBe("2031-03-02T02:00:00.000Z");
    expect(after.last_skip).toMatchObject({ due_at: "2031-03-01T02:00:00.000Z", status: "skipped" });
    expect(after.last_skip?.detail).toMatch(/catch-up window/);
    // Firing again for the same minute changes nothing.
    await tick(at("2031-03-01T02:45:00Z"));
    expect(await runs(schedule.id)).toHaveLength(1);
  });

  it("after a long outage starts only the newest due run and records the older one as skipped", async () => {
    const schedule = await createSchedule({ cron: "*/10 * * * *" });
    expect(schedule.next_run_at).toBe("2031-03-01T00:10:00.000Z");
    await tick(at("2031-03-01T01:25:00Z"));
    const leases = await leasesOfSchedule(schedule.id);
    expect(leases).toHaveLength(1);
    const history = await runs(schedule.id);
    expect(history.map((r) => [r.due_at, r.status])).toEqual([
      ["2031-03-01T01:20:00.000Z", "started"],
      ["2031-03-01T00:10:00.000Z", "skipped"],
    ]);
    expect((await getSchedule(schedule.id)).next_run_at).toBe("2031-03-01T01:30:00.000Z");
  });
});

describe("runs that cannot start", () => {
  it("skips a run while the previous lease is still active, with an event on that lease", async () => {
    const schedule = await createSchedule({ cron: "*/10 * * * *" });
    await tick(at("2031-03-01T00:10:00Z"));
    await tick(at("2031-03-01T00:20:00Z"));
    const leases = await leasesOfSchedule(schedule.id);
    expect(leases).toHaveLength(1);
    const after = await getSchedule(schedule.id);
    expect(after.last_skip).toMatchObject({ due_at: "2031-03-01T00:20:00.000Z", status: "skipped" });
    expect(after.last_skip?.detail).toContain(leases[0]!.id);
    const events = ((await (await api(`/v1/leases/${leases[0]!.id}/events`)).json()) as { events: { kind: string }[] })
      .events;
    expect(events.map((e) => e.kind)).toContain("schedule_run_skipped");
  });

  it("skips a run when no offer is under the schedule's max_price", async () => {
    const schedule = await createSchedule({ cron: "0 2 * * *", lease: simLease({ max_price: 0.1 }) });
    await tick(at("2031-03-01T02:00:00Z"));
    expect(await leasesOfSchedule(schedule.id)).toHaveLength(0);
    const after = await getSchedule(schedule.id);
    expect(after.last_skip?.detail).toMatch(/no offer .*max_price 0.1/);
    expect(after.expected_cost).toBeNull();
  });

  it("retries a run refused for lack of capacity on later ticks, then starts it", async () => {
    const schedule = await createSchedule({ cron: "0 2 * * *" });
    await sim().configure({ faults: { no_capacity: true } });
    await tick(at("2031-03-01T02:00:00Z"));
    expect((await runs(schedule.id))[0]).toMatchObject({ status: "retrying", attempts: 1 });
    expect((await getSchedule(schedule.id)).last_skip).toMatchObject({ status: "retrying" });
    // Not yet: retries are spaced (each failed attempt leaves a rent_failed lease).
    await tick(at("2031-03-01T02:02:00Z"));
    expect((await runs(schedule.id))[0]).toMatchObject({ status: "retrying", attempts: 1 });

    await sim().configure({ faults: { no_capacity: false } });
    await tick(at("2031-03-01T02:05:00Z"));
    const started = (await runs(schedule.id))[0]!;
    expect(started).toMatchObject({ status: "started", attempts: 2 });
    const leases = await leasesOfSchedule(schedule.id);
    const live = leases.filter((l) => l.status !== "stopped");
    expect(live).toHaveLength(1);
    expect(live[0]!.id).toBe(started.lease_id);
    expect(leases.filter((l) => l.stop_reason === "rent_failed")).toHaveLength(1);
  });

  it("gives up after the 30-minute retry window", async () => {
    const schedule = await createSchedule({ cron: "0 2 * * *" });
    await sim().configure({ faults: { no_capacity: true } });
    await tickEveryMinute(at("2031-03-01T02:00:00Z"), at("2031-03-01T02:40:00Z"));
    const [run] = await runs(schedule.id);
    expect(run).toMatchObject({ status: "skipped" });
    expect(run!.detail).toMatch(/gave up/);
    expect(run!.attempts).toBeLessThanOrEqual(7);
    expect((await leasesOfSchedule(schedule.id)).every((l: Lease) => l.status === "stopped")).toBe(true);
    await sim().configure({ faults: { no_capacity: false } });
  });
});

describe("run now", () => {
  it("starts one lease at once and records it as the schedule's last run", async () => {
    const schedule = await createSchedule({ cron: "0 2 * * *" });
    const res = await api(`/v1/schedules/${schedule.id}/run`, {
      method: "POST",
      headers: { "Idempotency-Key": "run-now-1" },
    });
    expect(res.status).toBe(202);
    const lease = (await res.json()) as Lease;
    expect(lease).toMatchObject({ schedule_id: schedule.id, status: "provisioning", provider: "sim" });
    const again = await api(`/v1/schedules/${schedule.id}/run`, {
      method: "POST",
      headers: { "Idempotency-Key": "run-now-1" },
    });
    expect(again.status).toBe(200);
    expect(((await again.json()) as Lease).id).toBe(lease.id);
    expect((await getSchedule(schedule.id)).last_lease_id).toBe(lease.id);
    expect(await leasesOfSchedule(schedule.id)).toHaveLength(1);
  });
});
