import { z } from "zod";
import { randomSecret, secretsEqual, sha256Hex } from "../lib/crypto";
import { iso } from "../lib/time";
import type { Caller, Services } from "../services";
import { findActiveTokenById } from "./tokens-store";

/** A session lasts this long from sign-in, however busy it is. */
export const SESSION_TTL_MS = 12 * 3_600_000;
/**
 * Live sessions one token may hold (a browser each); signing in once more ends its oldest. Without
 * it any token, read-only too, could keep an unbounded number of rows alive for 12 hours.
 */
export const SESSIONS_PER_TOKEN = 10;

const SessionRowSchema = z.object({
  id_hash: z.string(),
  token_id: z.string().nullable(),
  admin_digest: z.string().nullable(),
  csrf: z.string(),
  expires_at: z.string(),
});

/** A live session: who it acts as, and the value its forms must echo back. */
export interface Session {
  idHash: string;
  caller: Caller;
  csrf: string;
}

/**
 * The admin secret is never stored; a salted digest of it is, so a session opened with the old
 * ADMIN_TOKEN stops matching the moment the secret is changed.
 */
const adminDigest = (adminToken: string) => sha256Hex(`gpulease dashboard session:${adminToken}`);

/** Opens a session for `caller` and returns the cookie value (shown only to the browser). */
export async function openSession(services: Services, caller: Caller): Promise<{ cookie: string; session: Session }> {
  const { db, clock, config } = services;
  const now = clock();
  const cookie = randomSecret(32);
  const idHash = await sha256Hex(cookie);
  const csrf = randomSecret(24);
  const digest =
    caller.tokenId === null && config.secrets.adminToken ? await adminDigest(config.secrets.adminToken) : null;
  await db.batch([
    db.prepare("DELETE FROM dashboard_sessions WHERE expires_at < ?").bind(iso(now)),
    db
      .prepare(
        "INSERT INTO dashboard_sessions (id_hash, token_id, admin_digest, csrf, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
      )
      .bind(idHash, caller.tokenId, digest, csrf, iso(now), iso(now + SESSION_TTL_MS)),
    // One statement in the same batch (D1 has no BEGIN): the token's newest sessions stay, the
    // rest go. `IS` matches ADMIN_TOKEN's sessions too, whose token_id is NULL.
    db
      .prepare(
        `DELETE FROM dashboard_sessions WHERE token_id IS ?1 AND id_hash NOT IN (
          SELECT id_hash FROM dashboard_sessions WHERE token_id IS ?1 ORDER BY created_at DESC, rowid DESC LIMIT ?2
        )`,
      )
      .bind(caller.tokenId, SESSIONS_PER_TOKEN),
  ]);
  return { cookie, session: { idHash, caller, csrf } };
}

/**
 * The session behind a cookie value, checked against the present: unexpired, its token still
 * unrevoked (scopes read afresh), or for ADMIN_TOKEN sessions the secret unchanged. A session
 * that fails any of these is deleted and null is returned.
 */
export async function resumeSession(services: Services, cookie: string | undefined): Promise<Session | null> {
  if (!cookie || cookie.length > 200) return null;
  const { db, clock, config } = services;
  const idHash = await sha256Hex(cookie);
  const found = await db
    .prepare("SELECT id_hash, token_id, admin_digest, csrf, expires_at FROM dashboard_sessions WHERE id_hash = ?")
    .bind(idHash)
    .first();
  if (!found) return null;
  const row = SessionRowSchema.parse(found);
  let caller: Caller | null = null;
  if (Date.parse(row.expires_at) > clock()) {
    if (row.token_id !== null) {
      const token = await findActiveTokenById(db, row.token_id);
      if (token) caller = { tokenId: token.id, scopes: token.scopes };
    } else if (row.admin_digest && config.secrets.adminToken) {
      const current = await adminDigest(config.secrets.adminToken);
      if (await secretsEqual(row.admin_digest, current)) caller = { tokenId: null, scopes: ["admin"] };
    }
  }
  if (!caller) {
    await closeSession(db, idHash);
    return null;
  }
  return { idHash, caller, csrf: row.csrf };
}

/** Ends a session (sign-out, or found stale). */
export async function closeSession(db: D1Database, idHash: string): Promise<void> {
  await db.prepare("DELETE FROM dashboard_sessions WHERE id_hash = ?").bind(idHash).run();
}
