import { z } from "zod";

/**
 * Which registries a model reference may name (OLLAMA_REGISTRIES), and where each may redirect a
 * blob read (docs/models.md#registries). Ollama itself sends `https://<host>/v2/...` to whatever
 * host a reference names (ollama/ollama `types/model/name.go`, `server/images.go`); a worker that
 * did so would fetch for any caller from link-local, loopback and private addresses.
 */

/** The Ollama registry and Hugging Face, under both names Hugging Face documents for Ollama. */
export const DEFAULT_REGISTRIES = ["registry.ollama.ai", "hf.co", "huggingface.co"] as const;

const HUGGING_FACE_STORES = ["hf.co", "huggingface.co"];

/**
 * The blob stores a known registry redirects a blob to, as domain suffixes: registry.ollama.ai
 * answers a blob with a 307 to Cloudflare R2 (`<account>.r2.cloudflarestorage.com`), Hugging Face
 * with a 302 to its Xet CAS bridge or LFS CDN (`cas-bridge.xethub.hf.co`, `cdn-lfs*.hf.co`).
 * A registry not named here may redirect only to itself or its own subdomains.
 */
const BLOB_STORES: Record<string, readonly string[]> = {
  "registry.ollama.ai": ["r2.cloudflarestorage.com"],
  "hf.co": HUGGING_FACE_STORES,
  "huggingface.co": HUGGING_FACE_STORES,
};

const HOST = /^[a-z0-9_]([a-z0-9_.-]{0,252})(:\d{1,5})?$/;

/** OLLAMA_REGISTRIES: comma-separated registry hosts (host or host:port), compared without case. */
export const registryHosts = z
  .string()
  .trim()
  .transform((v) =>
    v
      .split(",")
      .map((host) => host.trim().toLowerCase())
      .filter((host) => host !== ""),
  )
  .pipe(
    z
      .array(z.string().regex(HOST, "a registry host such as registry.ollama.ai or hf.co (no scheme, no path)"))
      .min(1, "name at least one registry host"),
  );

export function registryAllowed(host: string, registries: readonly string[]): boolean {
  return registries.includes(host.toLowerCase());
}

const withinDomain = (hostname: string, domain: string) => hostname === domain || hostname.endsWith(`.${domain}`);

/**
 * May a read that began at `registryHost` (at `origin`, the URL it was sent to) go on to `next`?
 * The registry's own origin (an OLLAMA_REGISTRY_URL mirror, loopback in tests, included), any
 * allowed registry, or over https on the default port the registry's blob stores.
 */
export function redirectAllowed(
  next: URL,
  origin: string,
  registryHost: string,
  registries: readonly string[],
): boolean {
  if (next.username || next.password) return false;
  if (next.origin === origin) return true;
  if (next.protocol !== "https:" || next.port !== "") return false;
  if (registryAllowed(next.host, registries)) return true;
  const hostname = next.hostname.toLowerCase();
  const stores = BLOB_STORES[registryHost] ?? [registryHost];
  return stores.some((store) => withinDomain(hostname, store));
}
