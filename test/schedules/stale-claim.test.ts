import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Schedule, ScheduleRun } from "../../src/schedules/schema";
import { api } from "../helpers";
import { emptyTables, WEBHOOK_TABLES } from "../support/fresh";
import { clock, drainLeases, fireCron, leasesOfSchedule, resetSim, simLease, useFakeClock } from "./support";

const MINUTE = 60_000;
const at = (text: string) => Date.parse(text);
const DUE = "2031-03-01T02:00:00.000Z";

async function createSchedule(): Promise<Schedule> {
  const res = await api("/v1/schedules", {
    method: "POST",
    json: { name: "nightly", cron: "0 2 * * *", lease: simLease() },
  });
  if (res.status !== 201) throw new Error(`create: ${res.status} ${await res.text()}`);
  return (await res.json()) as Schedule;
}

async function runs(id: string): Promise<ScheduleRun[]> {
  return ((await (await api(`/v1/schedules/${id}/runs`)).json()) as { runs: ScheduleRun[] }).runs;
}

/**
 * What a dispatcher leaves when it dies right after its claim batch committed (the platform
 * ended the invocation, the isolate was evicted): the run `claimed`, next_run_at moved on.
 */
async function claimAndDie(scheduleId: string, claimedAt: number, attempts = 0): Promise<void> {
  const now = new Date(claimedAt).toISOString();
  await env.DB.batch([
    env.DB.prepare(
      `INSERT INTO schedule_runs (schedule_id, due_at, status, detail, attempts, created_at, updated_at)
       VALUES (?, ?, 'claimed', NULL, ?, ?, ?)`,
    ).bind(scheduleId, DUE, attempts, now, now),
    env.DB.prepare("UPDATE schedules SET next_run_at = ? WHERE id = ?").bind("2031-03-02T02:00:00.000Z", scheduleId),
  ]);
}

async function tick(time: number): Promise<void> {
  clock.set(time + 2_000);
  await fireCron("* * * * *", time);
}

async function tickEveryMinute(from: number, to: number): Promise<void> {
  for (let t = from; t <= to; t += MINUTE) await tick(t);
}

async function outboxTypes(): Promise<{ type: string; data: string | null }[]> {
  const { results } = await env.DB.prepare(
    "SELECT e.type, e.data FROM webhook_events e JOIN webhook_deliveries d ON d.event_id = e.id",
  ).all<{ type: string; data: string | null }>();
  return results;
}

beforeEach(async () => {
  useFakeClock(at("2031-03-01T00:00:00Z"));
  await resetSim();
  await emptyTables(WEBHOOK_TABLES);
  const list = (await (await api("/v1/schedules")).json()) as { schedules: Schedule[] };
  for (const s of list.schedules) await api(`/v1/schedules/${s.id}`, { method: "DELETE" });
});

afterEach(async () => {
  await drainLeases();
});

describe("a dispatcher that died after claiming a run", () => {
  it("leaves the claim alone while its claimer may still live, then retries it once", async () => {
    const schedule = await createSchedule();
    await claimAndDie(schedule.id, at(DUE) + 2_000);

    // A cron invocation may run for 15 minutes of wall time: until then the claimer may be alive.
    await tickEveryMinute(at("2031-03-01T02:01:00Z"), at("2031-03-01T02:14:00Z"));
    expect(await leasesOfSchedule(schedule.id)).toHaveLength(0);
    expect((await runs(schedule.id))[0]).toMatchObject({ status: "claimed" });

    await tickEveryMinute(at("2031-03-01T02:15:00Z"), at("2031-03-01T02:20:00Z"));
    const leases = await leasesOfSchedule(schedule.id);
    expect(leases).toHaveLength(1);
    expect((await runs(schedule.id))[0]).toMatchObject({ status: "started", lease_id: leases[0]!.id, attempts: 1 });
  });

  it("two dispatchers that find the stale claim at once rent one lease", async () => {
    const schedule = await createSchedule();
    await claimAndDie(schedule.id, at(DUE) + 2_000);
    const time = at("2031-03-01T02:16:00Z");
    clock.set(time + 2_000);
    await Promise.all([fireCron("* * * * *", time), fireCron("* * * * *", time)]);
    expect(await leasesOfSchedule(schedule.id)).toHaveLength(1);
    expect((await runs(schedule.id))[0]).toMatchObject({ status: "started", attempts: 1 });
  });

  it("a claimer that rented before it died: the retry finds its lease and rents no second one", async () => {
    const schedule = await createSchedule();
    await tick(at(DUE));
    const [lease] = await leasesOfSchedule(schedule.id);
    expect(lease).toBeDefined();
    // As if the run's closing write never landed.
    await env.DB.prepare(
      "UPDATE schedule_runs SET status = 'claimed', lease_id = NULL, attempts = 0 WHERE schedule_id = ? AND due_at = ?",
    )
      .bind(schedule.id, DUE)
      .run();
    await tickEveryMinute(at("2031-03-01T02:15:00Z"), at("2031-03-01T02:20:00Z"));
    expect(await leasesOfSchedule(schedule.id)).toHaveLength(1);
    expect((await runs(schedule.id))[0]).toMatchObject({ status: "started", lease_id: lease!.id });
  });

  it("a stale claim past the retry window is recorded failed and announced as schedule.failed", async () => {
    const res = await api("/v1/webhooks", {
      method: "POST",
      json: { url: "https://hooks.example.com/s", events: ["schedule.failed"] },
    });
    expect(res.status).toBe(201);
    const schedule = await createSchedule();
    // A retry claimed 25 minutes after the due time, then its dispatcher died.
    await claimAndDie(schedule.id, at("2031-03-01T02:25:00Z"), 1);
    await tickEveryMinute(at("2031-03-01T02:26:00Z"), at("2031-03-01T02:45:00Z"));

    expect(await leasesOfSchedule(schedule.id)).toHaveLength(0);
    const [run] = await runs(schedule.id);
    expect(run).toMatchObject({ status: "failed" });
    expect(run!.detail).toMatch(/dispatcher.*did not finish/);
    const events = await outboxTypes();
    expect(events.map((e) => e.type)).toEqual(["schedule.failed"]);
    expect(JSON.parse(events[0]!.data ?? "{}")).toMatchObject({ schedule: { id: schedule.id }, due_at: DUE });
  });
});
