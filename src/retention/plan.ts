import { newId } from "../lib/ids";

/** The tables pruned by age, in the order a round prunes them; `leases` is never pruned. */
export const PRUNE_TABLES = [
  "dashboard_sessions",
  "webhook_deliveries",
  "webhook_events",
  "schedule_runs",
  "reaper_runs",
  "lease_billing",
  "lease_events",
] as const;
export type PruneTable = (typeof PRUNE_TABLES)[number];

/** Rows one DELETE removes at most: keeps each statement short and its writes bounded. */
export const BATCH_ROWS = 2_000;
/**
 * D1 statements one pruning run may send. Each is one subrequest, and a Free-plan invocation has
 * 50 of them; the reaper that runs before pruning in the same invocation needs its share.
 */
export const STATEMENT_BUDGET = 20;

const DAY_MS = 86_400_000;

/** What a pruning statement may remove: rows older than these bounds. */
export interface Cutoffs {
  /** ISO time: history older than RETENTION_DAYS */
  before: string;
  /** ms since epoch, the same moment (webhook_deliveries.next_attempt_at) */
  beforeMs: number;
  /** YYYY-MM-DD: billing days before the retention's first day */
  day: string;
  /** webhook_events ids below this were made before `before` (ids are time-sortable) */
  eventId: string;
  /** ISO time: dashboard sessions that expired before now can go at once */
  now: string;
}

export function cutoffsAt(now: number, retentionDays: number): Cutoffs {
  const beforeMs = now - retentionDays * DAY_MS;
  const before = new Date(beforeMs).toISOString();
  return {
    before,
    beforeMs,
    day: before.slice(0, 10),
    // The time part of the id only ("evt_" and 10 characters): every id of a later moment sorts after it.
    eventId: newId("evt", beforeMs).slice(0, 14),
    now: new Date(now).toISOString(),
  };
}

/** How one statement went: rows deleted, or null when it failed. */
export interface PruneResult {
  table: PruneTable;
  deleted: number | null;
}

/**
 * The tables the next round prunes: every table in the first round; after that only those whose
 * last batch came back full (rows may be left), never beyond the statement budget. A failed
 * statement is not repeated in the same run.
 */
export function nextRound(
  previous: readonly PruneResult[] | null,
  used: number,
  budget = STATEMENT_BUDGET,
  batch = BATCH_ROWS,
): PruneTable[] {
  const wanted =
    previous === null
      ? [...PRUNE_TABLES]
      : previous.filter((r) => r.deleted !== null && r.deleted >= batch).map((r) => r.table);
  return wanted.slice(0, Math.max(0, budget - used));
}
