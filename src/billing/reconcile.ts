import { spentUsd } from "../account/spend";
import { appendEvents, type LeaseRow, LeaseRowSchema } from "../leases/ledger";
import { scrubError } from "../lib/scrub";
import { iso, ms } from "../lib/time";
import type { Services } from "../services";

/** Leases looked at per reaper cron: each is one billing call and one D1 batch (subrequest budget). */
const LEASES_PER_RUN = 5;
/** A lease's bill is read again after this long (providers book usage with a delay). */
const RECHECK_MS = 60 * 60_000;
/** How long after a lease stopped its bill is still read. */
const SETTLE_MS = 2 * 86_400_000;
/** Drift above this share of the ledger's cost is an event. */
export const DRIFT_THRESHOLD = 0.05;

export interface ReconcileResult {
  checked: number;
  drifts: number;
  errors: string[];
}

/**
 * Reads what the provider itself billed for the ledger's leases, where it reports it per machine
 * (RunPod REST `/v2/billing/pods`, Vast.ai `/api/v0/charges/`, via the adapter's `billedDays`), and stores it per lease and UTC
 * day. A stopped lease whose bill differs from the ledger's cost by more than 5 % gets a
 * `billing_drift` event (once, when it first crosses). Called after the reaper run in the reaper
 * cron; a failed read is reported per lease, never thrown.
 */
export async function reconcileBilling(services: Services): Promise<ReconcileResult> {
  const result: ReconcileResult = { checked: 0, drifts: 0, errors: [] };
  const now = services.clock();
  const billing = billingProviders(services);
  if (billing.length === 0) return result;
  const placeholders = billing.map(() => "?").join(",");
  const { results } = await services.db
    .prepare(
      `SELECT * FROM leases
        WHERE provider IN (${placeholders}) AND provider_ref IS NOT NULL
          AND (stopped_at IS NULL OR stopped_at >= ?)
          AND (billing_checked_at IS NULL OR billing_checked_at < ?)
        ORDER BY billing_checked_at IS NOT NULL, billing_checked_at, created_at
        LIMIT ?`,
    )
    .bind(...billing, iso(now - SETTLE_MS), iso(now - RECHECK_MS), LEASES_PER_RUN)
    .all();
  for (const raw of results) {
    const lease = LeaseRowSchema.parse(raw);
    try {
      if (await reconcileLease(services, lease, now)) result.drifts++;
      result.checked++;
    } catch (error) {
      result.errors.push(`${lease.id}: ${scrubError(services.config, error, "billing read failed")}`);
    }
  }
  return result;
}

function billingProviders(services: Services): string[] {
  return services.providers.configured().flatMap((p) => (p.billedDays ? [p.name] : []));
}

async function reconcileLease(services: Services, lease: LeaseRow, now: number): Promise<boolean> {
  const provider = services.providers.get(lease.provider!);
  if (!provider?.billedDays || !lease.provider_ref) return false;
  const from = lease.rented_at ?? lease.created_at;
  const to = iso(Math.max(now, ms(from)));
  const days = await provider.billedDays(lease.provider_ref, from, to);
  const billed = Math.round(days.reduce((sum, d) => sum + d.amount, 0) * 1e6) / 1e6;
  const checkedAt = iso(now);
  const currency = lease.currency ?? provider.currency;
  const statements = days.map((d) =>
    services.db
      .prepare(
        `INSERT INTO lease_billing (lease_id, provider, day, billed, currency, checked_at) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (lease_id, day) DO UPDATE SET billed = excluded.billed, checked_at = excluded.checked_at`,
      )
      .bind(lease.id, provider.name, d.day, d.amount, currency, checkedAt),
  );
  statements.push(
    services.db
      .prepare("UPDATE leases SET billed = ?, billing_checked_at = ? WHERE id = ?")
      .bind(billed, checkedAt, lease.id),
  );
  await services.db.batch(statements);

  // Only a stopped lease's cost is final: a running pod's bill trails its meter.
  if (lease.status !== "stopped") return false;
  const ledger = spentUsd(lease, now, services.config.eurUsd);
  const drifted = (amount: number | null | undefined) =>
    amount != null && ledger > 0 && Math.abs(amount - ledger) / ledger > DRIFT_THRESHOLD;
  if (!drifted(billed) || drifted(lease.billed)) return false;
  await appendEvents(services.db, lease.id, checkedAt, [
    {
      kind: "billing_drift",
      detail: `${provider.name} billed ${billed.toFixed(4)} ${currency}, the ledger counted ${ledger.toFixed(4)} (${(((billed - ledger) / ledger) * 100).toFixed(1)} %)`,
    },
  ]);
  return true;
}
