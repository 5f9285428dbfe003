import { describe, expect, it } from "vitest";
import { budgetBreach } from "../../src/account/budget";
import { dayStart, monthStart, shareSince, summariseSpend } from "../../src/account/spend";
import type { LeaseRow } from "../../src/leases/ledger";
import { leaseRow } from "../support/lease-row";

const t = (text: string) => Date.parse(text);

const lease = (over: Partial<LeaseRow>): LeaseRow =>
  leaseRow({ id: "lse_x", status: "stopped", provider_ref: "p", ...over });

describe("budget periods", () => {
  it("are the UTC day and the UTC calendar month", () => {
    expect(new Date(dayStart(t("2031-03-15T23:59:00Z"))).toISOString()).toBe("2031-03-15T00:00:00.000Z");
    expect(new Date(monthStart(t("2031-03-15T23:59:00Z"))).toISOString()).toBe("2031-03-01T00:00:00.000Z");
  });

  it("split a lease that runs across midnight pro rata", () => {
    // 2 USD spent evenly from 23:00 to 01:00: half of it today.
    expect(shareSince(2, t("2031-03-14T23:00:00Z"), t("2031-03-15T01:00:00Z"), t("2031-03-15T00:00:00Z"))).toBe(1);
    expect(shareSince(2, t("2031-03-15T02:00:00Z"), t("2031-03-15T03:00:00Z"), t("2031-03-15T00:00:00Z"))).toBe(2);
    expect(shareSince(2, t("2031-03-14T02:00:00Z"), t("2031-03-14T03:00:00Z"), t("2031-03-15T00:00:00Z"))).toBe(0);
  });
});

describe("summariseSpend", () => {
  const now = t("2031-03-15T01:00:00Z");

  it("adds the database's totals, prorates straddling leases and counts an active lease's remaining worst case", () => {
    const straddling = lease({
      status: "stopped",
      cost: 2,
      rented_at: "2031-03-14T23:00:00.000Z",
      stopped_at: "2031-03-15T01:00:00.000Z",
    });
    // Running for 30 min at 1 USD/h (0.5 spent), may cost 3 USD in all.
    const running = lease({
      id: "lse_r",
      status: "running",
      rented_at: "2031-03-15T00:30:00.000Z",
      running_at: "2031-03-15T00:31:00.000Z",
      expected_cost: 3,
    });
    const spend = summariseSpend({ todayUsd: 0.25, monthUsd: 10 }, [straddling, running], now, 1.08);
    expect(spend.today).toBeCloseTo(0.25 + 1 + 0.5, 6);
    // The straddling lease began this month: already in the month total.
    expect(spend.month).toBeCloseTo(10 + 0.5, 6);
    expect(spend.committedToday).toBeCloseTo(spend.today + 2.5, 6);
    expect(spend.activeLeases.map((l) => l.id)).toEqual(["lse_r"]);
  });

  it("converts EUR with EUR_USD", () => {
    const eur = lease({
      status: "running",
      currency: "EUR",
      cost: 1,
      provider: "vramfarm",
      billing_starts_at: "running",
      rented_at: "2031-03-15T00:59:00.000Z",
      running_at: "2031-03-15T00:59:00.000Z",
      price_per_hour: 0,
    });
    expect(summariseSpend({ todayUsd: 0, monthUsd: 0 }, [eur], now, 1.08).today).toBeCloseTo(1.08, 6);
  });
});

describe("budgetBreach", () => {
  it("refuses strictly over the budget and stops at it", () => {
    const budget = { daily: 10, monthly: null };
    expect(budgetBreach(budget, { today: 10, month: 10 }, true)).toBeNull();
    expect(budgetBreach(budget, { today: 10.01, month: 10 }, true)).toMatchObject({ period: "daily" });
    expect(budgetBreach(budget, { today: 10, month: 10 }, false)).toMatchObject({ period: "daily" });
    expect(budgetBreach({ daily: null, monthly: null }, { today: 1e9, month: 1e9 }, false)).toBeNull();
  });
});
