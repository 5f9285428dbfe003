import { createMiddleware } from "hono/factory";
import { ApiError } from "../errors";
import { secretsEqual } from "../lib/crypto";
import type { AppEnv, Caller, Scope } from "../services";
import { findActiveToken } from "./tokens-store";

const BEARER = /^Bearer\s+([A-Za-z0-9._~+/=-]+)\s*$/i;

/** Resolves the bearer token of a /v1 request into a Caller, or answers 401. */
export const authenticate = createMiddleware<AppEnv>(async (c, next) => {
  const match = BEARER.exec(c.req.header("Authorization") ?? "");
  if (!match?.[1]) {
    throw new ApiError("unauthorized", "missing bearer token (Authorization: Bearer <token>)", {}, {
      "WWW-Authenticate": 'Bearer realm="gpulease"',
    });
  }
  const token = match[1];
  const { config, db, clock } = c.get("services");
  let caller: Caller | null = null;
  if (config.secrets.adminToken && (await secretsEqual(token, config.secrets.adminToken))) {
    caller = { tokenId: null, scopes: ["admin"] };
  } else {
    const stored = await findActiveToken(db, token, clock());
    if (stored) caller = { tokenId: stored.id, scopes: stored.scopes };
  }
  if (!caller) {
    throw new ApiError("unauthorized", "unknown or revoked token", {}, {
      "WWW-Authenticate": 'Bearer realm="gpulease", error="invalid_token"',
    });
  }
  c.set("caller", caller);
  await next();
});

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
