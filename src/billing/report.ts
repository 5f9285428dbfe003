import { z } from "@hono/zod-openapi";
import { dayStart, spentUsd } from "../account/spend";
import { LeaseRowSchema } from "../leases/ledger";
import { iso, ms } from "../lib/time";
import { ProviderNameSchema } from "../providers/types";
import type { Services } from "../services";

const DAY_MS = 86_400_000;
/** UTC days GET /v1/account shows, today included. */
const DAYS_SHOWN = 30;

export const BillingDaySchema = z
  .object({
    provider: ProviderNameSchema,
    day: z.string().openapi({ description: "UTC day, YYYY-MM-DD" }),
    ledger: z.number().openapi({ description: "what the ledger counted for that day, USD" }),
    billed: z
      .number()
      .nullable()
      .openapi({ description: "what the provider says it billed, USD; null where it reports none per machine" }),
    drift: z.number().nullable().openapi({ description: "billed − ledger" }),
    currency: z.literal("USD"),
  })
  .openapi("BillingDay");
export type BillingDay = z.infer<typeof BillingDaySchema>;

const round = (value: number) => Math.round(value * 1e4) / 1e4;

/**
 * Per provider and UTC day of the last `days` (today included): the ledger's spend (a lease running over midnight
 * counts pro rata to each day) beside what the provider billed where it reports it per machine
 * (stored by reconcile.ts); `billed: null` where the provider reports none or it was not read yet.
 */
export async function billingByDay(services: Services, days = DAYS_SHOWN): Promise<BillingDay[]> {
  const now = services.clock();
  const since = dayStart(now) - (days - 1) * DAY_MS;
  const [leases, billed] = await Promise.all([
    services.db
      .prepare("SELECT * FROM leases WHERE provider IS NOT NULL AND (stopped_at IS NULL OR stopped_at >= ?)")
      .bind(iso(since))
      .all(),
    services.db
      .prepare("SELECT provider, day, SUM(billed) AS billed FROM lease_billing WHERE day >= ? GROUP BY provider, day")
      .bind(iso(since).slice(0, 10))
      .all<{ provider: string; day: string; billed: number }>(),
  ]);
  const rows = new Map<string, BillingDay>();
  const row = (provider: BillingDay["provider"], day: string): BillingDay => {
    const key = `${provider}|${day}`;
    let entry = rows.get(key);
    if (!entry) {
      entry = { provider, day, ledger: 0, billed: null, drift: null, currency: "USD" };
      rows.set(key, entry);
    }
    return entry;
  };
  for (const raw of leases.results) {
    const lease = LeaseRowSchema.parse(raw);
    const amount = spentUsd(lease, now, services.config.eurUsd);
    if (amount <= 0 || !lease.provider) continue;
    const from = ms(lease.rented_at ?? lease.running_at ?? lease.created_at);
    const to = Math.max(from, lease.stopped_at ? ms(lease.stopped_at) : now);
    for (let day = Math.floor(from / DAY_MS) * DAY_MS; day <= to; day += DAY_MS) {
      if (day < since) continue;
      const overlap = to === from ? 1 : Math.max(0, Math.min(to, day + DAY_MS) - Math.max(from, day)) / (to - from);
      if (overlap > 0) row(lease.provider, iso(day).slice(0, 10)).ledger += amount * overlap;
    }
  }
  for (const entry of billed.results) {
    const provider = ProviderNameSchema.safeParse(entry.provider);
    if (provider.success) row(provider.data, entry.day).billed = entry.billed;
  }
  return [...rows.values()]
    .map((r) => ({
      ...r,
      ledger: round(r.ledger),
      billed: r.billed === null ? null : round(r.billed),
      drift: r.billed === null ? null : round(r.billed - r.ledger),
    }))
    .sort((a, b) => (a.day === b.day ? a.provider.localeCompare(b.provider) : a.day < b.day ? 1 : -1));
}
