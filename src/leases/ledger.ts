import { z } from "zod";
import type { LeaseUsage } from "../gateway/usage-store";
import { AccessSchema, CurrencySchema, ProviderNameSchema, TemplateSchema } from "../providers/types";
import { leaseEventStatements } from "../webhooks/outbox";
import { BillingStartsAtSchema, jsonColumn } from "./columns";
import { type CreateRecord, toCreateView } from "./create-records";
import type { LeaseEventKind } from "./events";
import { roundMoney } from "./pricing";
import {
  type Lease,
  type LeaseEvent,
  LeaseModelSchema,
  type LeaseStatus,
  LeaseStatusSchema,
  type StopReason,
  StopReasonSchema,
} from "./schema";

/** What the lease row's `spec` column holds: what was asked for, and how the machine is billed. */
export const StoredSpecSchema = z.object({
  // Defaults everywhere: rows written by others (the reaper's adopted orphans) keep `spec` at '{}'.
  image: z.string().nullable().default(null),
  cmd: z.string().nullable().default(null),
  /** the user's env only: the call-back token is never stored */
  env: z.record(z.string(), z.string()).default({}),
  ports: z.array(z.number().int()).default([]),
  disk_gb: z.number().int().nonnegative().default(0),
  weights_gb: z.number().nonnegative().default(0),
  context_length: z.number().int().nullable().default(null),
  /** set once rented: the offer's minimum billed minutes per start (VRAMfarm: 15) */
  min_billed_minutes: z.number().int().nonnegative().default(0),
  /** a model lease's model (schema.ts LeaseModelSchema) */
  model: LeaseModelSchema.nullable().default(null),
  /** the weights' estimated download time at the rented offer, added to START_TIMEOUT_MIN */
  download_s: z.number().nonnegative().default(0),
  /** a model lease is stopped after this long with no request through the gateway (src/leases/idle.ts) */
  idle_minutes: z.number().int().positive().nullable().optional(),
  /** the model endpoint (its name) whose replica the lease is (src/endpoints) */
  endpoint: z.string().nullable().optional(),
});
export type StoredSpec = z.infer<typeof StoredSpecSchema>;

/** One row of `leases`, parsed. */
export const LeaseRowSchema = z.object({
  id: z.string(),
  name: z.string().nullable(),
  status: LeaseStatusSchema,
  provider: ProviderNameSchema.nullable(),
  provider_ref: z.string().nullable(),
  label: z.string(),
  offer_id: z.string().nullable(),
  gpu: z.string().nullable(),
  gpu_count: z.number().int().nullable(),
  vram_gb: z.number().nullable(),
  price_per_hour: z.number().nullable(),
  currency: CurrencySchema.nullable(),
  template: TemplateSchema,
  spec: jsonColumn(StoredSpecSchema)
    .refine((spec) => spec !== null, "spec is missing")
    .transform((spec) => spec as StoredSpec),
  max_minutes: z.number().int(),
  max_cost: z.number().nullable(),
  expected_cost: z.number().nullable(),
  cost: z.number(),
  access: jsonColumn(AccessSchema),
  error: z.string().nullable(),
  stop_reason: StopReasonSchema.nullable(),
  exit_code: z.number().int().nullable(),
  schedule_id: z.string().nullable(),
  token_id: z.string().nullable(),
  idempotency_key: z.string().nullable(),
  callback_hash: z.string().nullable(),
  attempts: z.string().nullable(),
  created_at: z.string(),
  rented_at: z.string().nullable(),
  running_at: z.string().nullable(),
  stop_requested_at: z.string().nullable(),
  stopped_at: z.string().nullable(),
  teardown_verified_at: z.string().nullable(),
  /** what the lease's other machines cost (src/leases/create-records.ts), in `currency` */
  strays_cost: z.number().default(0),
  /** a model lease's inference key, SHA-256 (the key itself is shown once) */
  inference_key_hash: z.string().nullable().default(null),
  /** a schedule's model lease: its key sealed (src/lib/sealing.ts) for the lease.running webhook */
  inference_key_sealed: z.string().nullable().default(null),
  billing_starts_at: BillingStartsAtSchema.nullable().default(null),
  /** what the provider itself billed (src/billing), when it reports it per machine */
  billed: z.number().nullable().optional(),
  billing_checked_at: z.string().nullable().optional(),
  /** bumped by every keeper commit, claim and reopen: a step's write applies only to the row it read */
  revision: z.number().int().default(0),
});
export type LeaseRow = z.infer<typeof LeaseRowSchema>;

/** The row as the API shows it, with its create records: what was asked (env values masked), no hashes, keys or token ids. */
/**
 * The lease's `cost` as the API shows it, in its currency: every money figure on a lease (the
 * usage's cost per million tokens too) is worked out from this one.
 */
export function leaseCost(row: LeaseRow): number {
  return roundMoney(row.cost + row.strays_cost);
}

export function toLease(row: LeaseRow, creates: readonly CreateRecord[], usage: LeaseUsage | null = null): Lease {
  return {
    id: row.id,
    name: row.name,
    status: row.status,
    provider: row.provider,
    provider_ref: row.provider_ref,
    offer_id: row.offer_id,
    label: row.label,
    template: row.template,
    gpu: row.gpu,
    gpu_count: row.gpu_count,
    vram_gb: row.vram_gb,
    price_per_hour: row.price_per_hour,
    currency: row.currency,
    max_minutes: row.max_minutes,
    max_cost: row.max_cost,
    expected_cost: row.expected_cost,
    cost: leaseCost(row),
    billed: row.billed ?? null,
    access:
      row.access && row.template === "ollama" && row.access.urls[0]
        ? { ...row.access, openai_base_url: `${row.access.urls[0].replace(/\/+$/, "")}/v1` }
        : row.access,
    error: row.error,
    stop_reason: row.stop_reason,
    exit_code: row.exit_code,
    schedule_id: row.schedule_id,
    endpoint: row.spec.endpoint ?? null,
    created_at: row.created_at,
    running_at: row.running_at,
    stop_requested_at: row.stop_requested_at,
    stopped_at: row.stopped_at,
    teardown_verified_at: row.teardown_verified_at,
    model: row.spec.model,
    spec: {
      template: row.template,
      image: row.spec.image,
      cmd: row.spec.cmd,
      ports: row.spec.ports,
      disk_gb: row.spec.disk_gb,
      env: Object.fromEntries(Object.keys(row.spec.env).map((key) => [key, "***" as const])),
      model: row.spec.model?.name ?? null,
      context_length: row.spec.context_length,
    },
    usage,
    creates: creates.map(toCreateView),
  };
}

function parseRow(row: unknown): LeaseRow {
  return LeaseRowSchema.parse(row);
}

/** The columns a new lease row is written with (status `provisioning`). */
export interface NewLease {
  id: string;
  name: string | null;
  label: string;
  template: LeaseRow["template"];
  spec: StoredSpec;
  max_minutes: number;
  max_cost: number | null;
  expected_cost: number | null;
  schedule_id: string | null;
  token_id: string | null;
  idempotency_key: string | null;
  callback_hash: string;
  /** a model lease's inference key, hashed; null for other leases */
  inference_key_hash: string | null;
  /** a schedule's model lease: the key sealed for its lease.running webhook */
  inference_key_sealed: string | null;
  created_at: string;
}

export type InsertOutcome =
  | { kind: "inserted"; row: LeaseRow }
  | { kind: "limit_reached" }
  | { kind: "duplicate"; row: LeaseRow };

/**
 * Writes a new `provisioning` lease unless `maxActive` leases are already active: the count
 * and the insert are one statement, so two racing requests cannot both pass the limit. A
 * repeated idempotency key loses to the unique index and returns the lease that holds it. Its
 * `created` event (what it will try) goes in the same batch, written only with the row.
 */
export async function insertLease(
  db: D1Database,
  lease: NewLease,
  maxActive: number,
  created: { detail: string },
): Promise<InsertOutcome> {
  const values = [
    lease.id,
    lease.name,
    lease.label,
    lease.template,
    JSON.stringify(lease.spec),
    lease.max_minutes,
    lease.max_cost,
    lease.expected_cost,
    lease.schedule_id,
    lease.token_id,
    lease.idempotency_key,
    lease.callback_hash,
    lease.inference_key_hash,
    lease.inference_key_sealed,
    lease.created_at,
  ];
  try {
    const [inserted] = await db.batch([
      db
        .prepare(
          `INSERT INTO leases (id, name, label, template, spec, max_minutes, max_cost, expected_cost,
             schedule_id, token_id, idempotency_key, callback_hash, inference_key_hash, inference_key_sealed,
             created_at, status)
           SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'provisioning'
           WHERE (SELECT COUNT(*) FROM leases WHERE status != 'stopped') < ?
           RETURNING *`,
        )
        .bind(...values, maxActive),
      db
        .prepare(
          `INSERT INTO lease_events (lease_id, at, kind, detail, reason)
           SELECT ?1, ?2, 'created', ?3, NULL WHERE EXISTS (SELECT 1 FROM leases WHERE id = ?1)`,
        )
        .bind(lease.id, lease.created_at, created.detail),
    ]);
    const row = inserted?.results[0];
    return row ? { kind: "inserted", row: parseRow(row) } : { kind: "limit_reached" };
  } catch (error) {
    if (lease.idempotency_key && /UNIQUE/i.test(String(error))) {
      const existing = await getLeaseByIdempotencyKey(db, lease.idempotency_key);
      if (existing) return { kind: "duplicate", row: existing };
    }
    throw error;
  }
}

export async function getLease(db: D1Database, leaseId: string): Promise<LeaseRow | null> {
  const row = await db.prepare("SELECT * FROM leases WHERE id = ?").bind(leaseId).first();
  return row ? parseRow(row) : null;
}

export async function getLeaseByIdempotencyKey(db: D1Database, key: string): Promise<LeaseRow | null> {
  const row = await db.prepare("SELECT * FROM leases WHERE idempotency_key = ?").bind(key).first();
  return row ? parseRow(row) : null;
}

export type StatusFilter = LeaseStatus | "active";

export interface ListLeasesQuery {
  status?: StatusFilter;
  limit: number;
  cursor?: string;
}

export class BadCursorError extends Error {}

const CursorSchema = z.tuple([z.string(), z.string()]);

function encodeCursor(row: LeaseRow): string {
  return btoa(JSON.stringify([row.created_at, row.id])).replace(/=+$/, "");
}

function decodeCursor(cursor: string): [string, string] {
  try {
    return CursorSchema.parse(JSON.parse(atob(cursor)));
  } catch {
    throw new BadCursorError("cursor is not one this API returned");
  }
}

/** Leases newest first, `limit` at a time; `next_cursor` continues after the last one. */
export async function listLeases(
  db: D1Database,
  query: ListLeasesQuery,
): Promise<{ rows: LeaseRow[]; nextCursor: string | null }> {
  const where: string[] = [];
  const params: unknown[] = [];
  if (query.status === "active") where.push("status != 'stopped'");
  else if (query.status) {
    where.push("status = ?");
    params.push(query.status);
  }
  if (query.cursor) {
    const [createdAt, id] = decodeCursor(query.cursor);
    where.push("(created_at < ? OR (created_at = ? AND id < ?))");
    params.push(createdAt, createdAt, id);
  }
  const sql = `SELECT * FROM leases ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
               ORDER BY created_at DESC, id DESC LIMIT ?`;
  const { results } = await db
    .prepare(sql)
    .bind(...params, query.limit + 1)
    .all();
  const rows = results.map(parseRow);
  const page = rows.slice(0, query.limit);
  const last = page[page.length - 1];
  return { rows: page, nextCursor: rows.length > query.limit && last ? encodeCursor(last) : null };
}

/** Columns that change after creation. */
export type LeasePatch = Partial<{
  status: LeaseStatus;
  provider: LeaseRow["provider"];
  provider_ref: string | null;
  offer_id: string | null;
  gpu: string | null;
  gpu_count: number | null;
  vram_gb: number | null;
  price_per_hour: number | null;
  currency: LeaseRow["currency"];
  spec: StoredSpec;
  expected_cost: number | null;
  cost: number;
  access: LeaseRow["access"];
  error: string | null;
  stop_reason: LeaseRow["stop_reason"];
  exit_code: number | null;
  attempts: string | null;
  rented_at: string | null;
  running_at: string | null;
  stop_requested_at: string | null;
  stopped_at: string | null;
  teardown_verified_at: string | null;
  billing_starts_at: LeaseRow["billing_starts_at"];
  strays_cost: number;
  inference_key_hash: string | null;
  inference_key_sealed: string | null;
}>;

const jsonColumns = new Set(["spec", "access"]);

/** `SET` assignments and their values for a patch (JSON columns serialised). */
export function patchAssignments(patch: LeasePatch): { sets: string[]; values: unknown[] } {
  const entries = Object.entries(patch).filter(([, value]) => value !== undefined);
  return {
    sets: entries.map(([column]) => `${column} = ?`),
    values: entries.map(([column, value]) =>
      jsonColumns.has(column) && value !== null ? JSON.stringify(value) : (value as unknown),
    ),
  };
}

/** Removes a just-inserted lease no create was ever sent for (a rental refused by the budget). */
export async function deleteUnsentLease(db: D1Database, leaseId: string): Promise<void> {
  const unsent = `EXISTS (SELECT 1 FROM leases WHERE id = ?1 AND status = 'provisioning' AND provider_ref IS NULL)
    AND NOT EXISTS (SELECT 1 FROM lease_creates WHERE lease_id = ?1)`;
  // Its events first, while the row that says it is unsent is there; one batch, one transaction.
  await db.batch([
    db.prepare(`DELETE FROM lease_events WHERE lease_id = ?1 AND ${unsent}`).bind(leaseId),
    db.prepare(`DELETE FROM leases WHERE id = ?1 AND ${unsent}`).bind(leaseId),
  ]);
}

export interface NewEvent {
  /** one of the kinds in src/leases/events.ts */
  kind: LeaseEventKind;
  detail?: string | null;
  /** why, as data: the stop reason of a stop request or a stop (webhooks map by it, never by `detail`) */
  reason?: StopReason | null;
}

/** Appends to the lease's event log. */
export async function appendEvent(db: D1Database, leaseId: string, at: string, event: NewEvent): Promise<void> {
  await appendEvents(db, leaseId, at, [event]);
}

/**
 * Appends several events in one batch (one transaction), in order. Events that webhooks announce
 * (see webhookTypesFor) enter the webhook outbox in the same batch.
 */
export async function appendEvents(
  db: D1Database,
  leaseId: string,
  at: string,
  events: readonly NewEvent[],
): Promise<void> {
  if (events.length === 0) return;
  await db.batch(eventStatements(db, leaseId, at, events));
}

/** The statements that append `events` to the lease's log and the webhook outbox. */
export function eventStatements(
  db: D1Database,
  leaseId: string,
  at: string,
  events: readonly NewEvent[],
): D1PreparedStatement[] {
  const statement = db.prepare("INSERT INTO lease_events (lease_id, at, kind, detail, reason) VALUES (?, ?, ?, ?, ?)");
  return [
    ...events.map((event) => statement.bind(leaseId, at, event.kind, event.detail ?? null, event.reason ?? null)),
    ...leaseEventStatements(db, leaseId, events, Date.parse(at)),
  ];
}

const EventRowSchema = z.object({
  seq: z.number().int(),
  at: z.string(),
  // A kind no longer written (a row from an older version) is shown as stored rather than
  // failing the log: the read is lenient where the writes are checked (src/leases/events.ts).
  kind: z.string().transform((kind) => kind as LeaseEventKind),
  detail: z.string().nullable(),
  // An unknown reason (a row from a newer version) reads as none rather than failing the log.
  reason: StopReasonSchema.nullable().catch(null).default(null),
});

/** The lease's events with seq > `afterSeq`, oldest first. */
export async function listEvents(db: D1Database, leaseId: string, afterSeq = 0, limit = 500): Promise<LeaseEvent[]> {
  const { results } = await db
    .prepare(
      "SELECT seq, at, kind, detail, reason FROM lease_events WHERE lease_id = ? AND seq > ? ORDER BY seq LIMIT ?",
    )
    .bind(leaseId, afterSeq, limit)
    .all();
  return results.map((row) => EventRowSchema.parse(row));
}
