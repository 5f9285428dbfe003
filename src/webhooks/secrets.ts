import { randomSecret } from "../lib/crypto";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const SEALED_PREFIX = "v1:";

/** A new signing secret, shown to the caller once. */
export function newWebhookSecret(): string {
  return `whsec_${randomSecret(32)}`;
}

/** The secret is thrown when a stored webhook secret cannot be opened (ADMIN_TOKEN changed). */
export class SealError extends Error {}

/**
 * AES-GCM key derived from ADMIN_TOKEN with HKDF: the worker must read a webhook's secret back
 * to sign with it (unlike API tokens, which are stored hashed), but a copy of the database alone
 * does not reveal any.
 */
async function sealingKey(adminToken: string): Promise<CryptoKey> {
  const material = await crypto.subtle.importKey("raw", encoder.encode(adminToken), "HKDF", false, ["deriveKey"]);
  return crypto.subtle.deriveKey(
    { name: "HKDF", hash: "SHA-256", salt: encoder.encode("gpulease"), info: encoder.encode("webhook secrets v1") },
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

export async function sealSecret(secret: string, adminToken: string): Promise<string> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const sealed = await crypto.subtle.encrypt(
    { name: "AES-GCM", iv },
    await sealingKey(adminToken),
    encoder.encode(secret),
  );
  return `${SEALED_PREFIX}${toBase64(iv)}:${toBase64(new Uint8Array(sealed))}`;
}

export async function openSecret(stored: string, adminToken: string): Promise<string> {
  const [iv, data] = stored.startsWith(SEALED_PREFIX) ? stored.slice(SEALED_PREFIX.length).split(":") : [];
  if (!iv || !data) throw new SealError("the stored webhook secret is malformed");
  try {
    const opened = await crypto.subtle.decrypt(
      { name: "AES-GCM", iv: fromBase64(iv) },
      await sealingKey(adminToken),
      fromBase64(data),
    );
    return decoder.decode(opened);
  } catch {
    throw new SealError("the webhook secret cannot be opened (was ADMIN_TOKEN changed?); re-create the webhook");
  }
}
