import type { LogFields, Logger } from "../lib/log";
import type { AdmitRequest } from "./rate-limiter";
import type { Admission } from "./rate-window";

/**
 * The rate limiters, as the rest of the worker reaches them (a port on Services): one RateLimiter
 * Durable Object per key. Every caller's keys carry their own prefix, so no two budgets share a window.
 */
export interface RateLimitPort {
  /**
   * Counts one request against `key`'s window. Never throws: a limiter that cannot be reached lets
   * the request through and logs `rate_limiter_unavailable` on `failure.log` (the one failure
   * policy: an unreachable limiter must not take the API, a sign-in or the gateway down; spending
   * stays bounded by MAX_ACTIVE_LEASES and the budgets, which do not depend on it).
   */
  admit(key: string, request: AdmitRequest, failure: UnavailableLog): Promise<Admission>;
}

/** Where an unreachable limiter is logged, and what was let through ("request let through", ...). */
export interface UnavailableLog {
  log: Logger;
  outcome: string;
  fields?: LogFields;
}

export function rateLimitsOf(env: Env): RateLimitPort {
  return {
    async admit(key, request, failure) {
      try {
        return await env.RATE_LIMITER.getByName(key).admit(request);
      } catch (error) {
        failure.log.error("rate_limiter_unavailable", { outcome: failure.outcome, ...failure.fields, error });
        return { admitted: true };
      }
    },
  };
}
