/**
 * Which provider calls a step makes, with no I/O. The lease's own machine comes first (a poll, or
 * a terminate and a verifying read); its other machines (strays) share what is left of the
 * alarm's small budget by due time, never record order, so a stray that ignores every terminate
 * cannot take another's turn: each is worked at the teardown's pace however many never go away
 * (an alarm wakes at the earliest due time, so more strays mean more alarms, not bigger ones).
 */
import type { CreateRecord } from "../leases/create-records";
import type { LeaseRow, NewEvent } from "../leases/ledger";
import { ms } from "../lib/time";
import { CONFIRM_GONE_MS, type KeeperSettings, reterminateAfterMs } from "./decide";

/** Provider calls one alarm makes for the lease's own machine (a poll and a probe, or terminate + read). */
export const OWN_CALLS_PER_ALARM = 2;
/** ... for its strays (a terminate and a read each, by due time). */
export const STRAY_CALLS_PER_ALARM = 2;
/** ... for lookups of unresolved creates. */
export const LOOKUP_CALLS_PER_ALARM = 1;

/** When a stray's terminate is due again: first at once, then at the lease teardown's re-send pace. */
export function strayTerminateDueAt(stray: CreateRecord, s: KeeperSettings): number {
  if (stray.terminate_sent_at === null) return 0;
  const wait = reterminateAfterMs({ terminatesSent: stray.terminates_sent }, s);
  return ms(stray.terminate_sent_at) + (stray.unverified_at ? Math.max(wait, s.slowVerifyMs) : wait);
}

/**
 * When a stray next needs a call: its verifying read after the last (a moment after a first
 * "gone", the verify pace otherwise, the slow pace once flagged), or its terminate if sooner.
 * A stray never read is due at once.
 */
export function strayDueAt(stray: CreateRecord, s: KeeperSettings): number {
  if (stray.checked_at === null) return 0;
  const pace = stray.gone_reads > 0 ? CONFIRM_GONE_MS : stray.unverified_at ? s.slowVerifyMs : s.verifyIntervalMs;
  return Math.min(ms(stray.checked_at) + pace, strayTerminateDueAt(stray, s));
}

/** One stray's calls in this step. */
export interface StrayCalls {
  stray: CreateRecord;
  terminate: boolean;
  status: boolean;
}

/**
 * The strays due at `now` with a provider, earliest due first (then record order), each given a
 * terminate when due and a read, until `budget` calls are used.
 */
export function planStrayCalls(
  strays: readonly CreateRecord[],
  now: number,
  s: KeeperSettings,
  budget: number,
  hasProvider: (stray: CreateRecord) => boolean,
): StrayCalls[] {
  const due = strays
    .filter((stray) => hasProvider(stray) && strayDueAt(stray, s) <= now)
    .sort((a, b) => strayDueAt(a, s) - strayDueAt(b, s) || a.seq - b.seq);
  const plan: StrayCalls[] = [];
  let left = budget;
  for (const stray of due) {
    if (left === 0) break;
    const terminate = strayTerminateDueAt(stray, s) <= now;
    if (terminate) left -= 1;
    const status = left > 0;
    if (status) left -= 1;
    plan.push({ stray, terminate, status });
  }
  return plan;
}

/** When the strays next need the keeper (null: none open). A stray without a provider is looked at slowly. */
export function nextStrayWorkAt(
  strays: readonly CreateRecord[],
  now: number,
  s: KeeperSettings,
  hasProvider: (stray: CreateRecord) => boolean,
): number | null {
  if (strays.length === 0) return null;
  const times = strays.map((stray) =>
    hasProvider(stray) ? Math.max(strayDueAt(stray, s), now + CONFIRM_GONE_MS) : now + s.slowVerifyMs,
  );
  return Math.min(...times);
}

/**
 * A stray is flagged `teardown_unverified` once: when its provider has no key (nothing can end
 * or read it; its cost runs on at its last known price), or when it has not read gone within the
 * teardown window since it was recorded or the lease's stop, whichever is later.
 */
export function strayFlag(
  lease: Pick<LeaseRow, "stop_requested_at">,
  stray: CreateRecord,
  now: number,
  s: KeeperSettings,
  providerMissing: boolean,
): NewEvent | null {
  if (stray.unverified_at !== null || stray.gone_at !== null) return null;
  const what = `${stray.provider} ${stray.provider_ref} (not the lease's machine)`;
  if (providerMissing)
    return {
      kind: "teardown_unverified",
      detail: `${what}: ${stray.provider} is not configured, so it can be neither terminated nor read; its cost runs on at its last known price`,
    };
  const since = Math.max(
    ms(stray.resolved_at ?? stray.sent_at),
    lease.stop_requested_at ? ms(lease.stop_requested_at) : 0,
  );
  if (now - since < s.unverifiedAfterMs) return null;
  return {
    kind: "teardown_unverified",
    detail: `${what} is not confirmed gone after ${Math.round(s.unverifiedAfterMs / 60_000)} minutes; still trying`,
  };
}
