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
export function scrubText(text: string, secrets: readonly (string | null | undefined)[] = []): string {
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
  return out.length > MAX_ERROR_CHARS ? `${out.slice(0, MAX_ERROR_CHARS)}…` : out;
}
