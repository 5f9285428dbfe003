import type { Config } from "./config";
import { type Clock, type Sleep, systemClock, systemSleep } from "./lib/time";
import { createProviders, type ProviderRegistry } from "./providers/registry";

export type Scope = "read" | "rent" | "stop" | "admin";

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
}

export type AppEnv = {
  Bindings: Env;
  Variables: { services: Services; caller: Caller };
};

/** Builds the services of one invocation from the env and its parsed config. */
export function createServices(
  env: Env,
  config: Config,
  clock: Clock = systemClock,
  sleep: Sleep = systemSleep,
): Services {
  return { env, config, db: env.DB, providers: createProviders(env, config, clock, sleep), clock, sleep };
}
