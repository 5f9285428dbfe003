import { type RateLimitPort, rateLimitsOf } from "./auth/rate-limits";
import type { Config } from "./config";
import { type KeeperPort, keepersOf } from "./keeper/client";
import { createLogger, type Logger } from "./lib/log";
import { secretsOf } from "./lib/scrub";
import { type Clock, type Sleep, systemClock, systemSleep } from "./lib/time";
import { createProviders, type ProviderRegistry } from "./providers/registry";
import { wakeOutbox } from "./webhooks/wake";

/** `infer` opens the LLM gateway (/llm/…) of every model lease, and nothing under /v1. */
export type Scope = "read" | "rent" | "stop" | "infer" | "admin";

/** Who is calling: the admin token (tokenId null) or a stored token with its scopes. */
export interface Caller {
  tokenId: string | null;
  scopes: readonly Scope[];
}

/** What a route or job needs from the outside world, built once per invocation. */
export interface Services {
  env: Env;
  config: Config;
  db: D1Database;
  providers: ProviderRegistry;
  clock: Clock;
  /** every wait of a request or job (retry backoff, lookups) goes through this */
  sleep: Sleep;
  /** structured, scrubbed log lines; a request's carry its request_id */
  log: Logger;
  /** the lease keepers (Durable Objects): the one writer of each lease after insert */
  keepers: KeeperPort;
  /** the per-key rate limiters (/v1 tokens, sign-ins, the gateway), failing open and logged */
  rateLimits: RateLimitPort;
  /** the webhook outbox: wake its sender after events that announce */
  outbox: { wake(): Promise<void> };
}

export type AppEnv = {
  Bindings: Env;
  Variables: { services: Services; caller: Caller; requestId: string };
};

/**
 * The clock and wait of every Services built from env. Production never changes them. Tests
 * drive the worker through its own fetch, alarm and scheduled handlers, which build their
 * Services here, so the test harness (test/support/timing.ts) swaps the wait for one that
 * returns at once: the worker, its Durable Objects and the tests share one isolate and module graph.
 */
export const invocationTiming: { clock: Clock; sleep: Sleep } = { clock: systemClock, sleep: systemSleep };

/** Builds the services of one invocation from the env and its parsed config. */
/**
 * The same services, with `values` scrubbed from every error they store, log or show: a lease's
 * env values, for the work on that lease (a provider's error may quote the create it refused).
 */
export function hidingValues(services: Services, values: readonly string[]): Services {
  const hidden = values.filter((value) => value.length >= 4);
  if (hidden.length === 0) return services;
  const secrets = { ...services.config.secrets, alsoHidden: [...services.config.secrets.alsoHidden, ...hidden] };
  return { ...services, config: { ...services.config, secrets }, log: services.log.hiding(hidden) };
}

export function createServices(
  env: Env,
  config: Config,
  clock: Clock = invocationTiming.clock,
  sleep: Sleep = invocationTiming.sleep,
): Services {
  return {
    env,
    config,
    db: env.DB,
    providers: createProviders(env, config, clock, sleep),
    clock,
    sleep,
    log: createLogger(secretsOf(config)),
    keepers: keepersOf(env),
    rateLimits: rateLimitsOf(env),
    outbox: { wake: () => wakeOutbox(env) },
  };
}
