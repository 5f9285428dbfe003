/**
 * The one pricing module: what a lease may cost at most (the budget's reservation), which
 * minutes are billed, and what it has cost so far. Used by the rent path, the keeper, spend,
 * the dashboard and schedules, so a worst case or a cost is computed the same way everywhere.
 */
import { ms } from "../lib/time";
import type { Provider } from "../providers/types";
import type { LeaseRow } from "./ledger";

const HOUR_MS = 3_600_000;

/** The lease fields billing depends on. */
export type BilledLease = Pick<
  LeaseRow,
  | "billing_starts_at"
  | "price_per_hour"
  | "currency"
  | "spec"
  | "created_at"
  | "rented_at"
  | "running_at"
  | "max_minutes"
  | "max_cost"
>;

/** Amount in USD: VRAMfarm bills in EUR, converted with EUR_USD. */
export function toUsd(amount: number, currency: LeaseRow["currency"], eurUsd: number): number {
  return currency === "EUR" ? amount * eurUsd : amount;
}

/**
 * When the provider starts billing, as its adapter said at rent time (Provider.billingStartsAt):
 * "accepted" bills from the accepted rental (image pull included), "running" only once the
 * machine runs. A row without it (adopted orphans) counts from the rental: the larger cost.
 */
export function billedFrom(lease: BilledLease): number | null {
  if (lease.billing_starts_at === "running") return lease.running_at ? ms(lease.running_at) : null;
  const from = lease.rented_at ?? null;
  return from ? ms(from) : null;
}

function minBilledMs(lease: BilledLease): number {
  return (lease.spec.min_billed_minutes ?? 0) * 60_000;
}

/** Compute cost (no traffic) from the billing start until `until`, in the lease's currency. */
export function timeCost(lease: BilledLease, until: number): number {
  const from = billedFrom(lease);
  if (from === null || !lease.price_per_hour) return 0;
  const billedMs = Math.max(until - from, minBilledMs(lease));
  return roundMoney((lease.price_per_hour * Math.max(0, billedMs)) / HOUR_MS);
}

/** The moment the time cap is reached: `max_minutes` after `running_at`. */
export function timeCapAt(lease: BilledLease): number | null {
  return lease.running_at ? ms(lease.running_at) + lease.max_minutes * 60_000 : null;
}

/**
 * The moment the billed cost (time at the lease's price, plus `trafficCost` so far) reaches
 * `max_cost`; null without a cost cap, a price, or a billing start.
 */
export function costCapAt(lease: BilledLease, trafficCost: number, eurUsd: number): number | null {
  const from = billedFrom(lease);
  if (lease.max_cost === null || from === null || !lease.price_per_hour) return null;
  const priceUsd = toUsd(lease.price_per_hour, lease.currency, eurUsd);
  const leftUsd = lease.max_cost - toUsd(trafficCost, lease.currency, eurUsd);
  const hoursToCap = Math.max(0, leftUsd) / priceUsd;
  const capMs = Math.ceil(hoursToCap * HOUR_MS);
  // Inside a minimum billing period the cost is already that period's price: reached at once.
  if (capMs <= minBilledMs(lease)) return from;
  return from + capMs;
}

export function roundMoney(amount: number): number {
  return Math.round(amount * 1e6) / 1e6;
}

/** How an offer's provider bills, for the worst case (from the Provider port). */
export interface WorstCaseBilling {
  startsAt: Provider["billingStartsAt"];
  minimumMinutes: number;
  startTimeoutMin: number;
  /** a model lease: the weights' estimated load time at this offer, which its start deadline adds */
  downloadMin?: number;
}

/**
 * The minutes the worst case bills: boot time (and a model lease's download allowance, by which
 * its start deadline grows) included where billing starts at the accepted rental; the download
 * on top of max_minutes where billing starts once the machine runs (the pull runs on it).
 */
export function worstCaseMinutes(billing: WorstCaseBilling, maxMinutes: number): number {
  const download = billing.downloadMin ?? 0;
  return billing.startsAt === "accepted"
    ? billing.startTimeoutMin + download + maxMinutes
    : Math.max(maxMinutes + download, billing.minimumMinutes);
}

/**
 * USD a lease can cost at most at this price: price × (START_TIMEOUT_MIN + download + max_minutes) where
 * the provider bills while the machine boots, price × max(max_minutes, minimum) where it bills
 * from running; `max_cost` when that is smaller.
 */
export function worstCaseUsd(
  offer: { price_per_hour_usd: number },
  input: { max_minutes: number; max_cost?: number | null | undefined },
  billing: WorstCaseBilling,
): number {
  const byTime = (offer.price_per_hour_usd * worstCaseMinutes(billing, input.max_minutes)) / 60;
  return Math.round(Math.min(byTime, input.max_cost ?? Number.POSITIVE_INFINITY) * 1e6) / 1e6;
}

/**
 * The budget reservation of a rented lease at `pricePerHour` (its currency): recomputed when the
 * provider's own price becomes known (the create answer, a `price_updated` read).
 */
export function reservationUsd(
  lease: Pick<LeaseRow, "billing_starts_at" | "currency" | "spec" | "max_minutes" | "max_cost">,
  pricePerHour: number,
  startTimeoutMin: number,
  eurUsd: number,
): number {
  return worstCaseUsd({ price_per_hour_usd: toUsd(pricePerHour, lease.currency, eurUsd) }, lease, {
    startsAt: lease.billing_starts_at ?? "accepted",
    minimumMinutes: lease.spec.min_billed_minutes ?? 0,
    startTimeoutMin,
    downloadMin: (lease.spec.download_s ?? 0) / 60,
  });
}

/** The largest amount a provider's per-machine figure is believed at: anything else is dropped. */
const MAX_REPORTED_AMOUNT = 1_000_000;

/** A provider's reported amount when it is a plausible one (finite, not negative, bounded), else 0. */
const plausible = (amount: number | null | undefined): number =>
  typeof amount === "number" && Number.isFinite(amount) && amount >= 0 && amount < MAX_REPORTED_AMOUNT ? amount : 0;

/**
 * What one machine is billed on the ledger: the larger of its own time × price and what the
 * provider reports it billed for that machine (VRAMfarm's `cost_eur`), plus its traffic
 * (`traffic_eur`), all in the provider's currency.
 */
export function billedCost(timeCost: number, reportedCost: number | null, trafficCost: number | null): number {
  return roundMoney(Math.max(plausible(timeCost), plausible(reportedCost)) + plausible(trafficCost));
}

/** What a machine that is not its lease's current one has cost: price × its billed time. */
export function machineCost(
  machine: { price_per_hour: number | null; billed_from: string | null; min_billed_minutes: number },
  until: number,
): number {
  if (!machine.price_per_hour || !machine.billed_from) return 0;
  const billedMs = Math.max(until - ms(machine.billed_from), machine.min_billed_minutes * 60_000, 0);
  return roundMoney((machine.price_per_hour * billedMs) / HOUR_MS);
}
