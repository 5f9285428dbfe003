import { bearerToken, secretsEqual, sha256Hex } from "../lib/crypto";

/**
 * True when the Authorization header carries the lease's call-back token: its SHA-256 is
 * compared with the stored one in constant time.
 */
export async function verifyCallbackToken(
  authorization: string | undefined,
  storedHash: string | null,
): Promise<boolean> {
  const token = bearerToken(authorization);
  if (!token || !storedHash) return false;
  return secretsEqual(await sha256Hex(token), storedHash);
}
