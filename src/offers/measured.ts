import { z } from "zod";
import { iso, ms } from "../lib/time";
import { vendorBandwidthGbs } from "../providers/gpus";
import { ProviderNameSchema } from "../providers/types";
import { type MeasuredFigure, measuredKey, multiGpuFactor } from "./bandwidth";

/** Samples older than this neither rank nor show: hosts change drivers, neighbours and cooling. */
export const MEASURED_WINDOW_MS = 30 * 86_400_000;
/** Old samples deleted per recorded one: enough to keep up, small enough for any write. */
const PRUNE_BATCH = 100;
/** Newest samples read per listing; one a lease keeps it far below this. */
const READ_LIMIT = 10_000;

/** What a metered lease delivered: decode tokens/s × model size, over all its cards. */
export const BandwidthSampleSchema = z.object({
  provider: ProviderNameSchema,
  /** the lease's GPU display name, as its offer showed it */
  gpu: z.string().trim().min(1),
  gpu_count: z.number().int().positive(),
  /** offerHost() of the rented offer; null where the provider names no host */
  host: z.string().min(1).nullable(),
  /** GB/s over all cards */
  gbs: z.number().positive(),
  at: z.iso.datetime({ offset: true }),
  /** the lease measured: its later samples replace this one, so a sample is one lease */
  lease_id: z.string().min(1).optional(),
});
export type BandwidthSample = z.input<typeof BandwidthSampleSchema>;

/**
 * How far above the card's vendor bandwidth a per-card figure may be and still count: the bytes
 * read per token are an estimate (quantisation blocks, the KV cache's fill), not a measurement.
 */
export const VENDOR_TOLERANCE = 1.2;

/** Why a sample was not recorded: counted per reason in `bandwidth_rejects`. */
export type SampleRejection = "above_vendor_bandwidth";

/** pure: why a per-card figure cannot be what the card delivered, or null when it can. */
export function implausible(gpu: string, perCardGbs: number): SampleRejection | null {
  const vendor = vendorBandwidthGbs(gpu);
  return vendor !== null && perCardGbs > vendor * VENDOR_TOLERANCE ? "above_vendor_bandwidth" : null;
}

/**
 * Records one sample and prunes a bounded batch of samples past the window, in one round trip.
 * A lease that decoded nothing measured nothing: a `gbs` that is not a positive number is not
 * recorded (false). Nor is a figure beyond the card's vendor bandwidth × VENDOR_TOLERANCE: it is
 * counted by reason (`bandwidth_rejects`) and dropped, and the lease's earlier sample with it.
 */
export async function recordBandwidthSample(db: D1Database, input: BandwidthSample): Promise<boolean> {
  if (!(Number.isFinite(input.gbs) && input.gbs > 0)) return false;
  const sample = BandwidthSampleSchema.parse(input);
  const at = ms(sample.at);
  const perCard = sample.gbs / multiGpuFactor(sample.gpu_count);
  const rejection = implausible(sample.gpu, perCard);
  if (rejection) {
    await db.batch([
      db
        .prepare(
          `INSERT INTO bandwidth_rejects (reason, count, last_at, last_provider, last_gpu, last_gbs)
           VALUES (?1, 1, ?2, ?3, ?4, ?5)
           ON CONFLICT (reason) DO UPDATE SET count = count + 1, last_at = excluded.last_at,
             last_provider = excluded.last_provider, last_gpu = excluded.last_gpu, last_gbs = excluded.last_gbs`,
        )
        .bind(rejection, iso(at), sample.provider, sample.gpu, perCard),
      db.prepare("DELETE FROM bandwidth_samples WHERE lease_id = ?1").bind(sample.lease_id ?? null),
    ]);
    return false;
  }
  await db.batch([
    db
      .prepare(
        `INSERT INTO bandwidth_samples (provider, gpu, host, gpu_count, gbs, per_card_gbs, lease_id, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (lease_id) DO UPDATE SET
           provider = excluded.provider, gpu = excluded.gpu, host = excluded.host,
           gpu_count = excluded.gpu_count, gbs = excluded.gbs, per_card_gbs = excluded.per_card_gbs,
           at = excluded.at`,
      )
      .bind(
        sample.provider,
        sample.gpu,
        sample.host,
        sample.gpu_count,
        sample.gbs,
        perCard,
        sample.lease_id ?? null,
        iso(at),
      ),
    db
      .prepare(
        `DELETE FROM bandwidth_samples WHERE id IN
           (SELECT id FROM bandwidth_samples WHERE at < ?1 ORDER BY at LIMIT ${PRUNE_BATCH})`,
      )
      .bind(iso(at - MEASURED_WINDOW_MS)),
  ]);
  return true;
}

/**
 * Median per-card bandwidth of the last 30 days for every provider and GPU (measuredKey without
 * a host: all its samples) and every host that has samples (measuredKey with the host), read in
 * one query for all offers.
 */
/** Samples dropped so far, by reason (the offers' operator view and tests). */
export async function bandwidthRejects(db: D1Database): Promise<Partial<Record<SampleRejection, number>>> {
  const { results } = await db
    .prepare("SELECT reason, count FROM bandwidth_rejects")
    .all<{ reason: SampleRejection; count: number }>();
  return Object.fromEntries(results.map((r) => [r.reason, r.count]));
}

export async function measuredBandwidth(db: D1Database, now: number): Promise<Map<string, MeasuredFigure>> {
  const { results } = await db
    .prepare(
      `SELECT provider, gpu, host, per_card_gbs FROM bandwidth_samples
       WHERE at >= ?1 ORDER BY at DESC LIMIT ${READ_LIMIT}`,
    )
    .bind(iso(now - MEASURED_WINDOW_MS))
    .all<{ provider: string; gpu: string; host: string | null; per_card_gbs: number }>();
  const groups = new Map<string, number[]>();
  const add = (key: string, value: number) => {
    const values = groups.get(key);
    if (values) values.push(value);
    else groups.set(key, [value]);
  };
  for (const row of results) {
    const provider = ProviderNameSchema.safeParse(row.provider);
    if (!provider.success) continue;
    add(measuredKey(provider.data, row.gpu), row.per_card_gbs);
    if (row.host !== null) add(measuredKey(provider.data, row.gpu, row.host), row.per_card_gbs);
  }
  const figures = new Map<string, MeasuredFigure>();
  for (const [key, values] of groups) figures.set(key, { gbs: median(values), samples: values.length });
  return figures;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
