import { z } from "@hono/zod-openapi";
import { type Currency, CurrencySchema, type ProviderName, ProviderNameSchema } from "../providers/types";
import { BillingStartsAtSchema, jsonColumn } from "./columns";

/*
 * Create records (table `lease_creates`, docs/architecture.md "Create records"): every create
 * gpulease sends is written before it is sent and then resolved on its own, to the machine it
 * made or to "none". The rent path writes a create's outcome; the lease's keeper resolves the
 * rest and tears down every machine that is not the lease's current one.
 */

/** What the create asked for: enough to adopt its machine and to recognise it without a label. */
export const CreateOfferSchema = z.object({
  gpu: z.string().nullable().default(null),
  gpu_count: z.number().int().nullable().default(null),
  vram_gb: z.number().nullable().default(null),
  /** the listed price, in `currency` */
  price_per_hour: z.number().nullable().default(null),
  currency: CurrencySchema.nullable().default(null),
  min_billed_minutes: z.number().int().nonnegative().default(0),
  billing_starts_at: BillingStartsAtSchema.default("accepted"),
  /** the lookup key of a provider without labels (VRAMfarm: card, count and image) */
  image: z.string().nullable().default(null),
  /** a model lease: the weights' estimated load time at this offer, added to the start timeout */
  download_s: z.number().nonnegative().default(0),
});
export type CreateOffer = z.infer<typeof CreateOfferSchema>;

export const createResolutions = ["unresolved", "machine", "none"] as const;
export const CreateResolutionSchema = z.enum(createResolutions);

/** One row of `lease_creates`, parsed. */
export const CreateRecordSchema = z.object({
  lease_id: z.string(),
  seq: z.number().int(),
  provider: ProviderNameSchema,
  offer_id: z.string(),
  sent_at: z.string(),
  origin: z.enum(["rent", "found"]),
  offer: jsonColumn(CreateOfferSchema).transform((offer) => offer ?? CreateOfferSchema.parse({})),
  resolution: CreateResolutionSchema,
  detail: z.string().nullable(),
  provider_ref: z.string().nullable(),
  /** the machine's price, in the offer's currency: the provider's figure once known */
  price_per_hour: z.number().nullable(),
  billed_from: z.string().nullable(),
  resolved_at: z.string().nullable(),
  terminate_sent_at: z.string().nullable(),
  terminates_sent: z.number().int(),
  gone_reads: z.number().int(),
  gone_at: z.string().nullable(),
  cost: z.number(),
  /** a stray's last status read: its next one is due from here */
  checked_at: z.string().nullable().default(null),
  /** when a stray was flagged teardown_unverified */
  unverified_at: z.string().nullable().default(null),
});
export type CreateRecord = z.infer<typeof CreateRecordSchema>;

/** A create as the API shows it (`creates` on a lease). */
export const CreateViewSchema = z
  .object({
    provider: ProviderNameSchema,
    offer_id: z.string(),
    sent_at: z.string(),
    resolution: CreateResolutionSchema,
    provider_ref: z.string().nullable(),
    resolved_at: z.string().nullable(),
  })
  .openapi("LeaseCreate");
export type CreateView = z.infer<typeof CreateViewSchema>;

export const toCreateView = (c: CreateRecord): CreateView => ({
  provider: c.provider,
  offer_id: c.offer_id,
  sent_at: c.sent_at,
  resolution: c.resolution,
  provider_ref: c.provider_ref,
  resolved_at: c.resolved_at,
});

/**
 * A machine a create made that is not the lease's current one: its keeper tears it down. A lease
 * without a current machine has none: the first machine found becomes its machine.
 */
export const isStray = (
  lease: { provider: ProviderName | null; provider_ref: string | null },
  create: CreateRecord,
): boolean =>
  lease.provider_ref !== null &&
  create.resolution === "machine" &&
  create.provider_ref !== null &&
  !(create.provider === lease.provider && create.provider_ref === lease.provider_ref);

/** What still keeps a lease from `stopped`: creates not resolved, and other machines not verified gone. */
export function openCreates(
  lease: { provider: ProviderName | null; provider_ref: string | null },
  creates: readonly CreateRecord[],
): { unresolved: CreateRecord[]; strays: CreateRecord[] } {
  return {
    unresolved: creates.filter((c) => c.resolution === "unresolved"),
    strays: creates.filter((c) => isStray(lease, c) && c.gone_at === null),
  };
}

const parse = (row: unknown): CreateRecord => CreateRecordSchema.parse(row);

export async function listCreates(db: D1Database, leaseId: string): Promise<CreateRecord[]> {
  const { results } = await db
    .prepare("SELECT * FROM lease_creates WHERE lease_id = ? ORDER BY seq")
    .bind(leaseId)
    .all();
  return results.map(parse);
}

/** The create records of several leases (a page of the list), by lease id. */
export async function listCreatesOf(db: D1Database, leaseIds: readonly string[]): Promise<Map<string, CreateRecord[]>> {
  const byLease = new Map<string, CreateRecord[]>(leaseIds.map((id) => [id, []]));
  for (let i = 0; i < leaseIds.length; i += 90) {
    const chunk = leaseIds.slice(i, i + 90);
    if (chunk.length === 0) continue;
    const { results } = await db
      .prepare(`SELECT * FROM lease_creates WHERE lease_id IN (${chunk.map(() => "?").join(", ")}) ORDER BY seq`)
      .bind(...chunk)
      .all();
    for (const row of results.map(parse)) byLease.get(row.lease_id)?.push(row);
  }
  return byLease;
}

/** The ids of the leases with a create still unresolved (the account's and the dashboard's alarm). */
export async function leasesWithUnresolvedCreates(db: D1Database): Promise<string[]> {
  const { results } = await db
    .prepare("SELECT DISTINCT lease_id FROM lease_creates WHERE resolution = 'unresolved' ORDER BY lease_id")
    .all<{ lease_id: string }>();
  return results.map((r) => r.lease_id);
}

export interface NewCreate {
  provider: ProviderName;
  offer_id: string;
  sent_at: string;
  offer: CreateOffer;
}

/**
 * Write-ahead renting: records the create about to be sent, while the lease is still
 * `provisioning`. The record, or null when the lease is not (a stop arrived): then no create may be sent.
 */
export async function writeAheadCreate(
  db: D1Database,
  leaseId: string,
  create: NewCreate,
): Promise<CreateRecord | null> {
  const row = await db
    .prepare(
      `INSERT INTO lease_creates (lease_id, seq, provider, offer_id, sent_at, offer)
       SELECT ?1, COALESCE((SELECT MAX(seq) FROM lease_creates WHERE lease_id = ?1), 0) + 1, ?2, ?3, ?4, ?5
       WHERE EXISTS (SELECT 1 FROM leases WHERE id = ?1 AND status = 'provisioning')
       RETURNING *`,
    )
    .bind(leaseId, create.provider, create.offer_id, create.sent_at, JSON.stringify(create.offer))
    .first();
  return row ? parse(row) : null;
}

/** A definite answer that made nothing (no capacity, rejected), or a lookup that found nothing. */
export async function resolveNone(
  db: D1Database,
  leaseId: string,
  seq: number,
  detail: string,
  at: string,
): Promise<boolean> {
  const row = await db
    .prepare(
      `UPDATE lease_creates SET resolution = 'none', detail = ?, resolved_at = ?
       WHERE lease_id = ? AND seq = ? AND resolution = 'unresolved' RETURNING seq`,
    )
    .bind(detail, at, leaseId, seq)
    .first();
  return row !== null;
}

/** Why a create is still unresolved (an ambiguous answer, a failed or ambiguous lookup). */
export async function noteUnresolved(db: D1Database, leaseId: string, seq: number, detail: string): Promise<void> {
  await db
    .prepare("UPDATE lease_creates SET detail = ? WHERE lease_id = ? AND seq = ? AND resolution = 'unresolved'")
    .bind(detail, leaseId, seq)
    .run();
}

export interface FoundMachine {
  provider: ProviderName;
  ref: string;
  /** the provider's price, when its answer or listing gave one */
  price_per_hour: number | null;
  /** when billing started: the machine's creation if known, else the create's sending */
  billed_from: string;
  detail: string;
  /** the provider's currency (a found machine has no offer that says it) */
  currency: Currency;
}

export type ClaimOutcome =
  | { kind: "claimed"; create: CreateRecord }
  /** already on record for this lease (by this create or another) */
  | { kind: "known"; create: CreateRecord }
  /** another lease's create holds this machine: never claimed twice */
  | { kind: "other_lease"; leaseId: string };

/**
 * Records that a machine belongs to this lease, once: on create `seq` when given and still
 * unresolved, else on the lease's earliest unresolved create at that provider (a labelled
 * listing cannot tell which of two creates made which machine), else as a create record of its
 * own (origin `found`). One batch (one transaction), each step guarded by "no record has this
 * machine yet", so two writers racing claim it once.
 */
export async function claimMachine(
  db: D1Database,
  leaseId: string,
  machine: FoundMachine,
  at: string,
  seq: number | null,
): Promise<ClaimOutcome> {
  // The holder is read in the same batch, after the claim: one round trip, and what it reads is
  // what the claim left.
  const results = await db.batch([
    ...claimStatements(db, leaseId, machine, at, seq),
    db
      .prepare("SELECT * FROM lease_creates WHERE provider = ? AND provider_ref = ?")
      .bind(machine.provider, machine.ref),
  ]);
  const written = results.slice(0, -1);
  const create = parse(results.at(-1)?.results[0] ?? null);
  if (create.lease_id !== leaseId) return { kind: "other_lease", leaseId: create.lease_id };
  const claimed = written.some((result) => (result.meta.changes ?? 0) > 0);
  return { kind: claimed ? "claimed" : "known", create };
}

/**
 * The statements of claimMachine, each guarded by "no record has this machine yet": for a caller
 * that writes the claim in one batch with what goes with it (the keeper's claim and reopen).
 */
export function claimStatements(
  db: D1Database,
  leaseId: string,
  machine: FoundMachine,
  at: string,
  seq: number | null,
): D1PreparedStatement[] {
  const unclaimed = "NOT EXISTS (SELECT 1 FROM lease_creates WHERE provider = ?2 AND provider_ref = ?3)";
  const set = `resolution = 'machine', provider_ref = ?3, price_per_hour = COALESCE(?4, json_extract(offer, '$.price_per_hour')),
    billed_from = ?5, detail = ?6, resolved_at = ?7`;
  const values = [
    leaseId,
    machine.provider,
    machine.ref,
    machine.price_per_hour,
    machine.billed_from,
    machine.detail,
    at,
  ];
  return [
    db
      .prepare(
        `UPDATE lease_creates SET ${set} WHERE lease_id = ?1 AND seq = ?8 AND resolution = 'unresolved' AND ${unclaimed}`,
      )
      .bind(...values, seq ?? -1),
    db
      .prepare(
        `UPDATE lease_creates SET ${set} WHERE lease_id = ?1 AND ${unclaimed} AND seq = (
           SELECT MIN(seq) FROM lease_creates WHERE lease_id = ?1 AND provider = ?2 AND resolution = 'unresolved')`,
      )
      .bind(...values),
    db
      .prepare(
        `INSERT INTO lease_creates (lease_id, seq, provider, offer_id, sent_at, origin, offer, resolution, detail,
           provider_ref, price_per_hour, billed_from, resolved_at)
         SELECT ?1, COALESCE((SELECT MAX(seq) FROM lease_creates WHERE lease_id = ?1), 0) + 1, ?2, ?2 || ':found', ?7,
           'found', json_object('currency', ?8), 'machine', ?6, ?3, ?4, ?5, ?7
         WHERE ${unclaimed}`,
      )
      .bind(...values, machine.currency),
  ];
}

/** The teardown state of a machine that is not its lease's current one. */
export interface StrayPatch {
  terminate_sent_at?: string;
  terminates_sent?: number;
  gone_reads?: number;
  gone_at?: string | null;
  cost?: number;
  price_per_hour?: number;
  checked_at?: string;
  unverified_at?: string;
}

export function strayUpdateStatement(
  db: D1Database,
  leaseId: string,
  seq: number,
  patch: StrayPatch,
): D1PreparedStatement | null {
  const entries = Object.entries(patch).filter(([, value]) => value !== undefined);
  if (entries.length === 0) return null;
  return db
    .prepare(`UPDATE lease_creates SET ${entries.map(([c]) => `${c} = ?`).join(", ")} WHERE lease_id = ? AND seq = ?`)
    .bind(...entries.map(([, v]) => v as unknown), leaseId, seq);
}

/** Machines of this provider some record already holds (after `since`): never another create's. */
export async function knownRefs(db: D1Database, provider: ProviderName, since: string): Promise<string[]> {
  const { results } = await db
    .prepare(
      `SELECT provider_ref FROM lease_creates WHERE provider = ?1 AND provider_ref IS NOT NULL AND sent_at >= ?2
       UNION SELECT provider_ref FROM leases WHERE provider = ?1 AND provider_ref IS NOT NULL AND created_at >= ?2`,
    )
    .bind(provider, since)
    .all<{ provider_ref: string }>();
  return results.map((r) => r.provider_ref);
}

/**
 * Other leases' creates still unresolved at this provider, for the same offer and image, sent
 * after `since`: any machine that fits this create's fingerprint could be theirs. `older`: how
 * many of them were sent before this create (the order servers are shared out in).
 */
export async function competingCreates(
  db: D1Database,
  create: Pick<CreateRecord, "lease_id" | "provider" | "offer_id" | "offer" | "sent_at">,
  since: string,
): Promise<{ count: number; older: number }> {
  const row = await db
    .prepare(
      `SELECT COUNT(*) AS n,
              COALESCE(SUM(CASE WHEN sent_at < ?6 OR (sent_at = ?6 AND lease_id < ?3) THEN 1 ELSE 0 END), 0) AS older
         FROM lease_creates WHERE provider = ?1 AND offer_id = ?2 AND lease_id != ?3
         AND resolution = 'unresolved' AND sent_at >= ?4 AND COALESCE(json_extract(offer, '$.image'), '') = ?5`,
    )
    .bind(create.provider, create.offer_id, create.lease_id, since, create.offer.image ?? "", create.sent_at)
    .first<{ n: number; older: number }>();
  return { count: row?.n ?? 0, older: row?.older ?? 0 };
}
