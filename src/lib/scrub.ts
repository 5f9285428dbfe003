import type { Config } from "../config";
import { providerSecretNames } from "../providers/catalogue";

const MAX_ERROR_CHARS = 300;

// Patterns that look like credentials whatever the provider: bearer headers, key params,
// JSON key fields (Vast's /users/current echoes api_key), our own and VRAMfarm's token formats.
const credentialPatterns: RegExp[] = [
  /(bearer\s+)[^\s"',;]+/gi,
  /((?:api[_-]?key|token|secret|password|authorization)["']?\s*[:=]\s*["']?)[^\s"',;&}]+/gi,
  /\bgl_[A-Za-z0-9_-]{8,}/g,
  /\bgf_live_[A-Za-z0-9_-]+/g,
  /\brpa_[A-Za-z0-9_-]{8,}/gi,
];

/**
 * Provider error text made safe to store and show: every known secret and anything shaped
 * like a credential is replaced, whitespace folded, and the result cut to a readable length.
 */
export function scrubText(
  text: string,
  secrets: readonly (string | null | undefined)[] = [],
  maxChars = MAX_ERROR_CHARS,
): string {
  let out = text;
  for (const secret of secrets) {
    if (secret && secret.length >= 4) out = out.split(secret).join("[redacted]");
  }
  for (const pattern of credentialPatterns) {
    out = out.replace(pattern, (match, keep?: string) =>
      typeof keep === "string" && match.startsWith(keep) ? `${keep}[redacted]` : "[redacted]",
    );
  }
  out = out.replace(/\s+/g, " ").trim();
  return out.length > maxChars ? `${out.slice(0, maxChars)}…` : out;
}

/** The worker's secrets: what every stored, logged or shown error is scrubbed of. */
export function secretsOf(config: Config): (string | null)[] {
  const s = config.secrets;
  return [s.adminToken, ...Object.values(s.providers), ...s.alsoHidden];
}

/** The same secrets read straight from the env, for a log line written when the config did not load. */
export function secretsOfEnv(env: Env): (string | undefined)[] {
  return [env.ADMIN_TOKEN, ...providerSecretNames.map((name) => env[name])];
}

/** An error's message, scrubbed of the worker's secrets: safe to store, log and show. */
export function scrubError(config: Config, error: unknown, fallback = ""): string {
  const text = error instanceof Error ? error.message : String(error);
  return scrubText(text || fallback, secretsOf(config));
}
