import { z } from "zod";
import type { Config } from "../config";
import { USER_AGENT } from "../version";
import { ModelNotFoundError, RegistryUnavailableError } from "./errors";
import type { ChunkSource } from "./gguf";
import { DEFAULT_REGISTRY_HOST, type ModelRef } from "./reference";
import { redirectAllowed, registryAllowed } from "./registries";

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
  /** the Modelfile's PARAMETERs as JSON (`{"num_ctx": 8192, "stop": [...]}`) */
  params: "application/vnd.ollama.image.params",
  /** safetensors weights, run only by Ollama's MLX runtime (ollama/ollama `server/images.go` `hasTensorLayers`) */
  tensor: "application/vnd.ollama.image.tensor",
} as const;

const MANIFEST_TIMEOUT_MS = 10_000;
const BLOB_TIMEOUT_MS = 30_000;
const MAX_MANIFEST_BYTES = 1024 * 1024;
/** Ollama follows at most 10 redirects to a blob (ollama/ollama `server/download.go`); a registry needs one or two. */
const MAX_REDIRECTS = 5;
const FIRST_RANGE_BYTES = 1024 * 1024;
/**
 * Requests one blob read may make, redirects included. Honest ranges reach the 32 MiB header
 * bound in 6 (1 + 2 + 4 + … MiB); a server answering each range with a few bytes stops here.
 */
export const MAX_BLOB_REQUESTS = 16;
/** A layer larger than this (4 TiB) is no model a rented GPU loads; sizes are summed below it. */
const MAX_LAYER_BYTES = 4 * 1024 ** 4;

const LayerSchema = z.object({
  mediaType: z.string().max(200),
  digest: z.string().regex(/^sha256:[0-9a-f]{64}$/),
  size: z.number().int().nonnegative().max(MAX_LAYER_BYTES),
});

const ManifestSchema = z.object({
  schemaVersion: z.literal(2),
  layers: z.array(LayerSchema).max(256),
});

export type ManifestLayer = z.infer<typeof LayerSchema>;

export interface Manifest {
  /** "sha256:" + sha256 of the manifest's bytes, as Ollama computes a model's digest (ollama/ollama `manifest/manifest.go`) */
  digest: string;
  layers: ManifestLayer[];
}

type RegistryConfig = Pick<Config, "ollamaRegistryUrl" | "ollamaRegistries">;

/** A reference naming a registry OLLAMA_REGISTRIES does not list: a 400 naming the setting. */
export class RegistryNotAllowedError extends Error {
  constructor(host: string) {
    super(`the registry ${host} is not one of OLLAMA_REGISTRIES (docs/models.md#registries)`);
    this.name = "RegistryNotAllowedError";
  }
}

/**
 * Where a reference's registry answers: OLLAMA_REGISTRY_URL for the default host, else
 * https://<host>; a host OLLAMA_REGISTRIES does not list is never asked.
 */
export function registryBase(ref: ModelRef, config: RegistryConfig): string {
  if (!registryAllowed(ref.host, config.ollamaRegistries)) throw new RegistryNotAllowedError(ref.host);
  return ref.host === DEFAULT_REGISTRY_HOST ? config.ollamaRegistryUrl : `https://${ref.host}`;
}

const repoPath = (ref: ModelRef) => `${encodeURIComponent(ref.namespace)}/${encodeURIComponent(ref.name)}`;

export function manifestUrl(ref: ModelRef, config: RegistryConfig): string {
  return `${registryBase(ref, config)}/v2/${repoPath(ref)}/manifests/${encodeURIComponent(ref.tag)}`;
}

export function blobUrl(ref: ModelRef, config: RegistryConfig, digest: string): string {
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

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(hash, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** GET the manifest of `ref`: 404 → ModelNotFoundError; down, 5xx, timeouts, junk → RegistryUnavailableError. */
export async function fetchManifest(ref: ModelRef, config: RegistryConfig, fetchImpl: typeof fetch): Promise<Manifest> {
  const url = manifestUrl(ref, config);
  const follows = (next: URL) => redirectAllowed(next, new URL(url).origin, ref.host, config.ollamaRegistries);
  let response: Response | null = null;
  // One more try after a 5xx or a dropped connection; a timeout is not tried twice.
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      response = await fetchFollowing(url, follows, fetchImpl, {
        headers: { Accept: MANIFEST_ACCEPT, "User-Agent": USER_AGENT },
        timeoutMs: MANIFEST_TIMEOUT_MS,
      });
    } catch (cause) {
      if (cause instanceof RegistryUnavailableError) throw cause;
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
  let bytes: Uint8Array | null;
  try {
    bytes = await readBounded(response, MAX_MANIFEST_BYTES);
  } catch (cause) {
    throw transportFailure(url, cause, MANIFEST_TIMEOUT_MS);
  }
  if (bytes === null) throw unavailable(url, "sent a manifest larger than 1 MiB");
  let parsed: z.infer<typeof ManifestSchema>;
  try {
    parsed = ManifestSchema.parse(JSON.parse(new TextDecoder().decode(bytes)));
  } catch {
    throw unavailable(url, `sent a manifest for ${ref.canonical} that is not a model manifest`);
  }
  return { digest: `sha256:${await sha256Hex(bytes)}`, layers: parsed.layers };
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/**
 * A body read as a stream up to `maxBytes`: null (and the rest cancelled, never read) past it.
 * A Content-Length above the bound is refused before any byte is read.
 */
async function readBounded(response: Response, maxBytes: number): Promise<Uint8Array | null> {
  const declared = Number(response.headers.get("Content-Length") ?? "0");
  if (declared > maxBytes || !response.body) {
    await response.body?.cancel();
    return declared > maxBytes ? null : new Uint8Array(0);
  }
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let length = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    length += value.length;
    if (length > maxBytes) {
      await reader.cancel().catch(() => {});
      return null;
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.length;
  }
  return bytes;
}

/**
 * GET with redirects followed by hand (the runtime would follow them anywhere): at most
 * MAX_REDIRECTS hops, each to a URL `follows` allows, else RegistryUnavailableError naming the
 * first URL's host. `onRequest` counts every request sent (a cap on subrequests).
 */
async function fetchFollowing(
  url: string,
  follows: (next: URL) => boolean,
  fetchImpl: typeof fetch,
  init: { headers: Record<string, string>; timeoutMs: number; onRequest?: (target: string) => void },
): Promise<Response & { finalUrl?: string }> {
  let target = url;
  for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
    init.onRequest?.(target);
    const response = await fetchImpl(target, {
      headers: init.headers,
      redirect: "manual",
      signal: AbortSignal.timeout(init.timeoutMs),
    });
    const location = response.headers.get("Location");
    if (!REDIRECTS.has(response.status) || !location) return Object.assign(response, { finalUrl: target });
    await response.body?.cancel();
    let next: URL;
    try {
      next = new URL(location, target);
    } catch {
      throw unavailable(url, "redirected to an address that is not a URL");
    }
    if (!follows(next)) throw unavailable(url, "redirected to a host that is not its blob store");
    target = next.toString();
  }
  throw unavailable(url, `redirected more than ${MAX_REDIRECTS} times`);
}

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
export function openBlob(
  url: string,
  blobSize: number,
  maxBytes: number,
  fetchImpl: typeof fetch,
  follows: (next: URL) => boolean,
): BlobReader {
  const end = Math.min(blobSize, maxBytes);
  let requests = 0;
  const countRequest = () => {
    requests++;
    if (requests > MAX_BLOB_REQUESTS)
      throw unavailable(url, `needed more than ${MAX_BLOB_REQUESTS} requests for the model blob`);
  };
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
    let response: Response & { finalUrl?: string };
    try {
      response = await fetchFollowing(target, follows, fetchImpl, {
        headers: { Range: range, "User-Agent": USER_AGENT },
        timeoutMs: BLOB_TIMEOUT_MS,
        onRequest: countRequest,
      });
    } catch (cause) {
      if (cause instanceof RegistryUnavailableError) throw cause;
      throw transportFailure(url, cause, BLOB_TIMEOUT_MS);
    }
    // As Ollama does, the redirect is resolved once and the next ranges go to the blob store.
    target = response.finalUrl ?? target;
    return response;
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
