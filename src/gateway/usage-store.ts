import { z } from "@hono/zod-openapi";
import type { MeterState } from "../keeper/meter";
import { type LeaseRow, leaseCost } from "../leases/ledger";
import { toUsd } from "../leases/pricing";
import { median } from "./usage";

/** A lease's usage as the API shows it (`usage` on the lease; null before the first request). */
export const LeaseUsageSchema = z
  .object({
    requests: z.number().int(),
    errors: z.number().int(),
    prompt_tokens: z.number().int(),
    completion_tokens: z.number().int(),
    decode_tokens_per_s: z.number().nullable().openapi({ description: "median over recent requests" }),
    first_token_ms: z.number().nullable().openapi({ description: "median over recent requests" }),
    usd_per_million_tokens: z
      .number()
      .nullable()
      .openapi({ description: "the lease's cost so far ÷ its tokens (prompt + completion), per million" }),
    dropped_answers: z.number().int().openapi({
      description: "answers whose token counts were not plausible (not whole, negative, absurd): not added above",
    }),
    unparsed_lines: z.number().int().openapi({
      description: "answer lines or SSE events over the gateway's bound (256 Ki characters), passed on unread",
    }),
  })
  .openapi("LeaseUsage");
export type LeaseUsage = z.infer<typeof LeaseUsageSchema>;

const UsageRowSchema = z.object({
  requests: z.number().int(),
  errors: z.number().int(),
  prompt_tokens: z.number().int(),
  completion_tokens: z.number().int(),
  decode_tokens_per_s: z.number().nullable(),
  first_token_ms: z.number().nullable(),
  dropped_answers: z.number().int(),
  unparsed_lines: z.number().int(),
});
export type UsageRow = z.infer<typeof UsageRowSchema>;

/**
 * One upsert: the meter's totals and medians (the keeper calls it at most every few seconds). Two
 * of a lease's writes can be in flight at once (a request's flush and the alarm's) and land in
 * either order: the guard keeps the later totals, so a slower, older write never lowers the count.
 */
export function flushStatement(db: D1Database, leaseId: string, meter: MeterState, at: string): D1PreparedStatement {
  return db
    .prepare(
      `INSERT INTO lease_usage (lease_id, requests, errors, prompt_tokens, completion_tokens,
         decode_tokens_per_s, first_token_ms, dropped_answers, unparsed_lines, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (lease_id) DO UPDATE SET requests = excluded.requests, errors = excluded.errors,
         prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens,
         decode_tokens_per_s = excluded.decode_tokens_per_s, first_token_ms = excluded.first_token_ms,
         dropped_answers = excluded.dropped_answers, unparsed_lines = excluded.unparsed_lines,
         updated_at = excluded.updated_at
       WHERE excluded.requests >= lease_usage.requests
         AND excluded.dropped_answers >= lease_usage.dropped_answers
         AND excluded.unparsed_lines >= lease_usage.unparsed_lines`,
    )
    .bind(
      leaseId,
      meter.requests,
      meter.errors,
      meter.prompt_tokens,
      meter.completion_tokens,
      median(meter.decode),
      median(meter.first),
      meter.dropped,
      meter.unparsed ?? 0,
      at,
    );
}

export async function getUsage(db: D1Database, leaseId: string): Promise<UsageRow | null> {
  const row = await db
    .prepare(
      "SELECT requests, errors, prompt_tokens, completion_tokens, decode_tokens_per_s, first_token_ms, dropped_answers, unparsed_lines FROM lease_usage WHERE lease_id = ?",
    )
    .bind(leaseId)
    .first();
  return row ? UsageRowSchema.parse(row) : null;
}

/**
 * The usage view: the row, and the cost per million tokens from the lease's own `cost` (the
 * figure shown beside it, in USD), so the two never disagree.
 */
export function usageView(row: UsageRow | null, lease: LeaseRow, eurUsd: number): LeaseUsage | null {
  if (!row) return null;
  const costUsd = toUsd(leaseCost(lease), lease.currency, eurUsd);
  const tokens = row.prompt_tokens + row.completion_tokens;
  return {
    ...row,
    usd_per_million_tokens: tokens > 0 ? Math.round((costUsd / tokens) * 1e6 * 10_000) / 10_000 : null,
  };
}
