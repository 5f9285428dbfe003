import { randomSecret } from "../lib/crypto";
import { seal, unseal } from "../lib/sealing";

const PURPOSE = "inference keys v1";

/** A model lease's key for the LLM gateway (`glk_…`): shown once, stored as its SHA-256. */
export function newInferenceKey(): string {
  return `glk_${randomSecret()}`;
}

/**
 * A schedule's lease has nobody waiting for its rent answer: its key is sealed until the
 * lease.running webhook carries it (src/webhooks/sender.ts) and cleared when the lease stops.
 */
export function sealInferenceKey(key: string, adminToken: string): Promise<string> {
  return seal(key, adminToken, PURPOSE);
}

export function openInferenceKey(sealed: string, adminToken: string): Promise<string> {
  return unseal(sealed, adminToken, PURPOSE, "inference key");
}
