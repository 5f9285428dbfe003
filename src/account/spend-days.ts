import { z } from "@hono/zod-openapi";
import type { BillingDay } from "../billing/report";

const DAY_MS = 86_400_000;

export const SpendDaySchema = z
  .object({
    day: z.string().openapi({ description: "UTC day, YYYY-MM-DD", example: "2026-11-29" }),
    providers: z
      .record(z.string(), z.number())
      .openapi({ description: "the ledger's spend that day per provider, USD (providers with none left out)" }),
    total: z.number().openapi({ description: "the ledger's spend that day, USD" }),
    billed: z.number().nullable().openapi({
      description: "what the providers that report a bill per machine billed that day, USD; null where none has (yet)",
    }),
  })
  .openapi("SpendDay");
export type SpendDay = z.infer<typeof SpendDaySchema>;

export const AccountSpendSchema = z
  .object({
    days: z.array(SpendDaySchema).openapi({ description: "every UTC day of the window, oldest first, today last" }),
    currency: z.literal("USD"),
    budget: z.object({ daily: z.number().nullable() }),
  })
  .openapi("AccountSpend");
export type AccountSpend = z.infer<typeof AccountSpendSchema>;

const round = (value: number) => Math.round(value * 1e4) / 1e4;

/**
 * The per provider and day rows of billingByDay as one entry per UTC day of the `days` ending
 * today, oldest first, days without spend included (zero), so a chart has every day to draw.
 */
export function spendDays(rows: readonly BillingDay[], now: number, days: number): SpendDay[] {
  const today = Math.floor(now / DAY_MS) * DAY_MS;
  const byDay = new Map<string, SpendDay>();
  for (let i = days - 1; i >= 0; i--) {
    const day = new Date(today - i * DAY_MS).toISOString().slice(0, 10);
    byDay.set(day, { day, providers: {}, total: 0, billed: null });
  }
  for (const row of rows) {
    const entry = byDay.get(row.day);
    if (!entry) continue;
    if (row.ledger > 0) {
      entry.providers[row.provider] = round((entry.providers[row.provider] ?? 0) + row.ledger);
      entry.total += row.ledger;
    }
    if (row.billed !== null) entry.billed = (entry.billed ?? 0) + row.billed;
  }
  return [...byDay.values()].map((d) => ({
    ...d,
    total: round(d.total),
    billed: d.billed === null ? null : round(d.billed),
  }));
}
