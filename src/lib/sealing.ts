const encoder = new TextEncoder();
const decoder = new TextDecoder();
const SEALED_PREFIX = "v1:";

/** Thrown when a sealed value cannot be opened (malformed, or ADMIN_TOKEN changed). */
export class SealError extends Error {}

/**
 * AES-GCM key derived from ADMIN_TOKEN with HKDF, one per purpose: the worker must read some
 * secrets back (a webhook's signing secret, a schedule lease's inference key until its webhook
 * is sent), but a copy of the database alone reveals none of them.
 */
async function sealingKey(adminToken: string, purpose: string): Promise<CryptoKey> {
  const material = await crypto.subtle.importKey("raw", encoder.encode(adminToken), "HKDF", false, ["deriveKey"]);
  return crypto.subtle.deriveKey(
    { name: "HKDF", hash: "SHA-256", salt: encoder.encode("gpulease"), info: encoder.encode(purpose) },
    material,
    { name: "AES-GCM", length: 256 },
    false,
    ["encrypt", "decrypt"],
  );
}

function toBase64(bytes: Uint8Array): string {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

function fromBase64(text: string): Uint8Array {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

export async function seal(text: string, adminToken: string, purpose: string): Promise<string> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const sealed = await crypto.subtle.encrypt(
    { name: "AES-GCM", iv },
    await sealingKey(adminToken, purpose),
    encoder.encode(text),
  );
  return `${SEALED_PREFIX}${toBase64(iv)}:${toBase64(new Uint8Array(sealed))}`;
}

/** The sealed text; SealError with `what` named when it is malformed or sealed under another key. */
export async function unseal(stored: string, adminToken: string, purpose: string, what: string): Promise<string> {
  const [iv, data] = stored.startsWith(SEALED_PREFIX) ? stored.slice(SEALED_PREFIX.length).split(":") : [];
  if (!iv || !data) throw new SealError(`the stored ${what} is malformed`);
  try {
    const opened = await crypto.subtle.decrypt(
      { name: "AES-GCM", iv: fromBase64(iv) },
      await sealingKey(adminToken, purpose),
      fromBase64(data),
    );
    return decoder.decode(opened);
  } catch {
    throw new SealError(`the ${what} cannot be opened (was ADMIN_TOKEN changed?)`);
  }
}
