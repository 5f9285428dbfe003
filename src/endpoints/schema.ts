import { z } from "@hono/zod-openapi";
import { ModelRefTextSchema } from "../models/reference";
import { providerNames } from "../providers/catalogue";
import { ProviderNameSchema } from "../providers/types";

export const ENDPOINT_NAME = /^[a-z0-9][a-z0-9-]{0,39}$/;

const ProvidersSchema = z
  .string()
  .trim()
  .min(1)
  .max(100)
  .transform((text, ctx) => {
    const names = [...new Set(text.split(",").map((name) => name.trim()))];
    for (const name of names) {
      if (!ProviderNameSchema.safeParse(name).success) {
        ctx.addIssue({ code: "custom", message: `unknown provider ${JSON.stringify(name.slice(0, 32))}` });
        return z.NEVER;
      }
    }
    return names.join(",");
  })
  .openapi({
    type: "string",
    description: "comma-separated providers to rent at, in order",
    example: providerNames.slice(0, 2).join(","),
  });

/** The settings PATCH may change (also part of the create body). */
const tunables = {
  min_replicas: z.number().int().min(0).max(16),
  max_replicas: z.number().int().min(1).max(16),
  idle_minutes: z.number().int().min(1).max(10080),
  cold_start_wait_s: z
    .number()
    .int()
    .min(0)
    .max(600)
    .openapi({ description: "hold a request this long for a starting replica; 0: answer 503 at once" }),
  target_in_flight: z.number().int().min(1).max(256),
  budget_daily_usd: z.number().positive().max(1_000_000).nullable(),
};

const replicasInOrder = (input: { min_replicas?: number; max_replicas?: number }) =>
  input.min_replicas === undefined || input.max_replicas === undefined || input.min_replicas <= input.max_replicas;

/** The body of POST /v1/endpoints. */
export const EndpointInputSchema = z
  .strictObject({
    name: z.string().regex(ENDPOINT_NAME, "lowercase letters, digits and '-', at most 40").openapi({ example: "qwen" }),
    model: z.string().trim().min(1).max(300).pipe(ModelRefTextSchema).openapi({ example: "qwen2.5:32b" }),
    context_length: z.number().int().min(256).max(1_048_576).optional(),
    min_replicas: tunables.min_replicas.default(0),
    max_replicas: tunables.max_replicas.default(2),
    idle_minutes: tunables.idle_minutes.default(15),
    cold_start_wait_s: tunables.cold_start_wait_s.default(0),
    target_in_flight: tunables.target_in_flight.default(4),
    budget_daily_usd: tunables.budget_daily_usd.optional(),
    provider: ProvidersSchema.optional(),
    gpu: z.string().trim().min(1).max(64).optional(),
    max_price: z.number().positive().max(10_000).optional().openapi({ description: "per hour, USD" }),
    max_minutes: z.number().int().min(1).max(10080).default(1440).openapi({ description: "per replica" }),
  })
  .refine(replicasInOrder, { path: ["min_replicas"], message: "min_replicas must not exceed max_replicas" })
  .openapi("EndpointInput");
export type EndpointInput = z.infer<typeof EndpointInputSchema>;

/** The body of PATCH /v1/endpoints/{name}. */
export const EndpointPatchSchema = z
  .strictObject({
    min_replicas: tunables.min_replicas.optional(),
    max_replicas: tunables.max_replicas.optional(),
    idle_minutes: tunables.idle_minutes.optional(),
    cold_start_wait_s: tunables.cold_start_wait_s.optional(),
    target_in_flight: tunables.target_in_flight.optional(),
    budget_daily_usd: tunables.budget_daily_usd.optional(),
  })
  .openapi("EndpointPatch");
export type EndpointPatch = z.infer<typeof EndpointPatchSchema>;

export const endpointStates = ["idle", "starting", "serving", "breaker_open", "budget_exhausted"] as const;

export const replicaPhases = ["renting", "starting", "running", "draining", "stopping"] as const;

export const ReplicaViewSchema = z
  .object({
    lease_id: z.string().nullable().openapi({ description: "null while its rental is being sent" }),
    status: z.enum(replicaPhases),
    in_flight: z.number().int(),
    last_request_at: z.string().nullable(),
  })
  .openapi("EndpointReplica");

export const EndpointSchema = z
  .object({
    name: z.string(),
    model: z.string(),
    context_length: z.number().int().nullable(),
    min_replicas: z.number().int(),
    max_replicas: z.number().int(),
    idle_minutes: z.number().int(),
    cold_start_wait_s: z.number().int(),
    target_in_flight: z.number().int(),
    budget_daily_usd: z.number().nullable(),
    provider: z.string().nullable(),
    gpu: z.string().nullable(),
    max_price: z.number().nullable(),
    max_minutes: z.number().int(),
    state: z.enum(endpointStates),
    replicas: z.array(ReplicaViewSchema),
    failed_starts: z.number().int().openapi({ description: "failed starts in a row (the breaker opens at 3)" }),
    cold_starts: z
      .array(z.object({ at: z.string(), duration_ms: z.number().int() }))
      .openapi({ description: "recent cold starts: first waiting request → replica answering" }),
    spend_today_usd: z.number(),
    usage_today: z
      .object({
        requests: z.number().int(),
        errors: z.number().int(),
        prompt_tokens: z.number().int(),
        completion_tokens: z.number().int(),
        usd_per_million_tokens: z.number().nullable(),
      })
      .openapi({ description: "today's replicas (UTC day): requests through the gateway, tokens, spend ÷ tokens" }),
    base_url: z.string().openapi({ example: "https://gpulease.example.com/llm/v1" }),
    created_at: z.string(),
  })
  .openapi("Endpoint");
export type Endpoint = z.infer<typeof EndpointSchema>;
