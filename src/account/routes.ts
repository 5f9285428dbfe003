import { createRoute, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/middleware";
import { BillingDaySchema, billingByDay } from "../billing/report";
import { errorResponses } from "../errors";
import { leasesWithUnresolvedCreates } from "../leases/create-records";
import { scrubError } from "../lib/scrub";
import { withTimeout } from "../lib/timeout";
import { CurrencySchema, type ProviderName, ProviderNameSchema, providerNames } from "../providers/types";
import { bearerSecurity, createRouter, jsonResponse } from "../router";
import type { Services } from "../services";
import { loadSpend, roundUsd } from "./spend";
import { AccountSpendSchema, spendDays } from "./spend-days";

/** A provider's balance read gets this long; a slow one is reported, the others still answer. */
const BALANCE_TIMEOUT_MS = 8_000;

const ProviderBalanceSchema = z
  .object({
    provider: ProviderNameSchema,
    configured: z.boolean(),
    balance: z.number().nullable(),
    currency: CurrencySchema.nullable(),
    error: z.string().nullable().openapi({ description: "why the balance could not be read" }),
  })
  .openapi("ProviderBalance");
type ProviderBalance = z.infer<typeof ProviderBalanceSchema>;

const AccountSchema = z
  .object({
    providers: z.array(ProviderBalanceSchema),
    spend: z
      .object({
        today: z.number(),
        month: z.number(),
        currency: z.literal("USD"),
        committed_today: z
          .number()
          .openapi({ description: "spent today plus what active leases may still cost by their caps" }),
        committed_month: z.number(),
      })
      .openapi({ description: "UTC day and month; a lease running across midnight counts pro rata" }),
    budget: z.object({ daily: z.number().nullable(), monthly: z.number().nullable() }),
    active_leases: z.number().int(),
    limits: z.object({ max_active_leases: z.number().int() }),
    unverified_teardowns: z.array(z.string()).openapi({
      description: "leases whose teardown has not been verified after its window: check them at the provider",
    }),
    unresolved_rentals: z.array(z.string()).openapi({
      description:
        "leases whose create was sent but whose machine has not been found yet: the keeper keeps looking; check the provider",
    }),
    billing: z.array(BillingDaySchema).openapi({
      description:
        "per provider and UTC day: the ledger's spend beside what the provider billed, where it reports that per machine",
    }),
  })
  .openapi("Account");

const accountRoute = createRoute({
  method: "get",
  path: "/account",
  tags: ["account"],
  summary: "Spend, budget and provider balances",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  responses: {
    200: { description: "The account.", content: { "application/json": { schema: AccountSchema } } },
    ...errorResponses("forbidden"),
  },
});

const SpendQuery = z.strictObject({
  days: z
    .string()
    .regex(/^\d{1,3}$/, "expected a whole number")
    .transform(Number)
    .pipe(z.number().int().min(1).max(366))
    .optional()
    .openapi({ type: "integer", description: "UTC days, today included: 1 to 366, default 30", example: 30 }),
});

const accountSpendRoute = createRoute({
  method: "get",
  path: "/account/spend",
  operationId: "getAccountSpend",
  tags: ["account"],
  summary: "Spend per UTC day and provider",
  description:
    "The ledger's spend per UTC day and provider (USD; a lease running across midnight counts pro rata), with what providers billed where they report it per machine.",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  request: { query: SpendQuery },
  responses: {
    200: jsonResponse(AccountSpendSchema, "The days."),
    ...errorResponses("forbidden"),
  },
});

async function balanceOf(services: Services, name: ProviderName): Promise<ProviderBalance> {
  const entry: ProviderBalance = { provider: name, configured: false, balance: null, currency: null, error: null };
  try {
    const provider = services.providers.get(name);
    if (!provider) return entry;
    entry.configured = true;
    entry.currency = provider.currency;
    const balance = await withTimeout(
      () => provider.balance(),
      BALANCE_TIMEOUT_MS,
      () => new Error(`no balance within ${BALANCE_TIMEOUT_MS / 1000} s`),
    );
    return { ...entry, balance: balance.amount, currency: balance.currency };
  } catch (error) {
    return { ...entry, error: scrubError(services.config, error, "balance failed") };
  }
}

export const accountRoutes = createRouter()
  .openapi(accountRoute, async (c) => {
    const services = c.get("services");
    const now = services.clock();
    const [balances, spend, billing] = await Promise.all([
      Promise.all(providerNames.map((name) => balanceOf(services, name))),
      loadSpend(services.db, now, services.config.eurUsd),
      billingByDay(services),
    ]);
    return c.json(
      {
        providers: balances,
        spend: {
          today: roundUsd(spend.today),
          month: roundUsd(spend.month),
          currency: "USD" as const,
          committed_today: roundUsd(spend.committedToday),
          committed_month: roundUsd(spend.committedMonth),
        },
        budget: { daily: services.config.budgetDailyUsd, monthly: services.config.budgetMonthlyUsd },
        active_leases: spend.activeLeases.length,
        limits: { max_active_leases: services.config.maxActiveLeases },
        unverified_teardowns: spend.activeLeases
          .filter((l) => l.status === "stopping" && l.error === "teardown_unverified")
          .map((l) => l.id),
        unresolved_rentals: await leasesWithUnresolvedCreates(services.db),
        billing,
      },
      200,
    );
  })
  .openapi(accountSpendRoute, async (c) => {
    const services = c.get("services");
    const days = c.req.valid("query").days ?? 30;
    const rows = await billingByDay(services, days);
    return c.json(
      {
        days: spendDays(rows, services.clock(), days),
        currency: "USD" as const,
        budget: { daily: services.config.budgetDailyUsd },
      },
      200,
    );
  });
