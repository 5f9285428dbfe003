import { type CreateRecord, isStray, listCreates } from "../leases/create-records";
import { appendEvents, type LeaseRow, LeaseRowSchema } from "../leases/ledger";
import { toUsd } from "../leases/pricing";
import { scrubError } from "../lib/scrub";
import { iso, ms } from "../lib/time";
import type { Currency, Provider } from "../providers/types";
import type { Services } from "../services";

/** Leases looked at per reaper cron: each is one billing call and one D1 batch (subrequest budget). */
const LEASES_PER_RUN = 5;
/** A lease's bill is read again after this long (providers book usage with a delay). */
const RECHECK_MS = 60 * 60_000;
/** How long after a lease stopped its bill is still read. */
const SETTLE_MS = 2 * 86_400_000;
/** Drift above this share of the ledger's cost is an event. */
export const DRIFT_THRESHOLD = 0.05;
/** A stopped lease's bill is final this long after its stop: providers book usage with a delay. */
const FINAL_AFTER_MS = 60 * 60_000;
/** Bill and ledger this close (USD) are never drift, whatever the share. */
const MIN_DRIFT_USD = 0.01;

export interface ReconcileResult {
  checked: number;
  drifts: number;
  errors: string[];
}

/**
 * Reads what the providers themselves billed for the ledger's leases, where they report it per
 * machine (RunPod REST `/v2/billing/pods`, Vast.ai `/api/v0/charges/`, via the adapter's
 * `billedDays`), for every machine of the lease (its own and the other machines its creates made),
 * and stores it per lease and UTC day. Once the bill is final (FINAL_AFTER_MS after the lease
 * stopped), every billed machine's bill is compared with the same machines' ledger cost: a drift
 * of more than 5 % either way gets one `billing_drift` event. Called after the reaper run in the
 * reaper cron; a failed read is reported per lease, never thrown.
 */
export async function reconcileBilling(services: Services): Promise<ReconcileResult> {
  const result: ReconcileResult = { checked: 0, drifts: 0, errors: [] };
  const now = services.clock();
  const billing = billingProviders(services);
  if (billing.length === 0) return result;
  const placeholders = billing.map((_, i) => `?${i + 1}`).join(",");
  const n = billing.length;
  const { results } = await services.db
    .prepare(
      `SELECT * FROM leases
        WHERE ((provider IN (${placeholders}) AND provider_ref IS NOT NULL)
               OR EXISTS (SELECT 1 FROM lease_creates c WHERE c.lease_id = leases.id
                            AND c.provider IN (${placeholders}) AND c.provider_ref IS NOT NULL))
          AND (stopped_at IS NULL OR stopped_at >= ?${n + 1})
          AND (billing_checked_at IS NULL OR billing_checked_at < ?${n + 2})
        ORDER BY billing_checked_at IS NOT NULL, billing_checked_at, created_at
        LIMIT ?${n + 3}`,
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

/** One machine of a lease whose provider reports a bill per machine, with its ledger cost in USD. */
interface BilledMachine {
  provider: Provider;
  ref: string;
  from: string;
  currency: Currency;
  ledgerUsd: number;
}

/** Every machine of the lease, its own and its strays, at a provider that bills per machine. */
function billedMachines(services: Services, lease: LeaseRow, creates: readonly CreateRecord[]): BilledMachine[] {
  const eurUsd = services.config.eurUsd;
  const machines: BilledMachine[] = [];
  const own = lease.provider ? services.providers.get(lease.provider) : null;
  if (own?.billedDays && lease.provider_ref) {
    const currency = lease.currency ?? own.currency;
    machines.push({
      provider: own,
      ref: lease.provider_ref,
      from: lease.rented_at ?? lease.created_at,
      currency,
      ledgerUsd: toUsd(lease.cost, currency, eurUsd),
    });
  }
  for (const create of creates) {
    if (!isStray(lease, create)) continue;
    const provider = services.providers.get(create.provider);
    if (!provider?.billedDays || !create.provider_ref) continue;
    const currency = create.offer.currency ?? provider.currency;
    machines.push({
      provider,
      ref: create.provider_ref,
      from: create.billed_from ?? create.sent_at,
      currency,
      ledgerUsd: toUsd(create.cost, currency, eurUsd),
    });
  }
  return machines;
}

async function reconcileLease(services: Services, lease: LeaseRow, now: number): Promise<boolean> {
  const eurUsd = services.config.eurUsd;
  const machines = billedMachines(services, lease, await listCreates(services.db, lease.id));
  const currency: Currency = lease.currency ?? machines[0]?.currency ?? "USD";
  const inLeaseCurrency = (usd: number) => (currency === "EUR" ? usd / eurUsd : usd);
  // Per UTC day, over every machine, in the lease's currency.
  const byDay = new Map<string, number>();
  let billedUsd = 0;
  for (const machine of machines) {
    const days = await machine.provider.billedDays!(machine.ref, machine.from, iso(Math.max(now, ms(machine.from))));
    for (const d of days) {
      const usd = toUsd(d.amount, machine.currency, eurUsd);
      billedUsd += usd;
      byDay.set(d.day, (byDay.get(d.day) ?? 0) + inLeaseCurrency(usd));
    }
  }
  const billed = round(inLeaseCurrency(billedUsd));
  const checkedAt = iso(now);
  const provider = machines[0]?.provider.name ?? lease.provider;
  const statements = [...byDay].map(([day, amount]) =>
    services.db
      .prepare(
        `INSERT INTO lease_billing (lease_id, provider, day, billed, currency, checked_at) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (lease_id, day) DO UPDATE SET billed = excluded.billed, checked_at = excluded.checked_at`,
      )
      .bind(lease.id, provider, day, round(amount), currency, checkedAt),
  );
  statements.push(
    services.db
      .prepare("UPDATE leases SET billed = ?, billing_checked_at = ? WHERE id = ?")
      .bind(machines.length > 0 ? billed : null, checkedAt, lease.id),
  );
  await services.db.batch(statements);

  // Only a stopped lease's bill is final, and only once the providers have booked it.
  if (machines.length === 0 || lease.status !== "stopped" || !lease.stopped_at) return false;
  if (now - ms(lease.stopped_at) < FINAL_AFTER_MS) return false;
  const ledgerUsd = machines.reduce((sum, m) => sum + m.ledgerUsd, 0);
  if (!drifted(billedUsd, ledgerUsd)) return false;
  const announced = await services.db
    .prepare("SELECT 1 AS x FROM lease_events WHERE lease_id = ? AND kind = 'billing_drift' LIMIT 1")
    .bind(lease.id)
    .first();
  if (announced) return false;
  const ledger = inLeaseCurrency(ledgerUsd);
  const share = ledger > 0 ? `${signed(((billed - ledger) / ledger) * 100)} %` : "the ledger counted nothing";
  const names = [...new Set(machines.map((m) => m.provider.name))].join(" and ");
  const count = machines.length === 1 ? "its machine" : `its ${machines.length} machines`;
  await appendEvents(services.db, lease.id, checkedAt, [
    {
      kind: "billing_drift",
      detail: `${names} billed ${billed.toFixed(4)} ${currency} for ${count}, the ledger counted ${ledger.toFixed(4)} (${share})`,
    },
  ]);
  return true;
}

/**
 * More than DRIFT_THRESHOLD apart, either way, and by more than a cent (providers bill in cents:
 * a few seconds of teardown on a one-minute lease is not drift); a bill for machines the ledger
 * counted nothing for too.
 */
function drifted(billedUsd: number, ledgerUsd: number): boolean {
  const apart = Math.abs(billedUsd - ledgerUsd);
  if (apart <= MIN_DRIFT_USD) return false;
  return ledgerUsd <= 0 || apart / ledgerUsd > DRIFT_THRESHOLD;
}

const round = (amount: number) => Math.round(amount * 1e6) / 1e6;
const signed = (value: number) => `${value >= 0 ? "+" : ""}${value.toFixed(1)}`;
