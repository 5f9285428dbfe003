import { z } from "zod";
import type { Config } from "../config";
import { USER_AGENT } from "../version";
import { ModelNotFoundError, RegistryUnavailableError } from "./errors";
import type { ChunkSource } from "./gguf";
import { DEFAULT_REGISTRY_HOST, type ModelRef } from "./reference";

/**
 * The registry protocol Ollama pulls with (ollama/ollama server/images.go `pullModelManifest`,
 * server/download.go): a Docker-v2-style manifest, then blobs that redirect to a CDN and are
 * read by byte range. hf.co answers the same protocol at https://hf.co/v2/... .
 */

/** The Accept header Ollama sends for a manifest (server/images.go). */
export const MANIFEST_ACCEPT = "application/vnd.docker.distribution.manifest.v2+json";

export const MEDIA_TYPE = {
  model: "application/vnd.ollama.image.model",
  projector: "application/vnd.ollama.image.projector",
  adapter: "application/vnd.ollama.image.adapter",
  /** safetensors weights, run only by Ollama's MLX runtime (ollama/ollama `server/images.go` `hasTensorLayers`) */
  tensor: "application/vnd.ollama.image.tensor",
} as const;

const MANIFEST_TIMEOUT_MS = 10_000;
const BLOB_TIMEOUT_MS = 30_000;
const MAX_MANIFEST_BYTES = 1024 * 1024;
/** Ollama follows at most 10 redirects to a blob (ollama/ollama `server/download.go`). */
const MAX_REDIRECTS = 10;
const FIRST_RANGE_BYTES = 1024 * 1024;

const LayerSchema = z.object({
  mediaType: z.string(),
  digest: z.string().regex(/^sha256:[0-9a-f]{64}$/),
  size: z.number().int().nonnegative(),
});

const ManifestSchema = z.object({
  schemaVersion: z.literal(2),
  layers: z.array(LayerSchema),
});

export type ManifestLayer = z.infer<typeof LayerSchema>;

export interface Manifest {
  /** "sha256:" + sha256 of the manifest's bytes, as Ollama computes a model's digest (ollama/ollama `manifest/manifest.go`) */
  digest: string;
  layers: ManifestLayer[];
}

/** Where a reference's registry answers: OLLAMA_REGISTRY_URL for the default host, else https://<host>. */
export function registryBase(ref: ModelRef, config: Pick<Config, "ollamaRegistryUrl">): string {
  return ref.host === DEFAULT_REGISTRY_HOST ? config.ollamaRegistryUrl : `https://${ref.host}`;
}

const repoPath = (ref: ModelRef) => `${encodeURIComponent(ref.namespace)}/${encodeURIComponent(ref.name)}`;

export function manifestUrl(ref: ModelRef, config: Pick<Config, "ollamaRegistryUrl">): string {
  return `${registryBase(ref, config)}/v2/${repoPath(ref)}/manifests/${encodeURIComponent(ref.tag)}`;
}

export function blobUrl(ref: ModelRef, config: Pick<Config, "ollamaRegistryUrl">, digest: string): string {
  return `${registryBase(ref, config)}/v2/${repoPath(ref)}/blobs/${digest}`;
}

const hostOf = (url: string) => new URL(url).host;

/** A registry failure for the user: the host and what went wrong, never a body or a (signed) URL. */
function unavailable(url: string, what: string): RegistryUnavailableError {
  return new RegistryUnavailableError(`the model registry (${hostOf(url)}) ${what}`);
}

const isTimeout = (cause: unknown) =>
  (cause instanceof Error || cause instanceof DOMException) &&
  (cause.name === "TimeoutError" || cause.name === "AbortError");

function transportFailure(url: string, cause: unknown, timeoutMs: number): RegistryUnavailableError {
  if (isTimeout(cause)) return unavailable(url, `did not answer within ${timeoutMs / 1000} s`);
  return unavailable(url, "could not be reached");
}

const RETRYABLE = (status: number) => status === 429 || status >= 500;

async function sha256Hex(bytes: ArrayBuffer): Promise<string> {
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(hash, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** GET the manifest of `ref`: 404 → ModelNotFoundError; down, 5xx, timeouts, junk → RegistryUnavailableError. */
export async function fetchManifest(
  ref: ModelRef,
  config: Pick<Config, "ollamaRegistryUrl">,
  fetchImpl: typeof fetch,
): Promise<Manifest> {
  const url = manifestUrl(ref, config);
  let response: Response | null = null;
  // One more try after a 5xx or a dropped connection; a timeout is not tried twice.
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      response = await fetchImpl(url, {
        headers: { Accept: MANIFEST_ACCEPT, "User-Agent": USER_AGENT },
        signal: AbortSignal.timeout(MANIFEST_TIMEOUT_MS),
      });
    } catch (cause) {
      if (attempt === 0 && !isTimeout(cause)) continue;
      throw transportFailure(url, cause, MANIFEST_TIMEOUT_MS);
    }
    if (!(RETRYABLE(response.status) && attempt === 0)) break;
    await response.body?.cancel();
  }
  if (!response) throw unavailable(url, "could not be reached");
  const status = response.status;
  if (status === 404) {
    await response.body?.cancel();
    throw new ModelNotFoundError(`model ${ref.canonical} not found in the registry (${hostOf(url)})`);
  }
  if (status === 401 || status === 403) {
    await response.body?.cancel();
    throw new ModelNotFoundError(
      `model ${ref.canonical} is not public in the registry (${hostOf(url)} answered HTTP ${status})`,
    );
  }
  if (status !== 200) {
    await response.body?.cancel();
    throw unavailable(url, `answered HTTP ${status}`);
  }
  let bytes: ArrayBuffer;
  try {
    bytes = await response.arrayBuffer();
  } catch (cause) {
    throw transportFailure(url, cause, MANIFEST_TIMEOUT_MS);
  }
  if (bytes.byteLength > MAX_MANIFEST_BYTES) throw unavailable(url, "sent a manifest larger than 1 MiB");
  let parsed: z.infer<typeof ManifestSchema>;
  try {
    parsed = ManifestSchema.parse(JSON.parse(new TextDecoder().decode(bytes)));
  } catch {
    throw unavailable(url, `sent a manifest for ${ref.canonical} that is not a model manifest`);
  }
  return { digest: `sha256:${await sha256Hex(bytes)}`, layers: parsed.layers };
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/** A streamed blob, read range after range (each twice the last) up to `maxBytes`. */
export interface BlobReader {
  next: ChunkSource;
  close(): Promise<void>;
}

/**
 * Reads a blob from its start: the registry redirects to a CDN (307 from registry.ollama.ai,
 * 302 from hf.co), and as Ollama does, the redirect is resolved once and the ranges go to the
 * CDN's URL. Redirects are followed by hand so the Range header travels with each hop.
 */
export function openBlob(url: string, blobSize: number, maxBytes: number, fetchImpl: typeof fetch): BlobReader {
  const end = Math.min(blobSize, maxBytes);
  let target = url;
  let offset = 0;
  let rangeBytes = FIRST_RANGE_BYTES;
  let body: ReadableStreamDefaultReader<Uint8Array> | null = null;
  /** the server ignored Range and sends the whole file: the stream's end is the file's end */
  let whole = false;
  /** bytes of a whole-file answer to drop before `offset` */
  let drop = 0;

  async function request(first: number, last: number): Promise<Response> {
    const range = `bytes=${first}-${last}`;
    for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
      let response: Response;
      try {
        response = await fetchImpl(target, {
          headers: { Range: range, "User-Agent": USER_AGENT },
          redirect: "manual",
          signal: AbortSignal.timeout(BLOB_TIMEOUT_MS),
        });
      } catch (cause) {
        throw transportFailure(url, cause, BLOB_TIMEOUT_MS);
      }
      const location = response.headers.get("Location");
      if (!REDIRECTS.has(response.status) || !location) return response;
      await response.body?.cancel();
      const next = new URL(location, target);
      if (next.protocol !== "https:" && next.protocol !== "http:")
        throw unavailable(url, "redirected a blob elsewhere");
      target = next.toString();
    }
    throw unavailable(url, `redirected a blob more than ${MAX_REDIRECTS} times`);
  }

  async function openNextRange(): Promise<boolean> {
    if (offset >= end) return false;
    const last = Math.min(offset + rangeBytes, end) - 1;
    rangeBytes *= 2;
    const response = await request(offset, last);
    if (response.status === 416) {
      await response.body?.cancel();
      return false;
    }
    if (response.status === 206) {
      const start = /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(response.headers.get("Content-Range") ?? "")?.[1];
      if (start === undefined || Number(start) !== offset) {
        await response.body?.cancel();
        throw unavailable(url, "answered a blob range with another range");
      }
    } else if (response.status === 200) {
      whole = true;
      drop = offset;
    } else {
      await response.body?.cancel();
      throw unavailable(url, `answered HTTP ${response.status} for the model blob`);
    }
    if (!response.body) throw unavailable(url, "sent an empty blob");
    body = response.body.getReader();
    return true;
  }

  async function close(): Promise<void> {
    await body?.cancel().catch(() => {});
    body = null;
  }

  async function next(): Promise<Uint8Array | null> {
    for (;;) {
      // Past the bound (or the blob's end) nothing more is read, even of a whole-file answer.
      if (offset >= end) {
        await close();
        return null;
      }
      if (!body && (whole || !(await openNextRange()))) return null;
      let read: ReadableStreamReadResult<Uint8Array>;
      try {
        read = await body!.read();
      } catch (cause) {
        throw transportFailure(url, cause, BLOB_TIMEOUT_MS);
      }
      if (read.done) {
        body = null;
        continue;
      }
      let chunk = read.value;
      if (drop > 0) {
        const skipped = Math.min(drop, chunk.length);
        drop -= skipped;
        chunk = chunk.subarray(skipped);
      }
      if (chunk.length === 0) continue;
      if (offset + chunk.length > end) chunk = chunk.subarray(0, end - offset);
      offset += chunk.length;
      return chunk;
    }
  }

  return { next, close };
}
