import { ModelNotFoundError } from "../../models/errors";
import { type ModelLibrary, readModelFacts } from "../../models/facts";
import { DEFAULT_REGISTRY_HOST } from "../../models/reference";
import { MEDIA_TYPE } from "../../models/registry";
import { ggufHeaderOf } from "./gguf-header";
import { libraryProfile } from "./library";

/**
 * The sim's model library as a registry (SIM_MODELS=library, the default with ENABLE_SIM): the
 * registry protocol Ollama pulls with (src/models/registry.ts), answered in process from the
 * library's profiles, so `npm start` sizes and pulls models with no network at all. The worker
 * sizes a sim offer from it (the sim provider's `modelLibrary`) and the sim's machines pull their
 * manifests from it (src/sim/cloud.ts). It is never reached by fetching a host: its address is a
 * name under `.invalid` (RFC 2606), which nothing resolves, and only `libraryFetch` answers it.
 */

const LIBRARY_HOST = "library.sim.invalid";
export const SIM_LIBRARY_URL = `https://${LIBRARY_HOST}`;

/**
 * The models it serves and their weights' bytes: the registry's own for llama3.2:1b, qwen2.5:32b
 * and qwen2.5:72b (as test/fakes/ollama-registry.ts has them), the sizes the Ollama library lists
 * for the others (2.0, 4.7 and 4.9 GB).
 */
const WEIGHTS: Record<string, number> = {
  "llama3.2:1b": 1_321_082_688,
  "llama3.2:3b": 2_019_377_376,
  "qwen2.5:7b": 4_683_073_184,
  "llama3.1:8b": 4_920_753_328,
  "qwen2.5:32b": 19_851_335_840,
  "qwen2.5:72b": 47_415_713_568,
};
/** Tags that name another's build (one manifest, one digest). */
const ALIASES: Record<string, string> = { "llama3.2:latest": "llama3.2:3b" };

export const SIM_LIBRARY_MODELS = [...Object.keys(WEIGHTS), ...Object.keys(ALIASES)];

interface Blob {
  size: number;
  /** its first bytes; zeros follow up to `size` */
  head: Uint8Array;
}

const blobs = new Map<string, Blob>();
const manifests = new Map<string, Promise<string | null>>();

async function sha256Hex(text: string): Promise<string> {
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return Array.from(hash, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The manifest body of a served model (its blobs registered), or null when it serves none by that name. */
function manifestOf(name: string): Promise<string | null> {
  const build = ALIASES[name] ?? name;
  let body = manifests.get(build);
  if (!body) {
    body = buildManifest(build);
    manifests.set(build, body);
  }
  return body;
}

async function buildManifest(build: string): Promise<string | null> {
  const weights = WEIGHTS[build];
  const profile = libraryProfile(build);
  if (weights === undefined || !profile) return null;
  const encoder = new TextEncoder();
  const layers: { mediaType: string; blob: Blob }[] = [
    { mediaType: MEDIA_TYPE.model, blob: { size: weights, head: ggufHeaderOf(profile) } },
    { mediaType: "application/vnd.ollama.image.template", blob: { size: 1_429, head: new Uint8Array(0) } },
  ];
  if (profile.num_ctx !== undefined) {
    const params = encoder.encode(JSON.stringify({ num_ctx: profile.num_ctx }));
    layers.push({ mediaType: MEDIA_TYPE.params, blob: { size: params.length, head: params } });
  }
  const described = await Promise.all(
    layers.map(async ({ mediaType, blob }, i) => {
      const digest = `sha256:${await sha256Hex(`${build}#${i}#${mediaType}#${blob.size}`)}`;
      blobs.set(digest, blob);
      return { mediaType, digest, size: blob.size };
    }),
  );
  return JSON.stringify({
    schemaVersion: 2,
    mediaType: "application/vnd.docker.distribution.manifest.v2+json",
    config: {
      mediaType: "application/vnd.docker.container.image.v1+json",
      digest: `sha256:${await sha256Hex(`${build}#config`)}`,
      size: 485,
    },
    layers: described,
  });
}

const errorBody = (code: string, message: string) =>
  new Response(JSON.stringify({ errors: [{ code, message }] }), {
    status: 404,
    headers: { "Content-Type": "application/json" },
  });

/** `length` bytes of a blob from `start`: its head, then zeros; made as read, never held whole. */
function blobStream(blob: Blob, start: number, length: number): ReadableStream<Uint8Array> {
  let at = start;
  const end = start + length;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (at >= end) {
        controller.close();
        return;
      }
      const chunk = new Uint8Array(Math.min(64 * 1024, end - at));
      if (at < blob.head.length) chunk.set(blob.head.subarray(at, Math.min(blob.head.length, at + chunk.length)));
      at += chunk.length;
      controller.enqueue(chunk);
    },
  });
}

function blobResponse(blob: Blob, range: string | null): Response {
  const asked = /^bytes=(\d+)-(\d*)$/.exec(range ?? "");
  if (!asked) {
    return new Response(blobStream(blob, 0, blob.size), {
      headers: { "Content-Length": String(blob.size), "Accept-Ranges": "bytes" },
    });
  }
  const first = Number(asked[1]);
  const last = Math.min(asked[2] ? Number(asked[2]) : blob.size - 1, blob.size - 1);
  if (first >= blob.size)
    return new Response(null, { status: 416, headers: { "Content-Range": `bytes */${blob.size}` } });
  return new Response(blobStream(blob, first, last - first + 1), {
    status: 206,
    headers: { "Content-Range": `bytes ${first}-${last}/${blob.size}`, "Content-Length": String(last - first + 1) },
  });
}

/**
 * The library's registry, in process: manifests (404 MANIFEST_UNKNOWN for a model it does not
 * serve) and blobs by byte range. Any other address is a 404 too: it never fetches anything.
 */
export async function libraryFetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
  const request = new Request(input, init);
  const url = new URL(request.url);
  const path = /^\/v2\/library\/([^/]+)\/(manifests|blobs)\/([^/]+)$/.exec(url.pathname);
  if (url.origin !== SIM_LIBRARY_URL || request.method !== "GET" || !path) {
    return errorBody("NAME_UNKNOWN", "repository name not known to registry");
  }
  const [, name, what, ref] = path.map(decodeURIComponent) as [string, string, string, string];
  if (what === "manifests") {
    const body = await manifestOf(`${name}:${ref}`.toLowerCase());
    if (body === null) return errorBody("MANIFEST_UNKNOWN", "manifest unknown");
    return new Response(body, { headers: { "Content-Type": "application/vnd.docker.distribution.manifest.v2+json" } });
  }
  if (!blobs.has(ref)) await Promise.all(SIM_LIBRARY_MODELS.map(manifestOf));
  const blob = blobs.get(ref);
  return blob
    ? blobResponse(blob, request.headers.get("Range"))
    : errorBody("BLOB_UNKNOWN", "blob unknown to registry");
}

/** The registry settings the library answers under: every default-host reference goes to it. */
const LIBRARY_CONFIG = { ollamaRegistryUrl: SIM_LIBRARY_URL, ollamaRegistries: [DEFAULT_REGISTRY_HOST] };

/** The sim provider's model library: a model's facts read from the library's manifest and GGUF header. */
export const simModelLibrary: ModelLibrary = {
  facts(ref) {
    if (ref.host !== DEFAULT_REGISTRY_HOST) {
      return Promise.reject(
        new ModelNotFoundError(
          `model ${ref.canonical} is not in the simulated cloud's model library (SIM_MODELS=library serves ${SIM_LIBRARY_MODELS.join(", ")})`,
        ),
      );
    }
    return readModelFacts(ref, LIBRARY_CONFIG, libraryFetch as typeof fetch);
  },
};
