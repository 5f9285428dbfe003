import { z } from "@hono/zod-openapi";
import { EXAMPLE_OFFER_ID } from "../providers/offer-host";
import {
  CurrencySchema,
  type ProviderName,
  ProviderNameSchema,
  providerNames,
  TemplateSchema,
} from "../providers/types";

/** What the offers service accepts from routes and from the leases code; amounts in USD. */
export const OffersQuerySchema = z.object({
  /** minimum total GPU memory, GB */
  vram_gb: z.number().nonnegative().max(4096).optional(),
  /** download size for the load-time estimate, GB; defaults to vram_gb */
  weights_gb: z.number().nonnegative().max(4096).optional(),
  /** the container disk the create will ask, GB (where a provider filters hosts by disk) */
  disk_gb: z.number().int().positive().max(10_000).optional(),
  /** case-insensitive substring of the GPU name */
  gpu: z.string().min(1).max(64).optional(),
  gpu_count: z.number().int().min(1).max(16).optional(),
  /** only these providers; absent = every configured one */
  provider: z.array(ProviderNameSchema).min(1).optional(),
  /** per hour, USD (EUR offers are compared after conversion with EUR_USD) */
  max_price: z.number().positive().max(10_000).optional(),
  /** default DEFAULT_OFFER_LIMIT */
  limit: z.number().int().min(1).max(200).optional(),
  /** drop offers that cannot run this lease template */
  template: TemplateSchema.optional(),
});
export type OffersQuery = z.infer<typeof OffersQuerySchema>;

export const DEFAULT_OFFER_LIMIT = 20;
export const MAX_OFFER_LIMIT = 200;

// Query strings: plain decimal digits only, so "", "-1", "NaN", "1e400", "0x10" and
// "Infinity" are all rejected instead of being coerced into a number nobody meant.
const decimal = (max: number, description: string, example: string, positive = false) =>
  z
    .string()
    .trim()
    .regex(/^\d{1,9}(\.\d{1,6})?$/, "expected a non-negative decimal number")
    .transform(Number)
    .pipe(positive ? z.number().positive().max(max) : z.number().max(max))
    .optional()
    .openapi({ description, example: Number(example), type: "number" });

const whole = (min: number, max: number, description: string, example: string) =>
  z
    .string()
    .trim()
    .regex(/^\d{1,9}$/, "expected a whole number")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max))
    .optional()
    .openapi({ description, example: Number(example), type: "integer" });

const providerList = z
  .string()
  .transform((value, ctx) => {
    const names = value.split(",").map((name) => name.trim().toLowerCase());
    const unknown = names.filter((name) => !(providerNames as readonly string[]).includes(name));
    if (unknown.length) {
      // One issue on `provider` itself (not provider.0): the user wrote one parameter.
      ctx.issues.push({
        code: "custom",
        input: value,
        message: `unknown provider ${unknown.map((n) => JSON.stringify(n)).join(", ")}; expected a comma list of ${providerNames.join(", ")}`,
      });
      return z.NEVER;
    }
    return [...new Set(names)] as ProviderName[];
  })
  .optional()
  .openapi({
    description: `comma list of ${providerNames.join(", ")}`,
    example: providerNames.slice(0, 2).join(","),
    type: "string",
  });

/** The query string of GET /v1/offers; unknown parameters are rejected (a typo must not widen a search). */
export const OffersQueryParamsSchema = z.strictObject({
  vram_gb: decimal(4096, "minimum total GPU memory, GB", "24"),
  weights_gb: decimal(4096, "download size of what will be loaded, GB (load-time estimate); default vram_gb", "18"),
  disk_gb: whole(
    1,
    10_000,
    "only hosts with this much container disk free, GB (where the provider filters by it)",
    "100",
  ),
  gpu: z
    .string()
    .trim()
    .min(1)
    .max(64)
    .regex(/^[A-Za-z0-9 ._+-]+$/, "letters, digits, space and . _ + - only")
    .optional()
    .openapi({ description: "GPU name filter, case-insensitive substring", example: "4090" }),
  gpu_count: whole(1, 16, "exact number of GPUs", "1"),
  provider: providerList,
  max_price: decimal(10_000, "highest price per hour, USD", "1.5", true),
  limit: whole(1, MAX_OFFER_LIMIT, `default ${DEFAULT_OFFER_LIMIT}, max ${MAX_OFFER_LIMIT}`, "20"),
  template: TemplateSchema.optional().openapi({ description: "only offers that can run this lease template" }),
  model: z.string().trim().min(1).max(300).optional().openapi({
    description: "only offers this Ollama model fits (sized from its registry manifest)",
    example: "qwen2.5:32b",
  }),
  context_length: whole(256, 1_048_576, "the context the model must hold (with `model`); default the model's", "8192"),
});

export const FitSchema = z
  .object({
    vram_need_gb: z.number().openapi({
      description:
        "GiB of this offer's cards the model takes as the pinned Ollama runs it: weights + KV cache + compute buffer + llama.cpp's 1 GiB margin and the CUDA reserve per card used",
    }),
    headroom_gb: z.number().openapi({ description: "memory_gib left over, GiB" }),
  })
  .openapi("Fit");

export const OfferSchema = z
  .object({
    offer_id: z.string().openapi({
      description: "opaque; pass it to POST /v1/leases",
      example: EXAMPLE_OFFER_ID,
    }),
    provider: ProviderNameSchema,
    gpu: z.string().openapi({ example: "RTX 4090" }),
    gpu_count: z.number().int(),
    vram_gb: z.number().openapi({ description: 'total over all cards, as the cards are sold ("48 GB")' }),
    memory_gib: z.number().openapi({
      description:
        "total over all cards as the driver reports it, GiB (an L40S: 46,068 MiB = 44.99); `fits` is computed against it",
      example: 23.99,
    }),
    price_per_hour: z.number().openapi({ description: "whole machine, in `currency`" }),
    currency: CurrencySchema,
    price_per_hour_usd: z.number().openapi({ description: "price_per_hour converted with EUR_USD" }),
    cloud: z.string().nullable(),
    availability: z.string().nullable(),
    location: z.string().nullable(),
    bandwidth_gbs: z
      .number()
      .nullable()
      .openapi({ description: "memory bandwidth of all cards, reduced 10 % per extra card; null when unknown" }),
    measured_bandwidth_gbs: z
      .number()
      .nullable()
      .openapi({
        description:
          "what metered leases of this provider and GPU (this host's own, once it has MEASURED_MIN_SAMPLES) got " +
          "in the last 30 days: the median of decode tokens/s × model size, per card, reduced like bandwidth_gbs; " +
          "null when none was measured",
        example: 941,
      }),
    measured_samples: z
      .number()
      .int()
      .nonnegative()
      .openapi({
        description:
          "metered leases behind measured_bandwidth_gbs; from MEASURED_MIN_SAMPLES (default 3) on, " +
          "`value` uses the measured figure instead of bandwidth_gbs",
        example: 4,
      }),
    load_time_s: z.number().int().openapi({ description: "estimated seconds until the weights are loaded" }),
    first_hour_cost: z.number().openapi({ description: "price × (1 + load time) + download fee, in `currency`" }),
    first_hour_cost_usd: z.number(),
    value: z
      .number()
      .int()
      .nullable()
      .openapi({
        description:
          "bandwidth per USD of the first hour (the measured bandwidth where there are enough samples); " +
          "null when bandwidth or price is unknown",
      }),
    min_billed_minutes: z.number().int().openapi({ description: "minimum billed minutes per start" }),
    templates: z.array(TemplateSchema).openapi({ description: "lease templates this offer can run" }),
    fits: FitSchema.optional().openapi({ description: "with `model`: how the model fits this offer" }),
  })
  .openapi("Offer");
export type Offer = z.infer<typeof OfferSchema>;

export const ProviderFailureSchema = z
  .object({
    provider: ProviderNameSchema,
    code: z.enum(["provider_error", "not_configured", "timeout"]),
    error: z.string(),
  })
  .openapi("ProviderFailure");
export type ProviderFailure = z.infer<typeof ProviderFailureSchema>;

export const OffersResponseSchema = z
  .object({
    offers: z.array(OfferSchema),
    errors: z
      .array(ProviderFailureSchema)
      .openapi({ description: "providers that failed or are not configured; they never fail the request" }),
    fetched_at: z.string().openapi({
      description: "when the oldest listing used was fetched (listings are shared and cached for OFFERS_CACHE_S)",
    }),
  })
  .openapi("Offers");

export const OfferTypeSchema = z
  .object({
    gpu: z.string(),
    vram_gb: z.number().openapi({ description: "per card" }),
    cheapest: OfferSchema,
    available: z.number().int().openapi({ description: "number of offers of this type" }),
  })
  .openapi("OfferType");
export type OfferType = z.infer<typeof OfferTypeSchema>;

export const OfferTypesResponseSchema = z
  .object({
    types: z.array(OfferTypeSchema),
    errors: z.array(ProviderFailureSchema),
    fetched_at: z.string(),
  })
  .openapi("OfferTypes");
