import { type LeaseRow, LeaseRowSchema, type StoredSpec } from "../leases/ledger";
import type { OwnMachine, ProviderName } from "../providers/types";
import { leaseEventStatements } from "../webhooks/outbox";

/** D1 allows 100 bound parameters per query. */
const IDS_PER_QUERY = 90;
/** VRAMfarm machines are found by ref: the refs of leases active or stopped this recently. */
const KNOWN_REF_WINDOW_MS = 7 * 24 * 3_600_000;

export interface LedgerView {
  active: LeaseRow[];
  /** VRAMfarm machines the ledger knows, ref → lease id (VRAMfarm has no labels to list by) */
  vramfarmRefs: Map<string, string>;
}

/** Active leases and VRAMfarm's known machines: one round trip whatever the ledger's size. */
export async function loadLedgerView(db: D1Database, now: number): Promise<LedgerView> {
  const [active, vramfarm] = await db.batch([
    db.prepare("SELECT * FROM leases WHERE status != 'stopped'"),
    // Only two columns: the full rows are read for the refs that turn up in the listing.
    db
      .prepare(
        `SELECT id, provider_ref FROM leases WHERE provider = 'vramfarm' AND provider_ref IS NOT NULL
           AND (status != 'stopped' OR COALESCE(stopped_at, created_at) >= ?)`,
      )
      .bind(new Date(now - KNOWN_REF_WINDOW_MS).toISOString()),
  ]);
  const refs = new Map<string, string>();
  for (const row of (vramfarm?.results ?? []) as { id: string; provider_ref: string }[])
    refs.set(row.provider_ref, row.id);
  return { active: (active?.results ?? []).map((row) => LeaseRowSchema.parse(row)), vramfarmRefs: refs };
}

/** The rows of these lease ids, in one batch of queries of at most IDS_PER_QUERY ids each. */
export async function loadLeasesByIds(db: D1Database, ids: readonly string[]): Promise<LeaseRow[]> {
  const unique = [...new Set(ids)];
  if (unique.length === 0) return [];
  const statements: D1PreparedStatement[] = [];
  for (let i = 0; i < unique.length; i += IDS_PER_QUERY) {
    const chunk = unique.slice(i, i + IDS_PER_QUERY);
    statements.push(db.prepare(`SELECT * FROM leases WHERE id IN (${chunk.map(() => "?").join(", ")})`).bind(...chunk));
  }
  const results = await db.batch(statements);
  return results.flatMap((r) => r.results.map((row) => LeaseRowSchema.parse(row)));
}

/** What an adopted machine's lease row says about a machine nobody asked us to rent. */
const ADOPTED_SPEC: StoredSpec = {
  image: null,
  cmd: null,
  env: {},
  ports: [],
  disk_gb: 1,
  weights_gb: 0,
  context_length: null,
  min_billed_minutes: 0,
};

export interface Adoption {
  leaseId: string;
  provider: ProviderName;
  currency: "USD" | "EUR";
  machine: OwnMachine;
  now: string;
}

/**
 * A lease row for an orphan, born `stopping` with stop_reason `reaper`: its keeper then tears
 * the machine down with verification like any other. OR IGNORE: a second reaper adopting the
 * same machine at once writes nothing.
 */
export function adoptStatement(db: D1Database, a: Adoption): D1PreparedStatement {
  const label = a.machine.label ?? `adopted-${a.provider}-${a.machine.ref}`;
  return db
    .prepare(
      `INSERT OR IGNORE INTO leases (id, name, status, provider, provider_ref, label, price_per_hour, currency,
         template, spec, max_minutes, stop_reason, cost, created_at, rented_at, stop_requested_at)
       VALUES (?, ?, 'stopping', ?, ?, ?, ?, ?, 'custom', ?, 1, 'reaper', ?, ?, ?, ?)`,
    )
    .bind(
      a.leaseId,
      "orphan adopted by the reaper",
      a.provider,
      a.machine.ref,
      label,
      a.machine.price_per_hour,
      a.currency,
      JSON.stringify(ADOPTED_SPEC),
      adoptedCost(a),
      a.now,
      normalisedTime(a.machine.created_at) ?? a.now,
      a.now,
    );
}

/**
 * What the orphan has cost until adoption (price × age), so leaked money shows in the ledger,
 * the account's spend and the budget; the keeper freezes cost once a lease is stopping.
 */
function adoptedCost(a: Adoption): number {
  const created = normalisedTime(a.machine.created_at);
  if (!created || a.machine.price_per_hour === null) return 0;
  const hours = Math.max(0, Date.parse(a.now) - Date.parse(created)) / 3_600_000;
  return Math.round(a.machine.price_per_hour * hours * 10_000) / 10_000;
}

/**
 * Reopens a stopped lease whose machine still exists, for its keeper to tear down again.
 * Conditional on `stopped`, so it never overrides a keeper that is already at work.
 */
export function reopenStatement(
  db: D1Database,
  leaseId: string,
  provider: ProviderName,
  ref: string,
  now: string,
): D1PreparedStatement {
  return db
    .prepare(
      `UPDATE leases SET status = 'stopping', provider = ?, provider_ref = ?, stop_reason = COALESCE(stop_reason, 'reaper'),
         stop_requested_at = ?, stopped_at = NULL, teardown_verified_at = NULL
       WHERE id = ? AND status = 'stopped'`,
    )
    .bind(provider, ref, now, leaseId);
}

export function eventStatement(
  db: D1Database,
  leaseId: string,
  at: string,
  kind: string,
  detail: string,
): D1PreparedStatement {
  return db
    .prepare("INSERT INTO lease_events (lease_id, at, kind, detail) VALUES (?, ?, ?, ?)")
    .bind(leaseId, at, kind, detail);
}

/** The event's row plus its webhook outbox entries (an adoption is reaper.orphan_found). */
export function eventStatements(
  db: D1Database,
  leaseId: string,
  at: string,
  kind: string,
  detail: string,
): D1PreparedStatement[] {
  return [
    eventStatement(db, leaseId, at, kind, detail),
    ...leaseEventStatements(db, leaseId, [{ kind, detail }], Date.parse(at)),
  ];
}

/** A provider's timestamp as ISO-8601 UTC, or null when it does not parse. */
function normalisedTime(text: string | null): string | null {
  if (!text) return null;
  const at = Date.parse(text);
  return Number.isFinite(at) ? new Date(at).toISOString() : null;
}
