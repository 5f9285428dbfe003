import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { api } from "../helpers";
import { clock, drainLeases, driveUntil, resetSim, simLease, useFakeClock } from "./support";

// GET /v1/schedules/{id}/runs: each started run carries its lease's status, cost and billed minutes.

interface Run {
  status: string;
  lease_id: string | null;
  lease: { status: string; error: string | null; cost_usd: number; minutes: number } | null;
}

beforeEach(async () => {
  useFakeClock(Date.parse("2035-06-01T09:00:00Z"));
  await resetSim();
});
afterEach(() => drainLeases());

async function runs(id: string, query = ""): Promise<Run[]> {
  const res = await api(`/v1/schedules/${id}/runs${query}`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { runs: Run[] }).runs;
}

describe("a schedule's runs with their leases", () => {
  it("shows what each run's lease cost and how many minutes it ran, live while it runs", async () => {
    const made = await api("/v1/schedules", {
      method: "POST",
      json: { name: "costed", cron: "0 2 * * *", timezone: "UTC", lease: simLease({ max_minutes: 120 }) },
    });
    expect(made.status).toBe(201);
    const schedule = (await made.json()) as { id: string };

    const first = (await (await api(`/v1/schedules/${schedule.id}/run`, { method: "POST" })).json()) as Lease;
    await driveUntil(first.id, "running");
    clock.advance(30 * 60);
    await api(`/v1/leases/${first.id}/stop`, { method: "POST" });
    const stopped = await driveUntil(first.id, "stopped");

    clock.advance(60);
    const second = (await (await api(`/v1/schedules/${schedule.id}/run`, { method: "POST" })).json()) as Lease;
    await driveUntil(second.id, "running");
    clock.advance(10 * 60);

    const [newest, oldest] = await runs(schedule.id);
    expect(oldest).toMatchObject({ status: "started", lease_id: first.id });
    expect(oldest!.lease).toMatchObject({ status: "stopped", error: null });
    expect(oldest!.lease!.cost_usd).toBeCloseTo(stopped.cost, 4);
    // 30 minutes running plus the sim's few seconds of boot.
    expect(oldest!.lease!.minutes).toBeGreaterThanOrEqual(30);
    expect(oldest!.lease!.minutes).toBeLessThan(32);

    expect(newest).toMatchObject({ status: "started", lease_id: second.id, lease: { status: "running" } });
    expect(newest!.lease!.minutes).toBeGreaterThanOrEqual(10);
    // 0.69 USD/h for about ten minutes, counted up to now.
    expect(newest!.lease!.cost_usd).toBeGreaterThan(0.1);
    expect(newest!.lease!.cost_usd).toBeLessThan(0.14);

    expect(await runs(schedule.id, "?limit=1")).toHaveLength(1);
  });
});
