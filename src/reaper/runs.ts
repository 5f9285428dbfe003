import { z } from "@hono/zod-openapi";
import { ProviderNameSchema } from "../providers/types";
import { actionKinds } from "./plan";

export const ReaperProviderSchema = z
  .object({
    provider: ProviderNameSchema,
    listed: z
      .number()
      .int()
      .nullable()
      .openapi({ description: "machines in its own listing; null when the listing failed" }),
    ignored: z
      .number()
      .int()
      .optional()
      .openapi({ description: "listed machines left alone: not ours (no label of ours) or already gone" }),
    error: z
      .string()
      .nullable()
      .openapi({ description: "why the listing failed: this provider was skipped, nothing concluded" }),
    complete: z.boolean().optional().openapi({
      description:
        "false: the listing did not run from the first page to the last in this run (it began at the cursor an earlier run stopped at, or stopped at the page bound); no machine is concluded missing from it",
    }),
    note: z
      .string()
      .optional()
      .openapi({ description: "how the listing began or ended when it was not page 1 to the end" }),
  })
  .openapi("ReaperProvider");
export type ReaperProvider = z.infer<typeof ReaperProviderSchema>;

export const ReaperActionSchema = z
  .object({
    kind: z.enum(actionKinds),
    provider: ProviderNameSchema.nullable(),
    provider_ref: z.string().nullable(),
    lease_id: z.string(),
    detail: z.string(),
    outcome: z
      .enum(["done", "reported", "failed"])
      .openapi({ description: "reported: REAPER_MODE=report, nothing was done" }),
  })
  .openapi("ReaperAction");
export type ReaperAction = z.infer<typeof ReaperActionSchema>;

export const ReaperRunSchema = z
  .object({
    at: z.string(),
    mode: z.enum(["enforce", "report"]),
    providers: z.array(ReaperProviderSchema),
    actions: z.array(ReaperActionSchema),
  })
  .openapi("ReaperRun");
export type ReaperRun = z.infer<typeof ReaperRunSchema>;

/** The INSERT of one run, for the run's closing batch (old runs go with RETENTION_DAYS, src/retention). */
export function recordRunStatements(db: D1Database, run: ReaperRun): D1PreparedStatement[] {
  return [
    db
      .prepare("INSERT INTO reaper_runs (at, mode, providers, actions) VALUES (?, ?, ?, ?)")
      .bind(run.at, run.mode, JSON.stringify(run.providers), JSON.stringify(run.actions)),
  ];
}

const RunRowSchema = z.object({
  at: z.string(),
  mode: z.enum(["enforce", "report"]),
  providers: z.string().transform((text) => z.array(ReaperProviderSchema).parse(JSON.parse(text))),
  actions: z.string().transform((text) => z.array(ReaperActionSchema).parse(JSON.parse(text))),
});

/** The newest runs first. */
export async function listReaperRuns(db: D1Database, limit: number): Promise<ReaperRun[]> {
  const { results } = await db
    .prepare("SELECT at, mode, providers, actions FROM reaper_runs ORDER BY at DESC, id DESC LIMIT ?")
    .bind(limit)
    .all();
  return results.map((row) => RunRowSchema.parse(row));
}
