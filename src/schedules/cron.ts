import { Cron } from "croner";

/**
 * A schedule's cron expression in its IANA time zone, evaluated by croner. Daylight saving is
 * croner's rule for "fixed-time" jobs (single minute and hour, e.g. `30 2 * * *`): a local time
 * that does not exist (spring forward) runs at the first valid minute after the gap, and a
 * local time that happens twice (fall back) runs once, at its first occurrence. Interval jobs
 * (`*\/30 * * * *`) skip times in the gap and run on both occurrences of a repeated hour.
 */
export interface CronSchedule {
  /** the first run strictly after `afterMs`, or null when the expression never runs again */
  nextAfter(afterMs: number): number | null;
  /** the newest run at or before `atMs`, or null when there was none */
  latestAtOrBefore(atMs: number): number | null;
}

/** Why an expression or zone is refused, in words for the 400's `issues`. */
export type CronProblem = { field: "cron" | "timezone"; message: string };

/** True when the runtime knows `timezone` as an IANA zone name. */
export function isValidTimezone(timezone: string): boolean {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: timezone });
    return true;
  } catch {
    return false;
  }
}

/** Parses a five-field expression for `timezone`; a problem instead of a throw. */
export function parseCron(expression: string, timezone: string): CronSchedule | CronProblem {
  if (!isValidTimezone(timezone)) {
    return { field: "timezone", message: `unknown IANA time zone "${timezone}" (e.g. "Europe/Berlin", "UTC")` };
  }
  let job: Cron;
  try {
    // paused + no callback: croner only evaluates, it never arms a timer in the isolate.
    job = new Cron(expression.trim(), { timezone, mode: "5-part", paused: true });
  } catch (error) {
    const reason = error instanceof Error ? error.message.replace(/^CronPattern:\s*/, "") : String(error);
    return { field: "cron", message: `invalid cron expression (5 fields: minute hour day month weekday): ${reason}` };
  }
  const schedule: CronSchedule = {
    nextAfter: (afterMs) => job.nextRun(new Date(afterMs))?.getTime() ?? null,
    // previousRuns excludes its reference itself: one millisecond later includes a run at atMs.
    latestAtOrBefore: (atMs) => job.previousRuns(1, new Date(atMs + 1))[0]?.getTime() ?? null,
  };
  if (schedule.nextAfter(Date.now()) === null) {
    return { field: "cron", message: "the cron expression never runs (e.g. 30 February)" };
  }
  return schedule;
}

/** Like parseCron for values already validated on the way in; throws on a stored bad row. */
export function cronFor(expression: string, timezone: string): CronSchedule {
  const parsed = parseCron(expression, timezone);
  if ("field" in parsed) throw new Error(`stored schedule has ${parsed.field}: ${parsed.message}`);
  return parsed;
}
