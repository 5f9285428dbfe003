import { ms } from "../lib/time";
import type { LeaseRow } from "./ledger";

/**
 * When a running model lease with `idle_minutes` has gone that long without a request through
 * the LLM gateway (counted from the last request's end, or from running when there was none);
 * null for a lease without the setting or not running.
 */
export function idleDeadline(lease: LeaseRow, lastRequestAt: number | null): number | null {
  const minutes = lease.spec.idle_minutes;
  if (lease.status !== "running" || !minutes) return null;
  const since = Math.max(lastRequestAt ?? 0, lease.running_at ? ms(lease.running_at) : ms(lease.created_at));
  return since + minutes * 60_000;
}

/** The stop detail of an idle lease (its stop_reason is `idle`). */
export const idleDetail = (minutes: number) => `no request through the gateway for ${minutes} minutes`;
