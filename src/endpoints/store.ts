import { z } from "@hono/zod-openapi";
import { dayStart, shareSince, spentUsd } from "../account/spend";
import { getLease, type LeaseRow } from "../leases/ledger";
import { iso, ms } from "../lib/time";
import type { EndpointInput, EndpointPatch } from "./schema";

export const EndpointRowSchema = z.object({
  id: z.string(),
  name: z.string(),
  model: z.string(),
  context_length: z.number().int().nullable(),
  min_replicas: z.number().int(),
  max_replicas: z.number().int(),
  idle_minutes: z.number().int(),
  cold_start_wait_s: z.number().int(),
  target_in_flight: z.number().int(),
  budget_daily_usd: z.number().nullable(),
  providers: z.string().nullable(),
  gpu: z.string().nullable(),
  max_price: z.number().nullable(),
  max_minutes: z.number().int(),
  key_hash: z.string(),
  token_id: z.string().nullable(),
  created_at: z.string(),
  updated_at: z.string(),
});
export type EndpointRow = z.infer<typeof EndpointRowSchema>;

const parse = (row: unknown): EndpointRow | null => (row ? EndpointRowSchema.parse(row) : null);

/** Inserts a new endpoint; false when the name is taken. */
export async function insertEndpoint(
  db: D1Database,
  row: { id: string; keyHash: string; tokenId: string | null; now: number },
  input: EndpointInput,
): Promise<boolean> {
  const at = iso(row.now);
  const result = await db
    .prepare(
      `INSERT INTO endpoints (id, name, model, context_length, min_replicas, max_replicas, idle_minutes,
         cold_start_wait_s, target_in_flight, budget_daily_usd, providers, gpu, max_price, max_minutes,
         key_hash, token_id, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING`,
    )
    .bind(
      row.id,
      input.name,
      input.model,
      input.context_length ?? null,
      input.min_replicas,
      input.max_replicas,
      input.idle_minutes,
      input.cold_start_wait_s,
      input.target_in_flight,
      input.budget_daily_usd ?? null,
      input.provider ?? null,
      input.gpu ?? null,
      input.max_price ?? null,
      input.max_minutes,
      row.keyHash,
      row.tokenId,
      at,
      at,
    )
    .run();
  return result.meta.changes === 1;
}

export async function getEndpointByName(db: D1Database, name: string): Promise<EndpointRow | null> {
  return parse(await db.prepare("SELECT * FROM endpoints WHERE name = ?").bind(name).first());
}

export async function getEndpointByKeyHash(db: D1Database, keyHash: string): Promise<EndpointRow | null> {
  return parse(await db.prepare("SELECT * FROM endpoints WHERE key_hash = ?").bind(keyHash).first());
}

export async function getEndpointById(db: D1Database, id: string): Promise<EndpointRow | null> {
  return parse(await db.prepare("SELECT * FROM endpoints WHERE id = ?").bind(id).first());
}

export async function listEndpoints(db: D1Database): Promise<EndpointRow[]> {
  const { results } = await db.prepare("SELECT * FROM endpoints ORDER BY name LIMIT 500").all();
  return results.map((row) => EndpointRowSchema.parse(row));
}

/**
 * Applies a PATCH in one statement guarded by the bounds the row must keep (min ≤ max with the
 * new and old values mixed); null when the endpoint is gone, "conflict" when the result would break them.
 */
export async function patchEndpoint(
  db: D1Database,
  name: string,
  patch: EndpointPatch,
  now: number,
): Promise<EndpointRow | "conflict" | null> {
  const fields = Object.entries(patch).filter(([, value]) => value !== undefined);
  const sets = fields.map(([field]) => `${field} = ?`);
  const row = await db
    .prepare(
      `UPDATE endpoints SET ${[...sets, "updated_at = ?"].join(", ")}
       WHERE name = ? AND COALESCE(?, min_replicas) <= COALESCE(?, max_replicas)
       RETURNING *`,
    )
    .bind(
      ...fields.map(([, value]) => value as number | null),
      iso(now),
      name,
      patch.min_replicas ?? null,
      patch.max_replicas ?? null,
    )
    .first();
  if (row) return parse(row);
  return (await getEndpointByName(db, name)) ? "conflict" : null;
}

/** Replaces the key's hash: the old key stops working with this write. */
/** Replaces the endpoint's key; the row as written, or null when the endpoint is gone. */
export async function setEndpointKey(
  db: D1Database,
  name: string,
  keyHash: string,
  now: number,
): Promise<EndpointRow | null> {
  return parse(
    await db
      .prepare("UPDATE endpoints SET key_hash = ?, updated_at = ? WHERE name = ? RETURNING *")
      .bind(keyHash, iso(now), name)
      .first(),
  );
}

export async function deleteEndpoint(db: D1Database, id: string): Promise<void> {
  await db.prepare("DELETE FROM endpoints WHERE id = ?").bind(id).run();
}

/** Tags a lease as a replica of the endpoint (idempotent: a retried rental tags it once). */
export async function tagReplica(db: D1Database, endpointId: string, leaseId: string, now: number): Promise<void> {
  await db
    .prepare(
      "INSERT INTO endpoint_replicas (lease_id, endpoint_id, created_at) VALUES (?, ?, ?) ON CONFLICT (lease_id) DO NOTHING",
    )
    .bind(leaseId, endpointId, iso(now))
    .run();
}

/** The leases of the endpoint's replicas, newest first: those not stopped, and those that ran today. */
export async function replicaLeasesSince(db: D1Database, endpointId: string, since: number): Promise<LeaseRow[]> {
  const { results } = await db
    .prepare(
      `SELECT r.lease_id FROM endpoint_replicas r JOIN leases l ON l.id = r.lease_id
       WHERE r.endpoint_id = ? AND (l.status != 'stopped' OR l.stopped_at IS NULL OR l.stopped_at >= ?)
       ORDER BY r.created_at DESC LIMIT 500`,
    )
    .bind(endpointId, iso(since))
    .all<{ lease_id: string }>();
  const rows = await Promise.all(results.map((row) => getLease(db, row.lease_id)));
  return rows.filter((row): row is LeaseRow => row !== null);
}

/** Today's (UTC) spend of the endpoint's replicas in USD, a lease over midnight counted by its share. */
export function spendTodayUsd(leases: readonly LeaseRow[], now: number, eurUsd: number): number {
  const day = dayStart(now);
  let total = 0;
  for (const lease of leases) {
    const from = ms(lease.rented_at ?? lease.running_at ?? lease.created_at);
    const to = Math.max(from, lease.stopped_at ? ms(lease.stopped_at) : now);
    total += shareSince(spentUsd(lease, now, eurUsd), from, to, day);
  }
  return Math.round(total * 10_000) / 10_000;
}
