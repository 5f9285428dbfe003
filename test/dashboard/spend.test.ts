import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import worker from "../../src/index";
import type { Lease } from "../../src/leases/schema";
import { api } from "../helpers";
import { clock, drainLeases, driveUntil, envWith, resetSim, simLease, useFakeClock } from "../schedules/support";
import { ORIGIN, signIn } from "./support";

// The Spend page: the last 30 days as a stacked SVG chart with the daily budget, and a table of the same figures.

const HOUR = 3_600_000;
let start = Date.parse("2034-01-10T10:00:00Z");

beforeEach(async () => {
  start += 60 * 24 * HOUR;
  useFakeClock(start);
  await resetSim();
});
afterEach(() => drainLeases());

async function page(cookie: string, vars: Partial<Record<keyof Env, string>> = {}): Promise<string> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(
    new Request(`${ORIGIN}/account`, { headers: { Cookie: `gpulease_session=${cookie}` } }) as Request<
      unknown,
      IncomingRequestCfProperties
    >,
    envWith(vars),
    ctx,
  );
  await waitOnExecutionContext(ctx);
  expect(res.status).toBe(200);
  return res.text();
}

describe("the Spend page", () => {
  it("says there was no spend when nothing was rented in 30 days", async () => {
    const { cookie } = await signIn();
    const html = await page(cookie);
    expect(html).toContain("No spend in the last 30 days.");
    expect(html).not.toContain('role="img"');
    // The table still lists every day.
    expect(html.match(/<th scope="row">\d{4}-\d\d-\d\d<\/th>/g)).toHaveLength(30);
  });

  it("draws the days' spend stacked by provider with the budget line, and tables the same figures", async () => {
    const rented = await api("/v1/leases", { method: "POST", json: simLease({ max_minutes: 600 }) });
    const lease = (await rented.json()) as Lease;
    await driveUntil(lease.id, "running");
    clock.set(clock.now + 2 * HOUR);
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    const stopped = await driveUntil(lease.id, "stopped");

    const { cookie } = await signIn();
    const html = await page(cookie, { BUDGET_DAILY_USD: "5" });
    expect(html).toMatch(/<svg[^>]*role="img"[^>]*aria-labelledby="spend-chart-title spend-chart-desc"/);
    expect(html).toContain('<title id="spend-chart-title">Spend per day, last 30 days</title>');
    expect(html).toMatch(/<desc id="spend-chart-desc">[^<]*Daily budget \$5\.00/);
    expect(html.match(/<rect [^>]*data-series="sim"/g)).toHaveLength(1);
    expect(html).toContain('class="chart-line" data-value="5"');
    const today = new Date(clock.now).toISOString().slice(0, 10);
    const cost = `$${stopped.cost.toFixed(2)}`;
    expect(html).toMatch(new RegExp(`<th scope="row">${today}</th><td class="r">\\${cost}</td>`));
    expect(html).toContain("Ledger and bills, 30 days");
    expect(html).not.toContain("style=");
  });
});
