import type { Cutoffs, PruneTable } from "./plan";

// A create still open: unresolved, or a machine not yet verified gone. Its lease keeps its history.
const OPEN_CREATE = `EXISTS (SELECT 1 FROM lease_creates c WHERE c.lease_id = l.id
  AND (c.resolution = 'unresolved' OR (c.resolution = 'machine' AND c.gone_at IS NULL)))`;

/**
 * One bounded DELETE per table: the oldest rows past the cutoff that nothing open still needs
 * (a lease that is not stopped or has an open create keeps its events and billing days; a
 * pending delivery keeps itself and its event; claimed and retrying runs stay).
 */
export function pruneStatement(
  db: D1Database,
  table: PruneTable,
  c: Cutoffs,
  limit: number,
  eventsBelow = 0,
): D1PreparedStatement {
  switch (table) {
    case "dashboard_sessions":
      return db
        .prepare(
          `DELETE FROM dashboard_sessions WHERE id_hash IN (
             SELECT id_hash FROM dashboard_sessions WHERE expires_at < ? ORDER BY expires_at LIMIT ?)`,
        )
        .bind(c.now, limit);
    case "webhook_deliveries":
      // next_attempt_at (indexed with status) never lies after a finished delivery's last try.
      return db
        .prepare(
          `DELETE FROM webhook_deliveries WHERE id IN (
             SELECT id FROM webhook_deliveries
             WHERE status IN ('delivered', 'failed') AND next_attempt_at < ? AND created_at < ? LIMIT ?)`,
        )
        .bind(c.beforeMs, c.before, limit);
    case "webhook_events":
      return db
        .prepare(
          `DELETE FROM webhook_events WHERE id IN (
             SELECT e.id FROM webhook_events e
             WHERE e.id < ? AND e.created_at < ?
               AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.status = 'pending' AND d.event_id = e.id)
             ORDER BY e.id LIMIT ?)`,
        )
        .bind(c.eventId, c.before, limit);
    case "schedule_runs":
      return db
        .prepare(
          `DELETE FROM schedule_runs WHERE rowid IN (
             SELECT rowid FROM schedule_runs WHERE status IN ('started', 'skipped', 'failed') AND due_at < ? LIMIT ?)`,
        )
        .bind(c.before, limit);
    case "reaper_runs":
      return db
        .prepare("DELETE FROM reaper_runs WHERE id IN (SELECT id FROM reaper_runs WHERE at < ? ORDER BY at LIMIT ?)")
        .bind(c.before, limit);
    case "lease_billing":
      return db
        .prepare(
          `DELETE FROM lease_billing WHERE rowid IN (
             SELECT b.rowid FROM lease_billing b JOIN leases l ON l.id = b.lease_id
             WHERE b.day < ? AND l.status = 'stopped' AND NOT ${OPEN_CREATE} LIMIT ?)`,
        )
        .bind(c.day, limit);
    case "lease_events":
      // lease_events has no index on `at`, but seq grows with time: the rows below the first
      // event at or after the cutoff (`eventsBelow`) are a rowid range.
      return db
        .prepare(
          `DELETE FROM lease_events WHERE seq IN (
             SELECT e.seq FROM lease_events e JOIN leases l ON l.id = e.lease_id
             WHERE e.seq < ? AND e.at < ? AND l.status = 'stopped' AND NOT ${OPEN_CREATE}
             ORDER BY e.seq LIMIT ?)`,
        )
        .bind(eventsBelow, c.before, limit);
  }
}

/**
 * The seq of the first lease event at or after the cutoff (or one past the last event): what a
 * run may prune lies below it. Read once a run; it scans only the events older than the cutoff.
 */
export async function eventsBelow(db: D1Database, c: Cutoffs): Promise<number> {
  const row = await db
    .prepare(
      `SELECT COALESCE((SELECT seq FROM lease_events WHERE at >= ? ORDER BY seq LIMIT 1),
         (SELECT COALESCE(MAX(seq), 0) + 1 FROM lease_events)) AS below`,
    )
    .bind(c.before)
    .first<{ below: number }>();
  return row?.below ?? 0;
}
