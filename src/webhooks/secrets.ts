import { seal, unseal } from "../lib/sealing";

export { SealError } from "../lib/sealing";

const PURPOSE = "webhook secrets v1";

/**
 * A new signing secret, shown to the caller once: `whsec_` and 32 random bytes in standard
 * base64, the form the Standard Webhooks libraries decode.
 */
export function newWebhookSecret(): string {
  const raw = crypto.getRandomValues(new Uint8Array(32));
  let binary = "";
  for (const b of raw) binary += String.fromCharCode(b);
  return `whsec_${btoa(binary)}`;
}

/** The worker signs with the secret, so it keeps it sealed (API tokens, by contrast, are hashed). */
export function sealSecret(secret: string, adminToken: string): Promise<string> {
  return seal(secret, adminToken, PURPOSE);
}

export function openSecret(stored: string, adminToken: string): Promise<string> {
  return unseal(stored, adminToken, PURPOSE, "webhook secret");
}
