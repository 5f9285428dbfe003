import type { LeaseRow } from "../leases/ledger";
import { ms } from "../lib/time";

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
