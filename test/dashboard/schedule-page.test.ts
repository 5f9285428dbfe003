import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { api } from "../helpers";
import { clock, drainLeases, driveUntil, resetSim, simLease, useFakeClock } from "../schedules/support";
import { browse, signIn } from "./support";

// A schedule's page: its recent runs as a small chart (cost per run by outcome) and a table.

beforeEach(async () => {
  useFakeClock(Date.parse("2035-09-01T09:00:00Z"));
  await resetSim();
});
afterEach(() => drainLeases());

async function schedule(): Promise<string> {
  const made = await api("/v1/schedules", {
    method: "POST",
    json: { name: "page-nightly", cron: "0 2 * * *", timezone: "UTC", lease: simLease({ max_minutes: 120 }) },
  });
  expect(made.status).toBe(201);
  return ((await made.json()) as { id: string }).id;
}

describe("the schedule page", () => {
  it("charts and tables the recent runs with their cost, minutes and outcome", async () => {
    const id = await schedule();
    const first = (await (await api(`/v1/schedules/${id}/run`, { method: "POST" })).json()) as Lease;
    await driveUntil(first.id, "running");
    clock.advance(45 * 60);
    await api(`/v1/leases/${first.id}/stop`, { method: "POST" });
    const stopped = await driveUntil(first.id, "stopped");
    clock.advance(60);
    const second = (await (await api(`/v1/schedules/${id}/run`, { method: "POST" })).json()) as Lease;
    await driveUntil(second.id, "running");

    const { cookie } = await signIn();
    const list = await (await browse("/schedules", { cookie })).text();
    expect(list).toContain(`href="/schedules/${id}"`);
    const res = await browse(`/schedules/${id}`, { cookie });
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toContain("<h1>page-nightly</h1>");
    expect(html).toMatch(/<svg[^>]*role="img"[^>]*aria-labelledby="runs-chart-title runs-chart-desc"/);
    expect(html.match(/<rect [^>]*data-series="done"/g)).toHaveLength(1);
    expect(html.match(/<rect [^>]*data-series="running"/g)).toHaveLength(1);
    expect(html).toContain(`<a href="/leases/${first.id}">`);
    expect(html).toContain(`<a href="/leases/${second.id}">`);
    const row = new RegExp(
      `${first.id}</a></td><td data-label="Minutes" class="r">(4[5-7]\\.\\d)</td><td data-label="Cost" class="r">\\$${stopped.cost.toFixed(2)}<`,
    );
    expect(html).toMatch(row);
  });

  it("says there are no runs yet, and an unknown schedule is the API's 404", async () => {
    const id = await schedule();
    const { cookie } = await signIn();
    const html = await (await browse(`/schedules/${id}`, { cookie })).text();
    expect(html).toContain("No runs yet");
    expect(html).not.toContain("<svg");
    const missing = await browse("/schedules/sch_00000000000000000000000000", { cookie });
    expect(missing.status).toBe(404);
  });
});
