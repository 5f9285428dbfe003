import { z } from "zod";
import { sha256Hex } from "../lib/crypto";
import { iso } from "../lib/time";
import type { Scope } from "../services";

export const scopeValues = ["read", "rent", "stop", "infer", "admin"] as const satisfies readonly Scope[];
export const ScopeSchema = z.enum(scopeValues);

const TokenRowSchema = z.object({
  id: z.string(),
  name: z.string(),
  scopes: z.string().transform((s) => z.array(ScopeSchema).parse(JSON.parse(s))),
  created_at: z.string(),
  last_used_at: z.string().nullable(),
  revoked_at: z.string().nullable(),
});
export type TokenRow = z.infer<typeof TokenRowSchema>;

const LAST_USED_RESOLUTION_MS = 60_000;

/**
 * The unrevoked token whose SHA-256 matches, or null. Keeps `last_used_at` current, written
 * at most about once a minute per token (the UPDATE's WHERE makes the throttle atomic).
 */
export async function findActiveToken(db: D1Database, token: string, now: number): Promise<TokenRow | null> {
  if (!token.startsWith("gl_")) return null;
  const hash = await sha256Hex(token);
  const row = await db
    .prepare(
      "SELECT id, name, scopes, created_at, last_used_at, revoked_at FROM tokens WHERE token_hash = ? AND revoked_at IS NULL",
    )
    .bind(hash)
    .first();
  if (!row) return null;
  const parsed = TokenRowSchema.parse(row);
  if (!parsed.last_used_at || Date.parse(parsed.last_used_at) < now - LAST_USED_RESOLUTION_MS) {
    await db
      .prepare("UPDATE tokens SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)")
      .bind(iso(now), parsed.id, iso(now - LAST_USED_RESOLUTION_MS))
      .run();
  }
  return parsed;
}

export function parseTokenRow(row: unknown): TokenRow {
  return TokenRowSchema.parse(row);
}

/** Stores a new token by its SHA-256; the plain token is only returned to the caller. */
export async function insertToken(
  db: D1Database,
  token: { id: string; name: string; scopes: readonly Scope[]; secret: string; createdAt: number },
): Promise<TokenRow> {
  await db
    .prepare("INSERT INTO tokens (id, name, token_hash, scopes, created_at) VALUES (?, ?, ?, ?, ?)")
    .bind(token.id, token.name, await sha256Hex(token.secret), JSON.stringify(token.scopes), iso(token.createdAt))
    .run();
  return {
    id: token.id,
    name: token.name,
    scopes: [...token.scopes],
    created_at: iso(token.createdAt),
    last_used_at: null,
    revoked_at: null,
  };
}

/** Every token, revoked ones included, newest first. */
export async function listTokens(db: D1Database): Promise<TokenRow[]> {
  const { results } = await db
    .prepare(
      "SELECT id, name, scopes, created_at, last_used_at, revoked_at FROM tokens ORDER BY created_at DESC, id DESC",
    )
    .all();
  return results.map(parseTokenRow);
}

/** Marks the token revoked (keeping the first revocation time); false when no such token exists. */
export async function revokeToken(db: D1Database, id: string, now: number): Promise<boolean> {
  const row = await db
    .prepare("UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? RETURNING id")
    .bind(iso(now), id)
    .first();
  return row !== null;
}

/** The unrevoked token with this id, or null (a dashboard session re-reads its token's scopes this way). */
export async function findActiveTokenById(db: D1Database, id: string): Promise<TokenRow | null> {
  const row = await db
    .prepare(
      "SELECT id, name, scopes, created_at, last_used_at, revoked_at FROM tokens WHERE id = ? AND revoked_at IS NULL",
    )
    .bind(id)
    .first();
  return row ? parseTokenRow(row) : null;
}
