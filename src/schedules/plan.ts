import type { CronSchedule } from "./cron";

/** A cron that did not fire is made up for only this late; later, the run is skipped. */
export const CATCH_UP_WINDOW_MS = 30 * 60_000;
/** A run refused for lack of capacity is tried again for this long after its due time. */
export const RETRY_WINDOW_MS = 30 * 60_000;
/** ...at most this often: every failed attempt leaves a `rent_failed` lease in the ledger. */
export const RETRY_EVERY_MS = 5 * 60_000;

export interface RunSkip {
  dueAt: number;
  detail: string;
}

/** What the dispatcher does with a schedule whose next_run_at has come. */
export interface DuePlan {
  /** due times recorded as skipped, with the reason */
  skips: RunSkip[];
  /** the due time to start a lease for now, or null */
  start: number | null;
  /** the schedule's new next_run_at: the first run strictly after `now` */
  next: number | null;
}

/**
 * Decides a due schedule: start its newest due run if it is inside the catch-up window, and
 * record what was missed. Only the newest due time is started: a dispatcher that was down for
 * hours must not start a backlog of leases at once.
 */
export function planDue(cron: CronSchedule, nextRunAt: number, now: number, catchUpMs = CATCH_UP_WINDOW_MS): DuePlan {
  const latest = Math.max(nextRunAt, cron.latestAtOrBefore(now) ?? nextRunAt);
  const skips: RunSkip[] = [];
  if (latest > nextRunAt) {
    skips.push({
      dueAt: nextRunAt,
      detail: `missed: the dispatcher did not run at this time; superseded by the run due ${new Date(latest).toISOString()}`,
    });
  }
  let start: number | null = latest;
  if (now - latest > catchUpMs) {
    skips.push({
      dueAt: latest,
      detail: `missed: the dispatcher ran ${Math.round((now - latest) / 60_000)} min late, past the ${Math.round(catchUpMs / 60_000)}-minute catch-up window`,
    });
    start = null;
  }
  return { skips, start, next: cron.nextAfter(now) };
}

/** When a run that is `retrying` gets its next attempt, or null once its window is over. */
export function nextRetryAt(dueAt: number, lastAttemptAt: number, retryWindowMs = RETRY_WINDOW_MS): number | null {
  const at = lastAttemptAt + RETRY_EVERY_MS;
  return at <= dueAt + retryWindowMs ? at : null;
}
