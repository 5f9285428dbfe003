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

/** Pieces of a multi-line or structured secret shorter than this are not hidden on their own. */
const MIN_PIECE_CHARS = 12;

const utf8Base64 = (text: string): string => {
  let binary = "";
  for (const byte of new TextEncoder().encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary);
};

/**
 * The forms a provider may quote a secret in: as given, JSON-escaped (graphql-js quotes its
 * input so, once or twice over), URL-encoded (both `%20` and form `+`), and base64 (standard and
 * URL-safe, unpadded). A secret holding newlines or quotes (a PEM key, a service-account JSON)
 * also gives each of its lines and quoted strings, so a message cut mid-value hides them too.
 */
export function formsOf(secret: string): string[] {
  const pieces = new Set([secret]);
  if (/[\n"\\]/.test(secret)) {
    for (const piece of secret.split(/\\n|[\r\n"\\]/)) {
      const trimmed = piece.trim();
      if (trimmed.length >= MIN_PIECE_CHARS) pieces.add(trimmed);
    }
  }
  const forms = new Set<string>();
  for (const piece of pieces) {
    const once = JSON.stringify(piece).slice(1, -1);
    const base64 = utf8Base64(piece);
    for (const form of [
      piece,
      once,
      JSON.stringify(once).slice(1, -1),
      encodeURIComponent(piece),
      new URLSearchParams({ v: piece }).toString().slice(2),
      base64,
      base64.replace(/=+$/, ""),
      base64.replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, ""),
    ])
      forms.add(form);
  }
  // Longest first: a whole value goes before the pieces it holds.
  return [...forms].filter((form) => form.length >= 4).sort((a, b) => b.length - a.length);
}

/**
 * Provider error text made safe to store and show: every known secret in every form it may be
 * quoted in (formsOf) and anything shaped like a credential is replaced, whitespace folded, and
 * the result cut to a readable length.
 */
export function scrubText(
  text: string,
  secrets: readonly (string | null | undefined)[] = [],
  maxChars = MAX_ERROR_CHARS,
): string {
  let out = text;
  const forms = secrets
    .filter((secret): secret is string => !!secret && secret.length >= 4)
    .flatMap(formsOf)
    .sort((a, b) => b.length - a.length);
  for (const form of forms) {
    if (out.includes(form)) out = out.split(form).join("[redacted]");
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
