import { sha256Hex } from "../lib/crypto";

const BEARER = /^Bearer\s+([A-Za-z0-9._~+/=-]+)\s*$/i;
const encoder = new TextEncoder();

/**
 * True when the Authorization header carries the lease's call-back token: its SHA-256 is
 * compared with the stored one in constant time (both are 64 hex characters).
 */
export async function verifyCallbackToken(
  authorization: string | undefined,
  storedHash: string | null,
): Promise<boolean> {
  const token = BEARER.exec(authorization ?? "")?.[1];
  if (!token || !storedHash) return false;
  const given = encoder.encode(await sha256Hex(token));
  const expected = encoder.encode(storedHash);
  if (given.byteLength !== expected.byteLength) return false;
  return crypto.subtle.timingSafeEqual(given, expected);
}
