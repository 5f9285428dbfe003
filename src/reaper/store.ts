import type { LeaseEventKind } from "../leases/events";
import { type LeaseRow, LeaseRowSchema, type StoredSpec } from "../leases/ledger";
import type { OwnMachine, ProviderName } from "../providers/types";
import { leaseEventStatements } from "../webhooks/outbox";
import { cursorsStatement, parseCursors } from "./cursors";

/** D1 allows 100 bound parameters per query. */
const IDS_PER_QUERY = 90;
/** Machines of providers without labels are found by ref: those of leases active or stopped this recently. */
const KNOWN_REF_WINDOW_MS = 7 * 24 * 3_600_000;

export interface LedgerView {
  active: LeaseRow[];
  /** per provider without labels (Provider.labelled false): the machines the ledger knows, ref → lease id */
  knownRefs: Map<ProviderName, Map<string, string>>;
  /** where each provider's listing stopped in an earlier run (src/reaper/cursors.ts) */
  cursors: Map<ProviderName, string>;
}

/** Active leases and the unlabelled providers' known machines: one round trip whatever the ledger's size. */
export async function loadLedgerView(
  db: D1Database,
  now: number,
  unlabelled: readonly ProviderName[],
): Promise<LedgerView> {
  const names = unlabelled.length ? unlabelled : ["-"];
  const [active, known, held, cursors] = await db.batch([
    db.prepare("SELECT * FROM leases WHERE status != 'stopped'"),
    // Only three columns: the full rows are read for the refs that turn up in the listing.
    db
      .prepare(
        `SELECT id, provider, provider_ref FROM leases WHERE provider IN (${names.map(() => "?").join(", ")})
           AND provider_ref IS NOT NULL AND (status != 'stopped' OR COALESCE(stopped_at, created_at) >= ?)`,
      )
      .bind(...names, new Date(now - KNOWN_REF_WINDOW_MS).toISOString()),
    // Machines create records hold that are not verified gone: other machines of a lease.
    db
      .prepare(
        `SELECT lease_id AS id, provider, provider_ref FROM lease_creates
         WHERE provider IN (${names.map(() => "?").join(", ")}) AND resolution = 'machine' AND gone_at IS NULL`,
      )
      .bind(...names),
    cursorsStatement(db),
  ]);
  const knownRefs = new Map<ProviderName, Map<string, string>>(unlabelled.map((name) => [name, new Map()]));
  for (const row of [...(known?.results ?? []), ...(held?.results ?? [])] as {
    id: string;
    provider: ProviderName;
    provider_ref: string;
  }[])
    knownRefs.get(row.provider)?.set(row.provider_ref, row.id);
  return {
    active: (active?.results ?? []).map((row) => LeaseRowSchema.parse(row)),
    knownRefs,
    cursors: parseCursors(cursors?.results ?? []),
  };
}

/** The refs to look for at each unlabelled provider (its listing cannot filter by label). */
export function knownRefLists(ledger: LedgerView): Partial<Record<ProviderName, string[]>> {
  return Object.fromEntries([...ledger.knownRefs].map(([name, refs]) => [name, [...refs.keys()]]));
}

export type CreateRecordRefs = Map<ProviderName, Map<string, { leaseId: string; goneAt: string | null }>>;

const chunks = (ids: readonly string[]): string[][] => {
  const unique = [...new Set(ids)];
  const out: string[][] = [];
  for (let i = 0; i < unique.length; i += IDS_PER_QUERY) out.push(unique.slice(i, i + IDS_PER_QUERY));
  return out;
};
const marks = (chunk: readonly string[]) => chunk.map(() => "?").join(", ");

/**
 * One batch: the rows of `rowIds`, and the machines the create records of `recordIds` hold
 * (per provider, ref → lease), each in queries of at most IDS_PER_QUERY ids.
 */
export async function loadRowsAndRecords(
  db: D1Database,
  rowIds: readonly string[],
  recordIds: readonly string[],
): Promise<{ rows: LeaseRow[]; records: CreateRecordRefs }> {
  const rowChunks = chunks(rowIds);
  const statements = [
    ...rowChunks.map((chunk) => db.prepare(`SELECT * FROM leases WHERE id IN (${marks(chunk)})`).bind(...chunk)),
    ...chunks(recordIds).map((chunk) =>
      db
        .prepare(
          `SELECT lease_id, provider, provider_ref, gone_at FROM lease_creates
             WHERE provider_ref IS NOT NULL AND lease_id IN (${marks(chunk)})`,
        )
        .bind(...chunk),
    ),
  ];
  const results = statements.length ? await db.batch(statements) : [];
  const rows = results.slice(0, rowChunks.length).flatMap((r) => r.results.map((row) => LeaseRowSchema.parse(row)));
  const records: CreateRecordRefs = new Map();
  for (const result of results.slice(rowChunks.length)) {
    for (const row of result.results as {
      lease_id: string;
      provider: ProviderName;
      provider_ref: string;
      gone_at: string | null;
    }[]) {
      const byRef = records.get(row.provider) ?? new Map();
      byRef.set(row.provider_ref, { leaseId: row.lease_id, goneAt: row.gone_at });
      records.set(row.provider, byRef);
    }
  }
  return { rows, records };
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
  model: null,
  download_s: 0,
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

export function eventStatement(
  db: D1Database,
  leaseId: string,
  at: string,
  kind: LeaseEventKind,
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
  kind: LeaseEventKind,
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
