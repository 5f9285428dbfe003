import { z } from "zod";
import { DEFAULT_REGISTRIES, registryHosts } from "./models/registries";
import { type ProviderSecretName, providerSecretNames } from "./providers/catalogue";

const wholeNumber = (min: number, max: number) =>
  z
    .string()
    .trim()
    .regex(/^\d+$/, "expected a whole number")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max));

const positiveNumber = z
  .string()
  .trim()
  .regex(/^\d+(\.\d+)?$/, "expected a positive number")
  .transform(Number)
  .pipe(z.number().positive());

/** An unset budget var is "" (wrangler.toml default) or missing. */
const optionalAmount = z
  .string()
  .trim()
  .optional()
  .transform((v) => (v === undefined || v === "" ? undefined : v))
  .pipe(positiveNumber.optional())
  .transform((v) => v ?? null);

const flag = z
  .string()
  .trim()
  .toLowerCase()
  .pipe(z.enum(["true", "false", "1", "0", ""]))
  .transform((v) => v === "true" || v === "1");

const httpUrl = z
  .string()
  .trim()
  .pipe(z.url({ protocol: /^https?$/ }))
  .transform((v) => v.replace(/\/+$/, ""));

const secret = z
  .string()
  .optional()
  .transform((v) => (v && v.trim() !== "" ? v.trim() : null));

/** One optional secret per provider, named in the one list (src/providers/catalogue.ts). */
const providerSecrets = Object.fromEntries(providerSecretNames.map((name) => [name, secret])) as Record<
  ProviderSecretName,
  typeof secret
>;

const varsSchema = z.object({
  RUNPOD_GRAPHQL_URL: httpUrl.default("https://api.runpod.io/graphql"),
  RUNPOD_TRANSPORT: z
    .string()
    .trim()
    .pipe(z.enum(["rest", "graphql"]))
    .default("rest"),
  // Paths are built as /v2/...: the base RunPod's docs name (https://api.runpod.io/v2) doubles the
  // prefix, and every call then meets an unknown route's 404 (docs/providers.md#runpod-rest-v2).
  RUNPOD_API_URL: httpUrl
    .refine((v) => !/\/v2$/i.test(v), "the base without /v2 (paths are /v2/...), e.g. https://api.runpod.io")
    .default("https://api.runpod.io"),
  RUNPOD_REST_COMMAND_FIELDS: z
    .string()
    .trim()
    .pipe(z.enum(["cmd", "args"]))
    .default("cmd"),
  MIN_CUDA_VERSION: z
    .string()
    .trim()
    .regex(/^\d+\.\d+$/, "expected major.minor, e.g. 12.4")
    .default("12.4"),
  OFFERS_CACHE_S: wholeNumber(0, 3600).default(30),
  MEASURED_MIN_SAMPLES: wholeNumber(1, 1_000_000).default(3),
  VAST_API_URL: httpUrl.default("https://console.vast.ai"),
  VRAMFARM_API_URL: httpUrl.default("https://vramfarm.com/api"),
  OLLAMA_REGISTRY_URL: httpUrl.default("https://registry.ollama.ai"),
  OLLAMA_REGISTRIES: registryHosts.default(() => [...DEFAULT_REGISTRIES]),
  RUNPOD_PROXY_TEMPLATE: z
    .string()
    .trim()
    .refine((v) => v.includes("{id}") && v.includes("{port}"), "must contain {id} and {port}")
    .default("https://{id}-{port}.proxy.runpod.net"),
  ENABLE_SIM: flag.default(false),
  SIM_MODELS: z
    .string()
    .trim()
    .pipe(z.enum(["library", "registry"]))
    .default("library"),
  /** requests a minute per inference key or token on /llm/…; 0 = unlimited */
  INFER_RATE_LIMIT_PER_MIN: wholeNumber(0, 1_000_000).default(0),
  /** how long a gateway request's usage waits to ride on the lease's next request (0: sent at once) */
  GATEWAY_USAGE_HOLD_MS: wholeNumber(0, 10_000).default(1_000),
  // A tag, never `latest`: a nightly run uses the same server as the night before.
  OLLAMA_IMAGE: z
    .string()
    .trim()
    .regex(/^[^\s:@]+(:[\w][\w.-]{0,127}|@sha256:[0-9a-f]{64})$/, "an image with a tag or digest")
    .refine((v) => !v.endsWith(":latest"), "pin a tag: `latest` moves under a nightly run")
    .default("ollama/ollama:0.32.15"),
  LABEL_PREFIX: z
    .string()
    .trim()
    .regex(/^[a-z0-9][a-z0-9-]{0,30}$/, "lower-case letters, digits and '-', at most 31 characters")
    .default("gpulease"),
  POLL_INTERVAL_S: wholeNumber(1, 3600).default(10),
  VERIFY_INTERVAL_S: wholeNumber(1, 3600).default(5),
  RETERMINATE_INTERVAL_S: wholeNumber(1, 3600).default(30),
  START_TIMEOUT_MIN: wholeNumber(1, 1440).default(20),
  REAPER_GRACE_MIN: wholeNumber(0, 1440).default(15),
  MAX_ACTIVE_LEASES: wholeNumber(1, 10000).default(4),
  BUDGET_DAILY_USD: optionalAmount,
  BUDGET_MONTHLY_USD: optionalAmount,
  EUR_USD: positiveNumber.default(1.08),
  REAPER_MODE: z
    .string()
    .trim()
    .pipe(z.enum(["enforce", "report"]))
    .default("enforce"),
  RATE_LIMIT_PER_MIN: wholeNumber(1, 1_000_000).default(60),
  RENT_RATE_LIMIT_PER_MIN: wholeNumber(1, 1_000_000).default(10),
  PUBLIC_URL: z
    .string()
    .trim()
    .optional()
    .transform((v) => (v ? v : undefined))
    .pipe(httpUrl.optional())
    .transform((v) => v ?? null),
  ALLOW_HTTP_WEBHOOKS: flag.default(false),
  RETENTION_DAYS: wholeNumber(1, 36_500).default(90),
  ADMIN_TOKEN: secret,
  ...providerSecrets,
});

type Vars = z.output<typeof varsSchema>;

/** Every setting of the worker, parsed and validated once per entry point. */
export interface Config {
  runpodGraphqlUrl: string;
  /** RunPod transport: REST v2 (default) or GraphQL until it retires; GraphQL still reads the balance */
  runpodTransport: "rest" | "graphql";
  /** RunPod REST v2 base, paths /v2/... */
  runpodApiUrl: string;
  /** how a REST v2 create carries the container command: `cmd`/`entrypoint` arrays, or one `args` string */
  runpodRestCommandFields: "cmd" | "args";
  /** lowest host CUDA version rented where the provider can filter (RunPod, Vast.ai), "major.minor" */
  minCudaVersion: string;
  /** how long one shared offers snapshot is served, seconds (0 = no cache) */
  offersCacheS: number;
  /** metered leases a provider's GPU (or host) needs before its measured bandwidth ranks its offers */
  measuredMinSamples: number;
  vastApiUrl: string;
  vramfarmApiUrl: string;
  /** where `registry.ollama.ai` model references are looked up (manifests, GGUF headers); docs/models.md */
  ollamaRegistryUrl: string;
  /** the registry hosts a model reference may name (lower case); docs/models.md#registries */
  ollamaRegistries: string[];
  runpodProxyTemplate: string;
  enableSim: boolean;
  /**
   * where the sim's model leases are sized from and its machines pull: `library`, the sim's own
   * model library, in process (no network); `registry`, OLLAMA_REGISTRY_URL as real machines (docs/models.md)
   */
  simModels: "library" | "registry";
  inferRateLimitPerMin: number;
  gatewayUsageHoldMs: number;
  ollamaImage: string;
  labelPrefix: string;
  pollIntervalS: number;
  verifyIntervalS: number;
  reterminateIntervalS: number;
  startTimeoutMin: number;
  reaperGraceMin: number;
  maxActiveLeases: number;
  budgetDailyUsd: number | null;
  budgetMonthlyUsd: number | null;
  eurUsd: number;
  reaperMode: "enforce" | "report";
  /** API requests a minute per token (the admin token is one token) */
  rateLimitPerMin: number;
  /** rentals (POST /v1/leases, POST /v1/schedules/{id}/run) a minute per token */
  rentRateLimitPerMin: number;
  publicUrl: string | null;
  /** http:// and private-address webhook URLs accepted (local development, tests) */
  allowHttpWebhooks: boolean;
  /** days the ledger's history (events, deliveries, runs, billing days) is kept; leases stay */
  retentionDays: number;
  secrets: {
    adminToken: string | null;
    /** each provider's key, by its secret's name; null: the provider is not configured */
    providers: Record<ProviderSecretName, string | null>;
    /**
     * Values no setting holds but every scrub must hide too: a lease's env values (which a
     * provider's error may quote back), added for the work on that lease (`hidingValues`).
     */
    alsoHidden: readonly string[];
  };
}

/** A var that does not parse; names the var, never echoes a secret's value. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration: ${problems.join("; ")}`);
    this.name = "ConfigError";
  }
}

function toConfig(v: Vars): Config {
  return {
    runpodGraphqlUrl: v.RUNPOD_GRAPHQL_URL,
    runpodTransport: v.RUNPOD_TRANSPORT,
    runpodApiUrl: v.RUNPOD_API_URL,
    runpodRestCommandFields: v.RUNPOD_REST_COMMAND_FIELDS,
    minCudaVersion: v.MIN_CUDA_VERSION,
    offersCacheS: v.OFFERS_CACHE_S,
    measuredMinSamples: v.MEASURED_MIN_SAMPLES,
    vastApiUrl: v.VAST_API_URL,
    vramfarmApiUrl: v.VRAMFARM_API_URL,
    ollamaRegistryUrl: v.OLLAMA_REGISTRY_URL,
    ollamaRegistries: v.OLLAMA_REGISTRIES,
    runpodProxyTemplate: v.RUNPOD_PROXY_TEMPLATE,
    enableSim: v.ENABLE_SIM,
    simModels: v.SIM_MODELS,
    inferRateLimitPerMin: v.INFER_RATE_LIMIT_PER_MIN,
    gatewayUsageHoldMs: v.GATEWAY_USAGE_HOLD_MS,
    ollamaImage: v.OLLAMA_IMAGE,
    labelPrefix: v.LABEL_PREFIX,
    pollIntervalS: v.POLL_INTERVAL_S,
    verifyIntervalS: v.VERIFY_INTERVAL_S,
    reterminateIntervalS: v.RETERMINATE_INTERVAL_S,
    startTimeoutMin: v.START_TIMEOUT_MIN,
    reaperGraceMin: v.REAPER_GRACE_MIN,
    maxActiveLeases: v.MAX_ACTIVE_LEASES,
    budgetDailyUsd: v.BUDGET_DAILY_USD,
    budgetMonthlyUsd: v.BUDGET_MONTHLY_USD,
    eurUsd: v.EUR_USD,
    reaperMode: v.REAPER_MODE,
    rateLimitPerMin: v.RATE_LIMIT_PER_MIN,
    rentRateLimitPerMin: v.RENT_RATE_LIMIT_PER_MIN,
    publicUrl: v.PUBLIC_URL,
    allowHttpWebhooks: v.ALLOW_HTTP_WEBHOOKS,
    retentionDays: v.RETENTION_DAYS,
    secrets: {
      adminToken: v.ADMIN_TOKEN,
      providers: Object.fromEntries(providerSecretNames.map((name) => [name, v[name]])) as Record<
        ProviderSecretName,
        string | null
      >,
      alsoHidden: [],
    },
  };
}

/** A config and the vars that did not parse (each replaced by its last valid value or default). */
export interface Settings {
  config: Config;
  /** "VAR: why", one per malformed var; empty when every var parsed */
  invalid: string[];
  /** the names of the malformed vars */
  invalidVars: string[];
}

/**
 * The settings that bound what running leases may spend: the budgets the crons enforce on them,
 * and the rate that counts a EUR lease against the budgets and its max_cost. The crons keep their
 * last valid values in D1 (src/account/money-settings.ts) and enforce those while one is
 * malformed. MAX_ACTIVE_LEASES is not one: it gates new rentals only, and no rental is made while
 * any var is malformed.
 */
export const MONEY_SETTINGS = ["BUDGET_DAILY_USD", "BUDGET_MONTHLY_USD", "EUR_USD"] as const;
export type MoneySetting = (typeof MONEY_SETTINGS)[number];
export type MoneyValues = Pick<Vars, MoneySetting>;

export function moneyValuesOf(config: Config): MoneyValues {
  return {
    BUDGET_DAILY_USD: config.budgetDailyUsd,
    BUDGET_MONTHLY_USD: config.budgetMonthlyUsd,
    EUR_USD: config.eurUsd,
  };
}

/** The config with some money settings replaced (by their stored last valid values). */
export function withMoneyValues(config: Config, values: Partial<MoneyValues>): Config {
  const money = { ...moneyValuesOf(config), ...values };
  return {
    ...config,
    budgetDailyUsd: money.BUDGET_DAILY_USD,
    budgetMonthlyUsd: money.BUDGET_MONTHLY_USD,
    eurUsd: money.EUR_USD,
  };
}

let cache = new WeakMap<object, Settings>();
/**
 * Vars laid over the env's. Always empty in a deployed worker. The worker, its Durable Objects
 * and the unit tests share one isolate, so a suite can re-run under another value of a var
 * (RunPod's GraphQL transport, test/graphql-transport.test.ts) without a runtime of its own.
 */
let overlay: Partial<Record<keyof Vars, string>> = {};

/** Lays `vars` over the env's (replacing any earlier overlay); `{}` takes it away. */
export function overlayVars(vars: Partial<Record<keyof Vars, string>>): void {
  overlay = { ...vars };
  cache = new WeakMap();
}

/**
 * The last value each var parsed to in this isolate. A malformed var must not stop caps and
 * teardown: keepers and the reaper run on the last valid value (or the documented default). A
 * fresh isolate has none: the crons keep the money settings' own in D1 (`rememberValid`).
 */
const lastValid = new Map<string, unknown>();

/** Forgets every last valid value, as a fresh isolate starts (tests of what survives one). */
export function forgetLastValid(): void {
  lastValid.clear();
  cache = new WeakMap();
}

/**
 * Takes stored last valid values as this isolate's own: a keeper here then counts a EUR lease at
 * the rate the crons enforce while EUR_USD is malformed, not at the default.
 */
export function rememberValid(values: Partial<MoneyValues>): void {
  if (Object.keys(values).length === 0) return;
  for (const [key, value] of Object.entries(values)) lastValid.set(key, value);
  cache = new WeakMap();
}

function rawVars(env: Partial<Record<keyof Vars, unknown>>): Record<string, unknown> {
  const raw: Record<string, unknown> = {};
  for (const key of Object.keys(varsSchema.shape)) {
    const value = key in overlay ? overlay[key as keyof Vars] : (env as Record<string, unknown>)[key];
    // wrangler --var and .dev.vars deliver strings; a JSON-typed var may arrive as number/boolean.
    raw[key] = typeof value === "number" || typeof value === "boolean" ? String(value) : value;
  }
  return raw;
}

/**
 * Parses the worker's vars and secrets, never throwing: a malformed var is named in `invalid`
 * and replaced by its last valid value in this isolate, or its documented default. The crons lay
 * the stored last valid money settings over that (src/account/money-settings.ts).
 */
export function loadSettings(env: Partial<Record<keyof Vars, unknown>>): Settings {
  const cached = cache.get(env);
  if (cached) return cached;
  const raw = rawVars(env);
  const values: Record<string, unknown> = {};
  const invalid: string[] = [];
  const invalidVars: string[] = [];
  const shape = varsSchema.shape as Record<string, z.ZodType>;
  for (const [key, schema] of Object.entries(shape)) {
    const parsed = schema.safeParse(raw[key]);
    if (parsed.success) {
      values[key] = parsed.data;
      lastValid.set(key, parsed.data);
      continue;
    }
    invalid.push(`${key}: ${parsed.error.issues.map((issue) => issue.message).join(", ")}`);
    invalidVars.push(key);
    values[key] = lastValid.has(key) ? lastValid.get(key) : schema.parse(undefined);
  }
  const settings = { config: toConfig(values as Vars), invalid, invalidVars };
  cache.set(env, settings);
  return settings;
}

/** Parses the worker's vars and secrets; throws ConfigError naming every malformed var. */
export function loadConfig(env: Partial<Record<keyof Vars, unknown>>): Config {
  const { config, invalid } = loadSettings(env);
  if (invalid.length) throw new ConfigError(invalid);
  return config;
}
