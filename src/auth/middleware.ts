import { createMiddleware } from "hono/factory";
import { ApiError } from "../errors";
import { bearerToken, secretsEqual } from "../lib/crypto";
import type { AppEnv, Caller, Scope, Services } from "../services";
import { internalCallerOf } from "./internal";
import { accessRuleFor } from "./policy";
import { findActiveToken } from "./tokens-store";

/** Resolves the bearer token of a /v1 request into a Caller, or answers 401. */
export const authenticate = createMiddleware<AppEnv>(async (c, next) => {
  // The dashboard calls the API in-process as its signed-in session's caller.
  const internal = internalCallerOf(c.req.raw);
  if (internal) {
    c.set("caller", internal);
    return next();
  }
  const token = bearerToken(c.req.header("Authorization"));
  if (!token) {
    throw new ApiError(
      "unauthorized",
      "missing bearer token (Authorization: Bearer <token>)",
      {},
      {
        "WWW-Authenticate": 'Bearer realm="gpulease"',
      },
    );
  }
  const caller = await callerForToken(c.get("services"), token);
  if (!caller) {
    throw new ApiError(
      "unauthorized",
      "unknown or revoked token",
      {},
      {
        "WWW-Authenticate": 'Bearer realm="gpulease", error="invalid_token"',
      },
    );
  }
  c.set("caller", caller);
  await next();
});

/** The caller a bearer token stands for: ADMIN_TOKEN, an unrevoked scoped token, or null. */
export async function callerForToken(services: Services, token: string): Promise<Caller | null> {
  const { config, db, clock } = services;
  if (config.secrets.adminToken && (await secretsEqual(token, config.secrets.adminToken))) {
    return { tokenId: null, scopes: ["admin"] };
  }
  const stored = await findActiveToken(db, token, clock());
  return stored ? { tokenId: stored.id, scopes: stored.scopes } : null;
}

/** True when the caller holds `scope`; admin holds every scope. */
export function hasScope(caller: Caller, scope: Scope): boolean {
  return caller.scopes.includes("admin") || caller.scopes.includes(scope);
}

/** Route middleware: 403 unless the caller holds `scope`. */
export function requireScope(scope: Scope) {
  return createMiddleware<AppEnv>(async (c, next) => {
    if (!hasScope(c.get("caller"), scope)) {
      throw new ApiError("forbidden", `this route needs the '${scope}' scope`);
    }
    await next();
  });
}

/**
 * 403 unless the caller holds the scope the central policy gives this method and path; runs for
 * every /v1 request, so a route that forgets requireScope is still closed.
 */
export const enforceScope = createMiddleware<AppEnv>(async (c, next) => {
  const { scope } = accessRuleFor(c.req.method, c.req.path);
  const caller = c.get("caller");
  if (!hasScope(caller, scope)) {
    throw new ApiError(
      "forbidden",
      `${c.req.method} on this route needs the '${scope}' scope; the token has ${caller.scopes.join(", ")}`,
    );
  }
  await next();
});

/** The rate-limit key of a caller: its token id, or "admin" for the bootstrap admin token. */
export const rateLimitKey = (caller: Caller): string => caller.tokenId ?? "admin";

/**
 * 429 when the caller's token is over its request or rental budget (one RateLimiter call).
 * Mounted after authenticate, so an unauthenticated request consumes no one's budget.
 */
export const rateLimit = createMiddleware<AppEnv>(async (c, next) => {
  const services = c.get("services");
  const { config } = services;
  const { rental } = accessRuleFor(c.req.method, c.req.path);
  // Fails open, logged (src/auth/rate-limits.ts): stopping leases never waits on a limiter.
  const admission = await services.rateLimits.admit(
    rateLimitKey(c.get("caller")),
    { rental, limits: { requestsPerMin: config.rateLimitPerMin, rentalsPerMin: config.rentRateLimitPerMin } },
    { log: services.log, outcome: "request let through" },
  );
  if (!admission.admitted) {
    const what =
      admission.limit === "rentals" ? `${config.rentRateLimitPerMin} rentals` : `${config.rateLimitPerMin} requests`;
    throw new ApiError(
      "rate_limited",
      `this token is limited to ${what} a minute; retry in ${admission.retryAfterS} s`,
      { retry_after: admission.retryAfterS },
      { "Retry-After": String(admission.retryAfterS) },
    );
  }
  await next();
});
