import { beforeEach, describe, expect, it } from "vitest";
import type { Schedule } from "../../src/schedules/schema";
import { api, errorBody } from "../helpers";
import { clock, resetSim, simLease, useFakeClock } from "./support";

const START = Date.parse("2031-03-01T00:00:00Z");

async function create(body: Record<string, unknown>): Promise<Response> {
  return api("/v1/schedules", { method: "POST", json: { name: "nightly", lease: simLease(), ...body } });
}

async function createOk(body: Record<string, unknown>): Promise<Schedule> {
  const res = await create(body);
  if (res.status !== 201) throw new Error(`create: ${res.status} ${await res.text()}`);
  return (await res.json()) as Schedule;
}

beforeEach(async () => {
  useFakeClock(START);
  await resetSim();
});

describe("schedule CRUD", () => {
  it("creates a schedule with next_run_at in its time zone", async () => {
    const schedule = await createOk({ cron: "0 2 * * *", timezone: "Europe/Berlin" });
    expect(schedule).toMatchObject({
      name: "nightly",
      cron: "0 2 * * *",
      timezone: "Europe/Berlin",
      enabled: true,
      // 02:00 in Berlin in winter (CET, UTC+1)
      next_run_at: "2031-03-01T01:00:00.000Z",
      last_run_at: null,
      last_lease_id: null,
      last_skip: null,
    });
    expect(schedule.id).toMatch(/^sch_[0-9a-z]{22}$/);
    expect(schedule.lease).toMatchObject({ provider: "sim", max_minutes: 60, template: "custom" });
  });

  it("defaults to UTC", async () => {
    const schedule = await createOk({ cron: "30 4 * * *" });
    expect(schedule.timezone).toBe("UTC");
    expect(schedule.next_run_at).toBe("2031-03-01T04:30:00.000Z");
  });

  it("refuses an invalid cron expression with 400", async () => {
    for (const cron of ["61 * * * *", "* * * *", "0 0 * * * *", "every night", "0 0 30 2 *"]) {
      const res = await create({ cron });
      expect(res.status, cron).toBe(400);
      const body = await errorBody(res);
      expect(body.code).toBe("invalid_request");
      expect(body.issues?.map((i) => i.path)).toContain("cron");
    }
  });

  it("refuses an unknown time zone with 400", async () => {
    const res = await create({ cron: "0 2 * * *", timezone: "Mars/Olympus_Mons" });
    expect(res.status).toBe(400);
    expect((await errorBody(res)).issues?.map((i) => i.path)).toContain("timezone");
  });

  it("refuses a lease body POST /v1/leases would refuse", async () => {
    const res = await create({ cron: "0 2 * * *", lease: { provider: "sim" } });
    expect(res.status).toBe(400);
    expect((await errorBody(res)).issues?.map((i) => i.path)).toContain("lease.max_minutes");
  });

  it("lists, reads, patches and deletes", async () => {
    const schedule = await createOk({ cron: "0 2 * * *", name: "crud" });

    const list = (await (await api("/v1/schedules")).json()) as { schedules: Schedule[] };
    expect(list.schedules.map((s) => s.id)).toContain(schedule.id);

    const one = await api(`/v1/schedules/${schedule.id}`);
    expect(one.status).toBe(200);
    const read = (await one.json()) as Schedule;
    expect(read.id).toBe(schedule.id);
    // The sim's 4090 at 0.69 USD/h for 60 minutes, plus the 20 minutes it may bill while booting.
    expect(read.expected_cost).toMatchObject({ provider: "sim", amount_usd: 0.92 });

    const patched = await api(`/v1/schedules/${schedule.id}`, {
      method: "PATCH",
      json: { cron: "15 3 * * *", timezone: "America/New_York" },
    });
    expect(patched.status).toBe(200);
    // 03:15 in New York on 1 March (EST, UTC-5)
    expect(((await patched.json()) as Schedule).next_run_at).toBe("2031-03-01T08:15:00.000Z");

    const disabled = (await (
      await api(`/v1/schedules/${schedule.id}`, { method: "PATCH", json: { enabled: false } })
    ).json()) as Schedule;
    expect(disabled).toMatchObject({ enabled: false, next_run_at: null });
    const enabled = (await (
      await api(`/v1/schedules/${schedule.id}`, { method: "PATCH", json: { enabled: true } })
    ).json()) as Schedule;
    expect(enabled.next_run_at).toBe("2031-03-01T08:15:00.000Z");

    const badPatch = await api(`/v1/schedules/${schedule.id}`, { method: "PATCH", json: { timezone: "Nowhere/Land" } });
    expect(badPatch.status).toBe(400);

    const deleted = await api(`/v1/schedules/${schedule.id}`, { method: "DELETE" });
    expect(await deleted.json()).toEqual({ ok: true });
    expect((await api(`/v1/schedules/${schedule.id}`)).status).toBe(404);
    expect((await api(`/v1/schedules/${schedule.id}`, { method: "DELETE" })).status).toBe(404);
  });

  it("answers 404 for an id that is not a schedule id", async () => {
    expect((await api("/v1/schedules/nope")).status).toBe(404);
    expect((await api("/v1/schedules/nope/run", { method: "POST" })).status).toBe(404);
  });

  it("keeps next_run_at in the future as the clock moves", async () => {
    const schedule = await createOk({ cron: "*/15 * * * *" });
    expect(schedule.next_run_at).toBe("2031-03-01T00:15:00.000Z");
    clock.set(Date.parse("2031-03-01T00:20:00Z"));
    const patched = (await (
      await api(`/v1/schedules/${schedule.id}`, { method: "PATCH", json: { cron: "*/10 * * * *" } })
    ).json()) as Schedule;
    expect(patched.next_run_at).toBe("2031-03-01T00:30:00.000Z");
  });
});
