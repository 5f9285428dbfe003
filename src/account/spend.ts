import { type LeaseRow, LeaseRowSchema } from "../leases/ledger";
import { timeCost, toUsd } from "../leases/pricing";
import { iso, ms } from "../lib/time";

/** Budget periods are UTC days and UTC calendar months. */
export function dayStart(now: number): number {
  const d = new Date(now);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
}

export function monthStart(now: number): number {
  const d = new Date(now);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}

/**
 * What a lease has cost so far in USD, its other machines included: for an active lease the
 * keeper's figure or price × time if that is ahead; once stopping, the keeper's figure, which it
 * keeps running until the teardown verifies (so spend never goes down when the lease stops).
 */
export function spentUsd(lease: LeaseRow, now: number, eurUsd: number): number {
  const live = lease.status === "provisioning" || lease.status === "running" ? timeCost(lease, now) : 0;
  return toUsd(Math.max(lease.cost, live) + (lease.strays_cost ?? 0), lease.currency, eurUsd);
}

/** The most a lease can cost in USD: its expected cost at rental, or what it already cost. */
export function worstCaseUsd(lease: LeaseRow, now: number, eurUsd: number): number {
  const spent = spentUsd(lease, now, eurUsd);
  if (lease.status === "stopped") return spent;
  return Math.max(spent, lease.expected_cost ?? 0);
}

/**
 * The part of `amount`, spent evenly over [from, to], that falls in [windowStart, ∞). A lease
 * running over midnight counts partly to each day. Zero-length spans count where they are.
 */
export function shareSince(amount: number, from: number, to: number, windowStart: number): number {
  if (to <= windowStart) return to === windowStart && from === to ? amount : 0;
  if (from >= windowStart) return amount;
  return (amount * (to - windowStart)) / (to - from);
}

function span(lease: LeaseRow, now: number): [number, number] {
  const from = ms(lease.rented_at ?? lease.running_at ?? lease.created_at);
  const to = lease.stopped_at ? ms(lease.stopped_at) : Math.max(now, from);
  return [from, Math.max(from, to)];
}

export interface Spend {
  /** actually spent, USD */
  today: number;
  month: number;
  /** spent plus what active leases may still cost at most, USD */
  committedToday: number;
  committedMonth: number;
  activeLeases: LeaseRow[];
}

/** Sums of stopped leases that began inside the period (no proration needed), USD. */
export interface StoppedTotals {
  todayUsd: number;
  monthUsd: number;
}

/**
 * Spend of the current UTC day and month: the stopped leases that began inside a period come
 * summed by the database; `leases` are the rest (active ones, and stopped ones that straddle
 * the start of the day or month), prorated here.
 */
export function summariseSpend(totals: StoppedTotals, leases: readonly LeaseRow[], now: number, eurUsd: number): Spend {
  const day = dayStart(now);
  const month = monthStart(now);
  const spend: Spend = {
    today: totals.todayUsd,
    month: totals.monthUsd,
    committedToday: 0,
    committedMonth: 0,
    activeLeases: [],
  };
  let remaining = 0;
  for (const lease of leases) {
    const [from, to] = span(lease, now);
    const spent = spentUsd(lease, now, eurUsd);
    if (lease.status !== "stopped") {
      spend.activeLeases.push(lease);
      // What an active lease may still add lands in the future: inside both current periods.
      remaining += Math.max(0, worstCaseUsd(lease, now, eurUsd) - spent);
    }
    // A stopped lease that began inside the month is already in the database's month total.
    const inMonthTotal = lease.status === "stopped" && from >= month;
    const inDayTotal = lease.status === "stopped" && from >= day;
    if (!inDayTotal) spend.today += shareSince(spent, from, to, day);
    if (!inMonthTotal) spend.month += shareSince(spent, from, to, month);
  }
  spend.committedToday = spend.today + remaining;
  spend.committedMonth = spend.month + remaining;
  return spend;
}

const BILLED_FROM = "COALESCE(rented_at, running_at, created_at)";

/**
 * Reads what summariseSpend needs in one round trip (a batch of two queries). With `upToLeaseId`,
 * only leases written no later than that one count (rowid order is insert order): a rental's
 * budget check then sees exactly the leases inserted before it, which makes check and insert one
 * atomic step (see assertRentalWithinBudget).
 */
export async function loadSpend(db: D1Database, now: number, eurUsd: number, upToLeaseId?: string): Promise<Spend> {
  const day = iso(dayStart(now));
  const month = iso(monthStart(now));
  const upTo = upToLeaseId ? " AND rowid <= (SELECT rowid FROM leases WHERE id = ?4)" : "";
  const [totals, rows] = await db.batch([
    db
      .prepare(
        `SELECT
           COALESCE(SUM(CASE WHEN currency = 'EUR' THEN (cost + strays_cost) * ?1 ELSE cost + strays_cost END), 0) AS month_usd,
           COALESCE(SUM(CASE WHEN ${BILLED_FROM} >= ?3 THEN (CASE WHEN currency = 'EUR' THEN (cost + strays_cost) * ?1 ELSE cost + strays_cost END) ELSE 0 END), 0) AS today_usd
         FROM leases WHERE status = 'stopped' AND ${BILLED_FROM} >= ?2${upTo}`,
      )
      .bind(eurUsd, month, day, ...(upToLeaseId ? [upToLeaseId] : [])),
    db
      .prepare(
        `SELECT * FROM leases WHERE (status != 'stopped'
           OR (${BILLED_FROM} < ?1 AND stopped_at > ?1)
           OR (${BILLED_FROM} < ?2 AND stopped_at > ?2))${upTo.replace("?4", "?3")}`,
      )
      .bind(day, month, ...(upToLeaseId ? [upToLeaseId] : [])),
  ]);
  const sums = (totals?.results[0] ?? {}) as { month_usd?: number; today_usd?: number };
  const leases = (rows?.results ?? []).map((row) => LeaseRowSchema.parse(row));
  return summariseSpend({ todayUsd: sums.today_usd ?? 0, monthUsd: sums.month_usd ?? 0 }, leases, now, eurUsd);
}

export const roundUsd = (amount: number): number => Math.round(amount * 100) / 100;
