import { z } from "@hono/zod-openapi";
import { LeaseUsageSchema } from "../gateway/usage-store";
import { ModelRefTextSchema } from "../models/reference";
import { AccessSchema, CurrencySchema, ProviderNameSchema, TemplateSchema } from "../providers/types";
import { CreateViewSchema } from "./create-records";
import { LeaseEventKindSchema } from "./events";

export const leaseStatuses = ["provisioning", "running", "stopping", "stopped"] as const;
export const LeaseStatusSchema = z.enum(leaseStatuses).openapi("LeaseStatus");
export type LeaseStatus = z.infer<typeof LeaseStatusSchema>;

export const stopReasons = [
  "requested",
  "max_minutes",
  "max_cost",
  "job_done",
  "start_timeout",
  "budget",
  "reaper",
  "rent_failed",
  "start_failed",
  "idle",
] as const;
export const StopReasonSchema = z.enum(stopReasons).openapi("StopReason");
export type StopReason = z.infer<typeof StopReasonSchema>;

/** Env names the machine gets from gpulease itself; a user value must not shadow them. */
export const RESERVED_ENV_PREFIX = "GPULEASE_";
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MAX_ENV_ENTRIES = 64;
const MAX_ENV_VALUE_CHARS = 8192;

const EnvSchema = z
  .record(
    z.string().max(128).regex(ENV_NAME, "env names are letters, digits and '_', not starting with a digit"),
    z.string().max(MAX_ENV_VALUE_CHARS),
  )
  .refine((env) => Object.keys(env).length <= MAX_ENV_ENTRIES, `at most ${MAX_ENV_ENTRIES} env entries`)
  .refine(
    (env) => Object.keys(env).every((name) => !name.toUpperCase().startsWith(RESERVED_ENV_PREFIX)),
    `env names starting with ${RESERVED_ENV_PREFIX} are reserved`,
  );

/** The body of POST /v1/leases (and the `lease` of a schedule). */
export const LeaseInputSchema = z
  .strictObject({
    name: z.string().trim().min(1).max(100).optional(),
    offer_id: z
      .string()
      .min(1)
      .max(300)
      .optional()
      .openapi({ description: "an offer_id from GET /v1/offers; else the filters pick" }),
    provider: ProviderNameSchema.optional(),
    gpu: z.string().trim().min(1).max(64).optional().openapi({ description: "GPU name, case-insensitive substring" }),
    vram_gb: z.number().positive().max(8192).optional(),
    gpu_count: z.number().int().min(1).max(16).optional(),
    max_price: z.number().positive().optional().openapi({ description: "per hour, USD" }),
    weights_gb: z.number().nonnegative().max(8192).optional(),
    template: TemplateSchema.default("ollama"),
    image: z.string().trim().min(1).max(500).optional().openapi({ description: "required for custom" }),
    cmd: z.string().min(1).max(4000).optional().openapi({ description: "custom only" }),
    env: EnvSchema.optional(),
    ports: z
      .array(z.number().int().min(1).max(65535))
      .max(16)
      .refine((ports) => new Set(ports).size === ports.length, "ports must be unique")
      .optional(),
    disk_gb: z.number().int().min(1).max(4000).optional(),
    model: z.string().trim().min(1).max(300).pipe(ModelRefTextSchema).optional().openapi({
      description:
        "ollama only: a model to pull, load and answer before the lease runs (`name:tag`, `namespace/name:tag`, `hf.co/<user>/<repo>:<quant>`)",
      example: "qwen2.5:32b",
    }),
    context_length: z.number().int().min(256).max(1_048_576).optional().openapi({ description: "ollama only" }),
    max_minutes: z.number().int().min(1).max(10080),
    max_cost: z.number().positive().optional().openapi({ description: "in USD" }),
    idle_minutes: z.number().int().min(1).max(10080).optional().openapi({
      description: "model leases only: stopped after this long with no request through the LLM gateway",
    }),
  })
  .superRefine((input, ctx) => {
    if (input.idle_minutes !== undefined && input.model === undefined) {
      ctx.addIssue({ code: "custom", path: ["idle_minutes"], message: "idle_minutes is only for a model lease" });
    }
    if (input.template === "custom" && !input.image) {
      ctx.addIssue({ code: "custom", path: ["image"], message: "a custom lease needs an image" });
    }
    if (input.cmd !== undefined && input.template !== "custom") {
      ctx.addIssue({ code: "custom", path: ["cmd"], message: "cmd is only for the custom template" });
    }
    if (input.model !== undefined && input.template !== "ollama") {
      ctx.addIssue({ code: "custom", path: ["model"], message: "model is only for the ollama template" });
    }
    if (input.context_length !== undefined && input.template !== "ollama") {
      ctx.addIssue({
        code: "custom",
        path: ["context_length"],
        message: "context_length is only for the ollama template",
      });
    }
  })
  .openapi("LeaseInput");
export type LeaseInput = z.infer<typeof LeaseInputSchema>;

/** A model lease's model: what the registry said, and when it answered on the machine. */
export const LeaseModelSchema = z
  .object({
    name: z.string().openapi({ example: "qwen2.5:32b" }),
    digest: z.string().nullable().openapi({ description: "the manifest's digest (the registry's, then the server's)" }),
    weights_gb: z.number(),
    vram_need_gb: z.number().nullable(),
    context_length: z.number().int().nullable(),
    loaded_at: z
      .string()
      .nullable()
      .openapi({ description: "when a one-token generation of the model first answered" }),
  })
  .openapi("LeaseModel");

/** What the lease asked for, as the API shows it: `env` values are write-only ("***"). */
export const LeaseSpecViewSchema = z
  .object({
    template: TemplateSchema,
    image: z.string().nullable().openapi({ example: "ghcr.io/you/batch:2026-11-12" }),
    cmd: z.string().nullable().openapi({ example: "python /app/run.py" }),
    ports: z.array(z.number().int()).openapi({ example: [8000] }),
    disk_gb: z.number().int().openapi({ example: 60 }),
    env: z.record(z.string(), z.literal("***")).openapi({ example: { HF_TOKEN: "***" } }),
    model: z.string().nullable().openapi({ description: "a model lease's model reference", example: null }),
    context_length: z.number().int().nullable().openapi({ example: null }),
  })
  .openapi("LeaseSpec");

/** The lease object of the API. Money is in `currency`, except max_cost and expected_cost (USD). */
export const LeaseSchema = z
  .object({
    id: z.string().openapi({ example: "lse_01jb3k7q2m9x4v8n6c5t0w" }),
    name: z.string().nullable(),
    status: LeaseStatusSchema,
    provider: ProviderNameSchema.nullable(),
    provider_ref: z.string().nullable(),
    offer_id: z.string().nullable(),
    label: z.string(),
    template: TemplateSchema,
    gpu: z.string().nullable(),
    gpu_count: z.number().int().nullable(),
    vram_gb: z.number().nullable(),
    price_per_hour: z.number().nullable(),
    currency: CurrencySchema.nullable(),
    max_minutes: z.number().int(),
    max_cost: z.number().nullable().openapi({ description: "USD" }),
    expected_cost: z
      .number()
      .nullable()
      .openapi({ description: "USD, the worst case at rental: price × max_minutes, capped by max_cost" }),
    cost: z.number().openapi({
      description:
        "in `currency`: what the provider bills so far, every machine of the lease's creates included; runs until teardown_verified_at",
    }),
    billed: z.number().nullable().openapi({
      description:
        "in `currency`: what the provider itself says it billed, once known (where it reports that per machine)",
    }),
    access: AccessSchema.nullable(),
    error: z.string().nullable(),
    stop_reason: StopReasonSchema.nullable(),
    exit_code: z.number().int().nullable(),
    schedule_id: z.string().nullable(),
    endpoint: z
      .string()
      .nullable()
      .openapi({ description: "the model endpoint whose replica this lease is (its name); null for any other lease" }),
    created_at: z.string(),
    running_at: z.string().nullable(),
    stop_requested_at: z.string().nullable(),
    stopped_at: z.string().nullable(),
    teardown_verified_at: z.string().nullable(),
    model: LeaseModelSchema.nullable().openapi({ description: "the model of a model lease; null otherwise" }),
    spec: LeaseSpecViewSchema,
    usage: LeaseUsageSchema.nullable().openapi({
      description: "requests through the LLM gateway (GET /v1/leases/{id}); null before the first, or in lists",
    }),
    creates: z.array(CreateViewSchema).openapi({
      description: "every create sent for this lease, with its resolution; never stopped while one is unresolved",
    }),
  })
  .openapi("Lease");
export type Lease = z.infer<typeof LeaseSchema>;

/** The answer to a new model lease: the lease and, this once, its inference key. */
export const RentedLeaseSchema = LeaseSchema.extend({
  inference_key: z
    .string()
    .optional()
    .openapi({ description: "a model lease's key for /llm/{id}/…, shown only here (rotate to get a new one)" }),
}).openapi("RentedLease");

export const LeaseEventSchema = z
  .object({
    seq: z.number().int().openapi({ description: "increasing; the SSE event id" }),
    at: z.string(),
    kind: LeaseEventKindSchema,
    detail: z.string().nullable(),
    reason: StopReasonSchema.nullable().openapi({
      description:
        "why, as data: the stop reason of a `stop_requested` or `stopped` event (null for others and for events written before it existed)",
    }),
  })
  .openapi("LeaseEvent");
export type LeaseEvent = z.infer<typeof LeaseEventSchema>;

export const RentAttemptSchema = z.object({ offer_id: z.string(), error: z.string() });
export type RentAttempt = z.infer<typeof RentAttemptSchema>;
