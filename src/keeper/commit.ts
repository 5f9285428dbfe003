/**
 * The keeper's writes, each one D1 batch (one transaction) that applies whole or not at all:
 * a step's commit (the lease's patch, its create records, its events and their webhooks), a
 * claim (the record and the reopen together), a reopen. A step's batch opens with a guard that
 * fails unless the lease still has the status and `revision` the step read; every commit, claim
 * and reopen bumps `revision`, so a step whose reads a claim outdated writes nothing and starts
 * over at its next alarm. A `stopped` write has a guard of its own, evaluated inside the batch:
 * no create record of the lease is unresolved or holds a machine without `gone_at`.
 */
import {
  type CreateRecord,
  CreateRecordSchema,
  claimStatements,
  type FoundMachine,
  type StrayPatch,
  strayUpdateStatement,
} from "../leases/create-records";
import {
  eventStatements,
  type LeasePatch,
  type LeaseRow,
  LeaseRowSchema,
  type NewEvent,
  patchAssignments,
} from "../leases/ledger";
import { iso } from "../lib/time";
import type { ProviderName } from "../providers/types";

/**
 * SQLite raises "integer overflow" for abs() of the smallest integer: a guard's failing branch,
 * so D1 rolls the whole batch back (a batch is one transaction; a failing statement aborts it).
 */
const ABORT = "abs(-9223372036854775808)";

/** True for the error a failed guard raises (D1 wraps SQLite's message). */
export function isGuardFailure(error: unknown): boolean {
  return error instanceof Error && /integer overflow/i.test(error.message);
}

const guard = (db: D1Database, condition: string, ...values: unknown[]) =>
  db.prepare(`SELECT CASE WHEN ${condition} THEN 1 ELSE ${ABORT} END`).bind(...values);

/** No create record of lease ?1 is unresolved or holds a machine not verified gone. */
const NOTHING_OPEN = `NOT EXISTS (SELECT 1 FROM lease_creates WHERE lease_id = ?1
  AND (resolution = 'unresolved' OR (resolution = 'machine' AND gone_at IS NULL)))`;

/** What one step writes. */
export interface StepWrite {
  /** the row the step decided from: the write applies only while its status and revision are these */
  read: Pick<LeaseRow, "id" | "status" | "revision">;
  patch: LeasePatch;
  events: readonly NewEvent[];
  /** the teardown state of create records (strays) */
  creates?: readonly { seq: number; patch: StrayPatch }[];
  /**
   * the lease's own machine is verified gone: its create record says so, and an adopted lease
   * (no create record) gets one, so a later reopen never bills that machine again
   */
  currentGone?: { provider: ProviderName; ref: string } | null;
  at: number;
}

/** True when a step has nothing to write. */
export const isEmptyWrite = (w: StepWrite): boolean =>
  Object.keys(w.patch).length === 0 && w.events.length === 0 && !w.creates?.length && !w.currentGone;

/** The statements of a step's write, in order; the lease's UPDATE … RETURNING is at `rowAt`. */
export function stepStatements(db: D1Database, w: StepWrite): { statements: D1PreparedStatement[]; rowAt: number } {
  const id = w.read.id;
  const at = iso(w.at);
  const statements: D1PreparedStatement[] = [
    guard(
      db,
      "EXISTS (SELECT 1 FROM leases WHERE id = ?1 AND status = ?2 AND revision = ?3)",
      id,
      w.read.status,
      w.read.revision,
    ),
  ];
  for (const c of w.creates ?? []) {
    const statement = strayUpdateStatement(db, id, c.seq, c.patch);
    if (statement) statements.push(statement);
  }
  if (w.currentGone) {
    const { provider, ref } = w.currentGone;
    statements.push(
      db
        .prepare(
          "UPDATE lease_creates SET gone_at = ?4 WHERE lease_id = ?1 AND provider = ?2 AND provider_ref = ?3 AND gone_at IS NULL",
        )
        .bind(id, provider, ref, at),
      db
        .prepare(
          `INSERT INTO lease_creates (lease_id, seq, provider, offer_id, sent_at, origin, offer, resolution, detail,
             provider_ref, price_per_hour, billed_from, resolved_at, gone_at, gone_reads)
           SELECT ?1, COALESCE((SELECT MAX(seq) FROM lease_creates WHERE lease_id = ?1), 0) + 1, ?2, ?2 || ':found',
             COALESCE(l.rented_at, l.created_at), 'found', json_object('currency', l.currency), 'machine',
             'the lease''s own machine, verified gone', ?3, l.price_per_hour, COALESCE(l.rented_at, l.created_at),
             ?4, ?4, 2
           FROM leases l WHERE l.id = ?1
             AND NOT EXISTS (SELECT 1 FROM lease_creates WHERE provider = ?2 AND provider_ref = ?3)`,
        )
        .bind(id, provider, ref, at),
    );
  }
  if (w.patch.status === "stopped") statements.push(guard(db, NOTHING_OPEN, id));
  const { sets, values } = patchAssignments(w.patch);
  const rowAt = statements.length;
  statements.push(
    db
      .prepare(`UPDATE leases SET ${[...sets, "revision = revision + 1"].join(", ")} WHERE id = ? RETURNING *`)
      .bind(...values, id),
  );
  statements.push(...eventStatements(db, id, at, w.events));
  return { statements, rowAt };
}

/**
 * Writes a step in one batch. The row afterwards; null when the lease is not as the step read
 * it (the step starts over); a D1 failure throws and nothing of the step is written.
 */
export async function commitStep(db: D1Database, w: StepWrite): Promise<LeaseRow | null> {
  const { statements, rowAt } = stepStatements(db, w);
  try {
    const results = await db.batch(statements);
    const row = results[rowAt]?.results[0];
    return row ? LeaseRowSchema.parse(row) : null;
  } catch (error) {
    if (isGuardFailure(error)) return null;
    throw error;
  }
}

/** The lease and its create records, in one round trip: what a step decides from. */
export async function observe(
  db: D1Database,
  leaseId: string,
): Promise<{ lease: LeaseRow; creates: CreateRecord[] } | null> {
  const [leaseRows, createRows] = await db.batch([
    db.prepare("SELECT * FROM leases WHERE id = ?").bind(leaseId),
    db.prepare("SELECT * FROM lease_creates WHERE lease_id = ? ORDER BY seq").bind(leaseId),
  ]);
  const row = leaseRows?.results[0];
  if (!row) return null;
  return {
    lease: LeaseRowSchema.parse(row),
    creates: (createRows?.results ?? []).map((c) => CreateRecordSchema.parse(c)),
  };
}

export type ClaimKind = "claimed" | "known" | "alive_again" | "other_lease";

/**
 * A machine of this lease that is not its current one, in one batch: the record (or, for one
 * verified gone before and listed again, its teardown afresh), its event, and the reopen of a
 * stopped lease, together or not at all. The batch is guarded by the holder the claim read (a
 * racing claim makes it start over) and bumps `revision`, so a step in flight writes nothing.
 * A record this lease holds for a live machine also reopens a stopped lease: nothing may stay
 * stopped while one of its machines is open.
 */
export async function claimInOneBatch(
  db: D1Database,
  leaseId: string,
  machine: FoundMachine,
  now: number,
): Promise<{ kind: ClaimKind; holder: string | null; reopened: boolean }> {
  const at = iso(now);
  for (let attempt = 0; ; attempt++) {
    const holderRow = await db
      .prepare("SELECT lease_id, gone_at FROM lease_creates WHERE provider = ? AND provider_ref = ?")
      .bind(machine.provider, machine.ref)
      .first<{ lease_id: string; gone_at: string | null }>();
    if (holderRow && holderRow.lease_id !== leaseId)
      return { kind: "other_lease", holder: holderRow.lease_id, reopened: false };
    const kind: ClaimKind = !holderRow ? "claimed" : holderRow.gone_at !== null ? "alive_again" : "known";
    const events: NewEvent[] =
      kind === "claimed"
        ? [{ kind: "machine_found", detail: `${machine.provider} ${machine.ref}: ${machine.detail}` }]
        : kind === "alive_again"
          ? [{ kind: "machine_found", detail: `${machine.provider} ${machine.ref} is listed alive again` }]
          : [];
    const holderIs = {
      claimed: "NOT EXISTS (SELECT 1 FROM lease_creates WHERE provider = ?1 AND provider_ref = ?2) AND ?3 IS NOT NULL",
      alive_again:
        "EXISTS (SELECT 1 FROM lease_creates WHERE provider = ?1 AND provider_ref = ?2 AND lease_id = ?3 AND gone_at IS NOT NULL)",
      known:
        "EXISTS (SELECT 1 FROM lease_creates WHERE provider = ?1 AND provider_ref = ?2 AND lease_id = ?3 AND gone_at IS NULL)",
    }[kind];
    const statements: D1PreparedStatement[] = [guard(db, holderIs, machine.provider, machine.ref, leaseId)];
    if (kind === "claimed") statements.push(...claimStatements(db, leaseId, machine, at, null));
    if (kind === "alive_again")
      statements.push(
        db
          .prepare(
            "UPDATE lease_creates SET gone_at = NULL, gone_reads = 0, unverified_at = NULL WHERE lease_id = ? AND provider = ? AND provider_ref = ?",
          )
          .bind(leaseId, machine.provider, machine.ref),
      );
    // A step that read before this claim must not write from those reads.
    statements.push(
      db.prepare("UPDATE leases SET revision = revision + 1 WHERE id = ? AND status != 'stopped'").bind(leaseId),
    );
    const reopenAt = statements.length;
    statements.push(
      db
        .prepare(
          `UPDATE leases SET status = 'stopping', stop_requested_at = ?2, stopped_at = NULL, teardown_verified_at = NULL,
             revision = revision + 1
           WHERE id = ?1 AND status = 'stopped' AND EXISTS (SELECT 1 FROM lease_creates
             WHERE lease_id = ?1 AND provider = ?3 AND provider_ref = ?4 AND gone_at IS NULL)
           RETURNING id`,
        )
        .bind(leaseId, at, machine.provider, machine.ref),
    );
    statements.push(...eventStatements(db, leaseId, at, events));
    try {
      const results = await db.batch(statements);
      return { kind, holder: leaseId, reopened: (results[reopenAt]?.results.length ?? 0) > 0 };
    } catch (error) {
      // Another writer claimed or changed the record between the read and the batch: read again.
      if (isGuardFailure(error) && attempt < 3) continue;
      throw error;
    }
  }
}

/**
 * The stopped lease's own machine is still listed: the lease goes back to stopping and the
 * machine's record is open again (torn down and billed anew), in one batch.
 */
export async function reopenInOneBatch(
  db: D1Database,
  leaseId: string,
  provider: ProviderName,
  ref: string,
  now: number,
): Promise<boolean> {
  const at = iso(now);
  const [reopened] = await db.batch([
    db
      .prepare(
        `UPDATE leases SET status = 'stopping', provider = ?2, provider_ref = ?3, stop_reason = COALESCE(stop_reason, 'reaper'),
           stop_requested_at = ?4, stopped_at = NULL, teardown_verified_at = NULL, revision = revision + 1
         WHERE id = ?1 AND status = 'stopped' RETURNING id`,
      )
      .bind(leaseId, provider, ref, at),
    db
      .prepare(
        `UPDATE lease_creates SET gone_at = NULL, gone_reads = 0 WHERE lease_id = ?1 AND provider = ?2 AND provider_ref = ?3
           AND EXISTS (SELECT 1 FROM leases WHERE id = ?1 AND status = 'stopping' AND stop_requested_at = ?4)`,
      )
      .bind(leaseId, provider, ref, at),
  ]);
  return (reopened?.results.length ?? 0) > 0;
}
