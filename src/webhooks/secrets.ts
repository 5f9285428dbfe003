import { randomSecret } from "../lib/crypto";
import { seal, unseal } from "../lib/sealing";

export { SealError } from "../lib/sealing";

const PURPOSE = "webhook secrets v1";

/** A new signing secret, shown to the caller once. */
export function newWebhookSecret(): string {
  return `whsec_${randomSecret(32)}`;
}

/** The worker signs with the secret, so it keeps it sealed (API tokens, by contrast, are hashed). */
export function sealSecret(secret: string, adminToken: string): Promise<string> {
  return seal(secret, adminToken, PURPOSE);
}

export function openSecret(stored: string, adminToken: string): Promise<string> {
  return unseal(stored, adminToken, PURPOSE, "webhook secret");
}
