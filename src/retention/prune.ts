import type { Services } from "../services";
import { BATCH_ROWS, cutoffsAt, nextRound, type PruneResult, type PruneTable } from "./plan";
import { eventsBelow, pruneStatement } from "./store";

export interface PruneSummary {
  /** D1 statements sent (each one subrequest) */
  statements: number;
  deleted: Partial<Record<PruneTable, number>>;
  /** tables whose last batch was full: rows past the cutoff may be left for the next run */
  more: PruneTable[];
  ms: number;
}

/**
 * Deletes history older than RETENTION_DAYS (expired dashboard sessions at once) in bounded
 * batches, at most STATEMENT_BUDGET statements a run; a backlog is worked off over later runs.
 * A failed statement is logged and skipped: pruning never fails the cron it runs in.
 */
export async function pruneHistory(services: Services): Promise<PruneSummary> {
  const started = Date.now();
  const cutoffs = cutoffsAt(services.clock(), services.config.retentionDays);
  const summary: PruneSummary = { statements: 0, deleted: {}, more: [], ms: 0 };
  const last = new Map<PruneTable, number | null>();
  let below: number | null = null;
  let previous: PruneResult[] | null = null;
  for (let round = nextRound(previous, 0); round.length > 0; round = nextRound(previous, summary.statements)) {
    previous = [];
    for (const table of round) {
      summary.statements++;
      let deleted: number | null = null;
      try {
        if (table === "lease_events" && below === null) {
          below = await eventsBelow(services.db, cutoffs);
          summary.statements++;
        }
        const result = await pruneStatement(services.db, table, cutoffs, BATCH_ROWS, below ?? 0).run();
        deleted = result.meta.changes;
        summary.deleted[table] = (summary.deleted[table] ?? 0) + deleted;
      } catch (error) {
        services.log.warn("retention_prune_failed", { table, error });
      }
      last.set(table, deleted);
      previous.push({ table, deleted });
    }
  }
  summary.more = [...last].filter(([, deleted]) => deleted !== null && deleted >= BATCH_ROWS).map(([table]) => table);
  summary.ms = Date.now() - started;
  services.log.info("retention_pruned", { ...summary });
  return summary;
}
