import { env } from "cloudflare:workers";
import { beforeEach, describe, expect, it } from "vitest";
import { enforceBudget } from "../../src/account/enforce";
import { loadConfig } from "../../src/config";
import type { Lease } from "../../src/leases/schema";
import { createServices } from "../../src/services";
import { api } from "../helpers";
import { clock, envWith, fireCron, resetSim, useFakeClock } from "../schedules/support";
import { emptyTables, WEBHOOK_TABLES } from "../support/fresh";

async function hookFor(events: string[]): Promise<void> {
  const res = await api("/v1/webhooks", { method: "POST", json: { url: "https://hooks.example.com/s", events } });
  expect(res.status).toBe(201);
}

async function outboxEvents(): Promise<{ type: string; lease_id: string | null; data: string | null }[]> {
  const { results } = await env.DB.prepare(
    "SELECT e.type, e.lease_id, e.data FROM webhook_events e JOIN webhook_deliveries d ON d.event_id = e.id",
  ).all<{ type: string; lease_id: string | null; data: string | null }>();
  return results;
}

beforeEach(async () => {
  useFakeClock(Date.parse("2031-06-01T00:00:00Z"));
  await resetSim();
  await emptyTables(WEBHOOK_TABLES);
});

describe("events from the dispatcher and the budget", () => {
  it("a schedule run skipped for lack of offers is announced as schedule.skipped", async () => {
    await hookFor(["schedule.skipped"]);
    const created = await api("/v1/schedules", {
      method: "POST",
      json: {
        name: "too-cheap",
        cron: "*/5 * * * *",
        lease: { provider: "sim", gpu: "4090", max_minutes: 1, max_price: 0.0001 },
      },
    });
    expect(created.status).toBe(201);
    const schedule = (await created.json()) as { id: string; next_run_at: string };
    clock.set(Date.parse(schedule.next_run_at) + 1000);
    await fireCron("* * * * *", clock.now);
    const [event, ...rest] = await outboxEvents();
    expect(rest).toHaveLength(0);
    expect(event?.type).toBe("schedule.skipped");
    expect(JSON.parse(event?.data ?? "{}")).toMatchObject({
      schedule: { id: schedule.id, name: "too-cheap" },
      due_at: schedule.next_run_at,
      detail: expect.stringMatching(/no offer/),
    });
  });

  it("reaching the budget is announced once as budget.exceeded while its leases are stopped", async () => {
    await hookFor(["budget.exceeded"]);
    const rent = await api("/v1/leases", { method: "POST", json: { provider: "sim", gpu: "4090", max_minutes: 60 } });
    expect(rent.status).toBe(202);
    const lease = (await rent.json()) as Lease;
    await env.DB.prepare("UPDATE leases SET cost = 5 WHERE id = ?").bind(lease.id).run();
    const withBudget = envWith({ BUDGET_DAILY_USD: "1" });
    const services = createServices(withBudget, loadConfig(withBudget), () => clock.now);
    expect((await enforceBudget(services)).stopped).toEqual([lease.id]);
    await enforceBudget(services); // the lease is stopping now: nothing more to announce
    const events = await outboxEvents();
    expect(events.map((e) => e.type)).toEqual(["budget.exceeded"]);
    expect(JSON.parse(events[0]?.data ?? "{}")).toMatchObject({
      budget: { period: "daily", budget_usd: 1 },
      stopping_leases: 1,
    });
  });
});
