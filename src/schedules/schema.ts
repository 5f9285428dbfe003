import { z } from "@hono/zod-openapi";
import { LeaseInputSchema, LeaseStatusSchema } from "../leases/schema";
import { parseCron } from "./cron";

const NameSchema = z.string().trim().min(1).max(100);
const CronExpressionSchema = z
  .string()
  .trim()
  .min(1)
  .max(200)
  .openapi({ description: "five fields: minute hour day-of-month month day-of-week", example: "0 2 * * *" });
const TimezoneSchema = z
  .string()
  .trim()
  .min(1)
  .max(64)
  .openapi({ description: "IANA time zone the cron is read in; daylight saving handled", example: "Europe/Berlin" });

/** Adds a 400 issue for an expression or zone croner refuses. */
function checkCron(
  value: { cron?: string; timezone?: string },
  ctx: z.RefinementCtx,
  current?: { cron: string; timezone: string },
) {
  const cron = value.cron ?? current?.cron;
  const timezone = value.timezone ?? current?.timezone ?? "UTC";
  if (cron === undefined) return;
  const parsed = parseCron(cron, timezone);
  if ("field" in parsed) ctx.addIssue({ code: "custom", path: [parsed.field], message: parsed.message });
}

/** The body of POST /v1/schedules. */
export const ScheduleInputSchema = z
  .strictObject({
    name: NameSchema,
    cron: CronExpressionSchema,
    timezone: TimezoneSchema.default("UTC"),
    enabled: z.boolean().default(true),
    lease: LeaseInputSchema.openapi({ description: "the POST /v1/leases body each run rents with" }),
  })
  .superRefine((value, ctx) => checkCron(value, ctx))
  .openapi("ScheduleInput");

/** The body of PATCH /v1/schedules/{id}: any field; `lease` replaces the whole lease body. */
export const SchedulePatchSchema = z
  .strictObject({
    name: NameSchema.optional(),
    cron: CronExpressionSchema.optional(),
    timezone: TimezoneSchema.optional(),
    enabled: z.boolean().optional(),
    lease: LeaseInputSchema.optional(),
  })
  .openapi("SchedulePatch");
export type SchedulePatch = z.infer<typeof SchedulePatchSchema>;

/** Validates a patch's cron against the stored one (a new zone alone can make a cron invalid). */
export function cronPatchProblem(patch: SchedulePatch, current: { cron: string; timezone: string }): z.ZodError | null {
  const result = z
    .object({ cron: z.string().optional(), timezone: z.string().optional() })
    .superRefine((value, ctx) => checkCron(value, ctx, current))
    .safeParse({ cron: patch.cron, timezone: patch.timezone });
  return result.success ? null : result.error;
}

export const RunStatusSchema = z
  .enum(["claimed", "started", "skipped", "retrying", "failed"])
  .openapi("ScheduleRunStatus");

/** One due time of a schedule and what became of it. */
export const ScheduleRunSchema = z
  .object({
    due_at: z.string(),
    status: RunStatusSchema,
    lease_id: z.string().nullable(),
    detail: z.string().nullable().openapi({ description: "why it was skipped, failed or is retrying" }),
    attempts: z.number().int(),
    created_at: z.string(),
    updated_at: z.string(),
    lease: z
      .object({
        status: LeaseStatusSchema,
        error: z.string().nullable(),
        cost_usd: z.number().openapi({ description: "what the lease has cost so far, USD" }),
        minutes: z.number().openapi({ description: "billed minutes so far, from the rental to its stop (or now)" }),
      })
      .nullable()
      .openapi({ description: "the run's lease, once it started one" }),
  })
  .openapi("ScheduleRun");
export type ScheduleRun = z.infer<typeof ScheduleRunSchema>;

export const ExpectedCostSchema = z
  .object({
    amount_usd: z.number().openapi({ description: "price × max_minutes, capped by max_cost" }),
    offer_id: z.string(),
    provider: z.string(),
    gpu: z.string(),
    price_per_hour_usd: z.number(),
  })
  .openapi("ExpectedCost");
export type ExpectedCost = z.infer<typeof ExpectedCostSchema>;

export const ScheduleSchema = z
  .object({
    id: z.string().openapi({ example: "sch_01jb3k7q2m9x4v8n6c5t0w" }),
    name: z.string(),
    cron: z.string(),
    timezone: z.string(),
    enabled: z.boolean(),
    lease: LeaseInputSchema,
    next_run_at: z.string().nullable(),
    last_run_at: z.string().nullable().openapi({ description: "when the last lease was started" }),
    last_lease_id: z.string().nullable(),
    last_skip: z
      .object({ due_at: z.string(), status: z.enum(["skipped", "failed", "retrying"]), detail: z.string().nullable() })
      .nullable()
      .openapi({ description: "the newest run that did not start a lease (skipped, failed, or retrying now)" }),
    created_at: z.string(),
    updated_at: z.string(),
    expected_cost: ExpectedCostSchema.nullable().optional().openapi({
      description:
        "GET /v1/schedules/{id} only: the worst case of a run at tonight's best offer; null when none matches",
    }),
  })
  .openapi("Schedule");
export type Schedule = z.infer<typeof ScheduleSchema>;

export const ScheduleListSchema = z.object({ schedules: z.array(ScheduleSchema) }).openapi("ScheduleList");
export const ScheduleRunListSchema = z.object({ runs: z.array(ScheduleRunSchema) }).openapi("ScheduleRunList");
