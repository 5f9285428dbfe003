import { z } from "zod";
import { spentUsd } from "../account/spend";
import { type LeaseRow, LeaseRowSchema } from "../leases/ledger";
import { type LeaseInput, LeaseInputSchema } from "../leases/schema";
import { iso, ms } from "../lib/time";
import { RunStatusSchema, type Schedule, type ScheduleRun } from "./schema";

/** One row of `schedules`, parsed, with the newest run that did not start a lease. */
const ScheduleRowSchema = z.object({
  id: z.string(),
  name: z.string(),
  cron: z.string(),
  timezone: z.string(),
  enabled: z.number().transform((v) => v === 1),
  lease_spec: z.string().transform((text) => LeaseInputSchema.parse(JSON.parse(text))),
  next_run_at: z.string().nullable(),
  last_run_at: z.string().nullable(),
  last_lease_id: z.string().nullable(),
  origin: z.string().nullable(),
  created_at: z.string(),
  updated_at: z.string(),
  skip_due_at: z.string().nullable(),
  skip_status: z.enum(["skipped", "failed", "retrying"]).nullable(),
  skip_detail: z.string().nullable(),
});
export type ScheduleRow = z.infer<typeof ScheduleRowSchema>;

// The newest non-started run rides along in the same query (no second round trip per schedule).
const SELECT_SCHEDULE = `
  SELECT s.*, r.due_at AS skip_due_at, r.status AS skip_status, r.detail AS skip_detail
  FROM schedules s
  LEFT JOIN schedule_runs r ON r.schedule_id = s.id AND r.due_at = (
    SELECT due_at FROM schedule_runs
    WHERE schedule_id = s.id AND status IN ('skipped', 'failed', 'retrying')
    ORDER BY due_at DESC LIMIT 1)`;

/** What every response shows of `env`: the keys, each value "***" (values are write-only). */
export const MASKED_ENV_VALUE = "***";

export function maskedLease(lease: LeaseInput): LeaseInput {
  if (!lease.env) return lease;
  return { ...lease, env: Object.fromEntries(Object.keys(lease.env).map((key) => [key, MASKED_ENV_VALUE])) };
}

/**
 * A lease body sent back after reading it: an env value left "***" keeps the stored value
 * (a client that PATCHes what it read must not overwrite a secret with the mask).
 */
export function unmaskedLease(sent: LeaseInput, stored: LeaseInput): LeaseInput {
  if (!sent.env) return sent;
  const env = Object.fromEntries(
    Object.entries(sent.env).map(([key, value]) => [
      key,
      value === MASKED_ENV_VALUE && stored.env?.[key] !== undefined ? stored.env[key] : value,
    ]),
  );
  return { ...sent, env };
}

export function toSchedule(row: ScheduleRow): Schedule {
  return {
    id: row.id,
    name: row.name,
    cron: row.cron,
    timezone: row.timezone,
    enabled: row.enabled,
    lease: maskedLease(row.lease_spec),
    next_run_at: row.next_run_at,
    last_run_at: row.last_run_at,
    last_lease_id: row.last_lease_id,
    last_skip:
      row.skip_due_at && row.skip_status
        ? { due_at: row.skip_due_at, status: row.skip_status, detail: row.skip_detail }
        : null,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

export interface NewSchedule {
  id: string;
  name: string;
  cron: string;
  timezone: string;
  enabled: boolean;
  lease: LeaseInput;
  next_run_at: string | null;
  origin: string;
  now: string;
}

export async function insertSchedule(db: D1Database, s: NewSchedule): Promise<void> {
  await db
    .prepare(
      `INSERT INTO schedules (id, name, cron, timezone, enabled, lease_spec, next_run_at, origin, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    )
    .bind(
      s.id,
      s.name,
      s.cron,
      s.timezone,
      s.enabled ? 1 : 0,
      JSON.stringify(s.lease),
      s.next_run_at,
      s.origin,
      s.now,
      s.now,
    )
    .run();
}

export async function getSchedule(db: D1Database, scheduleId: string): Promise<ScheduleRow | null> {
  const row = await db.prepare(`${SELECT_SCHEDULE} WHERE s.id = ?`).bind(scheduleId).first();
  return row ? ScheduleRowSchema.parse(row) : null;
}

export async function listSchedules(db: D1Database): Promise<ScheduleRow[]> {
  const { results } = await db.prepare(`${SELECT_SCHEDULE} ORDER BY s.created_at, s.id`).all();
  return results.map((row) => ScheduleRowSchema.parse(row));
}

/** Enabled schedules whose next run has come. */
export async function listDueSchedules(db: D1Database, now: number): Promise<ScheduleRow[]> {
  const { results } = await db
    .prepare(
      `${SELECT_SCHEDULE} WHERE s.enabled = 1 AND s.next_run_at IS NOT NULL AND s.next_run_at <= ? ORDER BY s.next_run_at`,
    )
    .bind(iso(now))
    .all();
  return results.map((row) => ScheduleRowSchema.parse(row));
}

export interface ScheduleUpdate {
  name: string;
  cron: string;
  timezone: string;
  enabled: boolean;
  lease: LeaseInput;
  next_run_at: string | null;
  /** the origin the change came in on: cron-made leases are served there when PUBLIC_URL is unset */
  origin: string;
  now: string;
}

export async function updateSchedule(db: D1Database, scheduleId: string, u: ScheduleUpdate): Promise<boolean> {
  const result = await db
    .prepare(
      `UPDATE schedules SET name = ?, cron = ?, timezone = ?, enabled = ?, lease_spec = ?, next_run_at = ?, origin = ?,
       updated_at = ? WHERE id = ?`,
    )
    .bind(
      u.name,
      u.cron,
      u.timezone,
      u.enabled ? 1 : 0,
      JSON.stringify(u.lease),
      u.next_run_at,
      u.origin,
      u.now,
      scheduleId,
    )
    .run();
  return result.meta.changes > 0;
}

/** The origin a run-now request came in on: the schedule's later cron-made leases are served there too. */
export async function noteScheduleOrigin(db: D1Database, scheduleId: string, origin: string): Promise<void> {
  await db.prepare("UPDATE schedules SET origin = ? WHERE id = ?").bind(origin, scheduleId).run();
}

/** Deletes the schedule and its run history in one transaction; its leases stay in the ledger. */
export async function deleteSchedule(db: D1Database, scheduleId: string): Promise<boolean> {
  const [deleted] = await db.batch([
    db.prepare("DELETE FROM schedules WHERE id = ?").bind(scheduleId),
    db.prepare("DELETE FROM schedule_runs WHERE schedule_id = ?").bind(scheduleId),
  ]);
  return (deleted?.meta.changes ?? 0) > 0;
}

// ---- schedule_runs: one row per schedule and due time ----

const RunRowSchema = z.object({
  schedule_id: z.string(),
  due_at: z.string(),
  status: RunStatusSchema,
  lease_id: z.string().nullable(),
  detail: z.string().nullable(),
  attempts: z.number().int(),
  created_at: z.string(),
  updated_at: z.string(),
});
export type RunRow = z.infer<typeof RunRowSchema>;

/** A run with its lease's cost (USD) and billed minutes up to `now`. */
export function toScheduleRun(row: RunRow, lease: LeaseRow | null, now: number, eurUsd: number): ScheduleRun {
  const { schedule_id: _scheduleId, ...run } = row;
  if (!lease) return { ...run, lease: null };
  const from = ms(lease.rented_at ?? lease.running_at ?? lease.created_at);
  const to = lease.stopped_at ? ms(lease.stopped_at) : now;
  return {
    ...run,
    lease: {
      status: lease.status,
      error: lease.error,
      cost_usd: Math.round(spentUsd(lease, now, eurUsd) * 1e4) / 1e4,
      minutes: Math.round(Math.max(0, to - from) / 6_000) / 10,
    },
  };
}

/** A schedule's newest runs, each with its lease (when it started one), in one round trip. */
export async function listRuns(
  db: D1Database,
  scheduleId: string,
  limit: number,
): Promise<{ run: RunRow; lease: LeaseRow | null }[]> {
  const newest = "SELECT * FROM schedule_runs WHERE schedule_id = ?1 ORDER BY due_at DESC LIMIT ?2";
  const [runs, leases] = await db.batch([
    db.prepare(newest).bind(scheduleId, limit),
    db
      .prepare(`SELECT * FROM leases WHERE id IN (SELECT lease_id FROM (${newest}) WHERE lease_id IS NOT NULL)`)
      .bind(scheduleId, limit),
  ]);
  const byId = new Map((leases?.results ?? []).map((raw) => [(raw as { id: string }).id, LeaseRowSchema.parse(raw)]));
  return (runs?.results ?? []).map((raw) => {
    const run = RunRowSchema.parse(raw);
    return { run, lease: run.lease_id ? (byId.get(run.lease_id) ?? null) : null };
  });
}

const SELECT_RUN_WITH_SCHEDULE = `
  SELECT r.schedule_id AS run_schedule_id, r.due_at AS run_due_at, r.status AS run_status, r.lease_id AS run_lease_id,
    r.detail AS run_detail, r.attempts AS run_attempts, r.created_at AS run_created_at, r.updated_at AS run_updated_at,
    s.*, NULL AS skip_due_at, NULL AS skip_status, NULL AS skip_detail
  FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id`;

/** Runs waiting for capacity, with their schedule (still enabled). */
export async function listRetryingRuns(db: D1Database): Promise<{ run: RunRow; schedule: ScheduleRow }[]> {
  const { results } = await db
    .prepare(`${SELECT_RUN_WITH_SCHEDULE} WHERE r.status = 'retrying' AND s.enabled = 1 ORDER BY r.due_at`)
    .all<Record<string, unknown>>();
  return results.map(runWithSchedule);
}

/**
 * Dispatcher runs still `claimed` since `cutoff` or earlier: their claimer's invocation has ended
 * (a "run now" claim is the route's own, its lease already rented, and is left alone).
 */
export async function listStaleClaims(
  db: D1Database,
  cutoff: string,
): Promise<{ run: RunRow; schedule: ScheduleRow }[]> {
  const { results } = await db
    .prepare(
      `${SELECT_RUN_WITH_SCHEDULE} WHERE r.status = 'claimed' AND r.updated_at <= ?
         AND (r.detail IS NULL OR r.detail != 'run now') ORDER BY r.due_at`,
    )
    .bind(cutoff)
    .all<Record<string, unknown>>();
  return results.map(runWithSchedule);
}

/**
 * Takes a stale claim over. The condition on updated_at is the lock: the first taker moves it
 * to now, and every other dispatcher sees no row changed.
 */
export async function reclaimStale(
  db: D1Database,
  scheduleId: string,
  dueAt: string,
  cutoff: string,
  now: string,
): Promise<RunRow | null> {
  const row = await db
    .prepare(
      `UPDATE schedule_runs SET updated_at = ?
       WHERE schedule_id = ? AND due_at = ? AND status = 'claimed' AND updated_at <= ? RETURNING *`,
    )
    .bind(now, scheduleId, dueAt, cutoff)
    .first();
  return row ? RunRowSchema.parse(row) : null;
}

/** Records a stale claim as failed; true for the one dispatcher whose write landed. */
export async function failStaleClaim(
  db: D1Database,
  scheduleId: string,
  dueAt: string,
  cutoff: string,
  detail: string,
  now: string,
): Promise<boolean> {
  const result = await db
    .prepare(
      `UPDATE schedule_runs SET status = 'failed', detail = ?, updated_at = ?
       WHERE schedule_id = ? AND due_at = ? AND status = 'claimed' AND updated_at <= ?`,
    )
    .bind(detail, now, scheduleId, dueAt, cutoff)
    .run();
  return result.meta.changes > 0;
}

function runWithSchedule(row: Record<string, unknown>): { run: RunRow; schedule: ScheduleRow } {
  return {
    run: RunRowSchema.parse({
      schedule_id: row.run_schedule_id,
      due_at: row.run_due_at,
      status: row.run_status,
      lease_id: row.run_lease_id,
      detail: row.run_detail,
      attempts: row.run_attempts,
      created_at: row.run_created_at,
      updated_at: row.run_updated_at,
    }),
    schedule: ScheduleRowSchema.parse(row),
  };
}

/** A run row as an INSERT OR IGNORE: the first writer of (schedule, due time) wins. */
export function insertRunStatement(
  db: D1Database,
  run: {
    scheduleId: string;
    dueAt: string;
    status: "claimed" | "skipped" | "retrying";
    detail: string | null;
    now: string;
  },
): D1PreparedStatement {
  return db
    .prepare(
      `INSERT OR IGNORE INTO schedule_runs (schedule_id, due_at, status, detail, attempts, created_at, updated_at)
       VALUES (?, ?, ?, ?, 0, ?, ?)`,
    )
    .bind(run.scheduleId, run.dueAt, run.status, run.detail, run.now, run.now);
}

/** Moves next_run_at on, unless another dispatcher or a PATCH already did. */
export function advanceStatement(
  db: D1Database,
  scheduleId: string,
  fromIso: string,
  toIso: string | null,
  now: string,
): D1PreparedStatement {
  return db
    .prepare("UPDATE schedules SET next_run_at = ?, updated_at = ? WHERE id = ? AND next_run_at = ?")
    .bind(toIso, now, scheduleId, fromIso);
}

/**
 * Takes a retrying run for one more attempt. The status condition makes it one dispatcher's:
 * the other sees no row changed.
 */
export async function claimRetry(
  db: D1Database,
  scheduleId: string,
  dueAt: string,
  now: string,
): Promise<RunRow | null> {
  const row = await db
    .prepare(
      `UPDATE schedule_runs SET status = 'claimed', updated_at = ?
       WHERE schedule_id = ? AND due_at = ? AND status = 'retrying' RETURNING *`,
    )
    .bind(now, scheduleId, dueAt)
    .first();
  return row ? RunRowSchema.parse(row) : null;
}

/** Records how a claimed run ended; a started one also becomes the schedule's last run. */
export async function finishRun(
  db: D1Database,
  run: {
    scheduleId: string;
    dueAt: string;
    status: "started" | "skipped" | "retrying" | "failed";
    leaseId: string | null;
    detail: string | null;
    attempted: boolean;
    now: string;
  },
): Promise<void> {
  const statements = [
    db
      .prepare(
        `UPDATE schedule_runs SET status = ?, lease_id = COALESCE(?, lease_id), detail = ?, attempts = attempts + ?, updated_at = ?
         WHERE schedule_id = ? AND due_at = ?`,
      )
      .bind(run.status, run.leaseId, run.detail, run.attempted ? 1 : 0, run.now, run.scheduleId, run.dueAt),
  ];
  if (run.status === "started" && run.leaseId) {
    statements.push(
      db
        .prepare("UPDATE schedules SET last_run_at = ?, last_lease_id = ? WHERE id = ?")
        .bind(run.now, run.leaseId, run.scheduleId),
    );
  }
  await db.batch(statements);
}

/** The schedule's newest lease that is not stopped yet, if any. */
export async function activeLeaseOf(db: D1Database, scheduleId: string): Promise<string | null> {
  const row = await db
    .prepare("SELECT id FROM leases WHERE schedule_id = ? AND status != 'stopped' ORDER BY created_at DESC LIMIT 1")
    .bind(scheduleId)
    .first<{ id: string }>();
  return row?.id ?? null;
}

/** Gives up on a retrying run whose window has passed (conditional: one dispatcher writes it). */
export async function expireRetry(
  db: D1Database,
  scheduleId: string,
  dueAt: string,
  detail: string,
  now: string,
): Promise<void> {
  await db
    .prepare(
      `UPDATE schedule_runs SET status = 'skipped', detail = ?, updated_at = ?
       WHERE schedule_id = ? AND due_at = ? AND status = 'retrying'`,
    )
    .bind(detail, now, scheduleId, dueAt)
    .run();
}
