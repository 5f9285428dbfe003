import type { Config } from "../config";
import { iso, ms } from "../lib/time";
import { ModelNotFoundError, RegistryUnavailableError } from "./errors";
import { GgufError, readGgufArch } from "./gguf";
import { type ModelRef, parseModelRef } from "./reference";
import { redirectAllowed } from "./registries";
import { blobUrl, fetchManifest, type Manifest, MEDIA_TYPE, openBlob, registryBase } from "./registry";
import { ModelArchSchema, type ModelFacts } from "./schema";

/**
 * A model's facts from its registry, cached in D1 (table model_manifests). A tag can move to
 * another build, so a row is served for a day and then checked again; the GGUF header is read
 * once per manifest digest, however many names share it.
 */

export const MODEL_FACTS_TTL_MS = 24 * 60 * 60 * 1000;
/** The most of a model blob read for its header: a tokenizer takes a few MB, none takes 32 MiB. */
export const GGUF_HEADER_MAX_BYTES = 32 * 1024 * 1024;

interface Services {
  db: D1Database;
  config: Config;
  clock: () => number;
}

type RegistryConfig = Pick<Config, "ollamaRegistryUrl" | "ollamaRegistries">;

/**
 * A registry of the worker's own, asked in process rather than over the network (the simulated
 * cloud's model library): a provider whose machines pull from one is sized from it (Provider port).
 */
export interface ModelLibrary {
  /** throws ModelNotFoundError for a model it does not serve */
  facts(ref: ModelRef): Promise<ModelFacts>;
}

interface Row {
  name: string;
  registry: string;
  digest: string;
  weights_bytes: number;
  arch: string;
  fetched_at: string;
}

function factsOf(row: Row): ModelFacts | null {
  let arch: unknown;
  try {
    arch = JSON.parse(row.arch);
  } catch {
    return null;
  }
  const parsed = ModelArchSchema.safeParse(arch);
  // A row cached before the runner's facts were read is read again.
  if (!parsed.success || parsed.data.output_tied === undefined || parsed.data.params_num_ctx === undefined) return null;
  return { name: row.name, digest: row.digest, weights_bytes: row.weights_bytes, arch: parsed.data };
}

const WEIGHT_LAYERS = new Set<string>([MEDIA_TYPE.model, MEDIA_TYPE.projector, MEDIA_TYPE.adapter]);

function weightsOf(ref: ModelRef, manifest: Manifest): { bytes: number; model: Manifest["layers"][number] } {
  const model = manifest.layers.find((layer) => layer.mediaType === MEDIA_TYPE.model);
  if (!model) {
    const safetensors = manifest.layers.some((layer) => layer.mediaType === MEDIA_TYPE.tensor);
    throw new ModelNotFoundError(
      safetensors
        ? `model ${ref.canonical} is a safetensors model (Ollama runs those only with MLX), not a GGUF one`
        : `model ${ref.canonical} has no model weights in its registry manifest`,
    );
  }
  const bytes = manifest.layers
    .filter((layer) => WEIGHT_LAYERS.has(layer.mediaType))
    .reduce((sum, l) => sum + l.size, 0);
  return { bytes, model };
}

async function readArch(
  ref: ModelRef,
  config: RegistryConfig,
  layer: Manifest["layers"][number],
  fetchImpl: typeof fetch,
): Promise<ModelFacts["arch"]> {
  const url = blobUrl(ref, config, layer.digest);
  const follows = (next: URL) => redirectAllowed(next, new URL(url).origin, ref.host, config.ollamaRegistries);
  const blob = openBlob(url, layer.size, GGUF_HEADER_MAX_BYTES, fetchImpl, follows);
  try {
    return await readGgufArch(blob.next, GGUF_HEADER_MAX_BYTES);
  } catch (error) {
    if (error instanceof GgufError) {
      throw new RegistryUnavailableError(`cannot size ${ref.canonical}: ${error.message}`);
    }
    throw error;
  } finally {
    await blob.close();
  }
}

/** The most of a params layer read: Ollama's are a few hundred bytes. */
const PARAMS_MAX_BYTES = 64 * 1024;

/**
 * `num_ctx` from the manifest's params layer, null when there is none or it sets none. A value
 * that is not a whole number from 1 to 2^24 is not a context Ollama could run and is refused.
 */
async function readParamsNumCtx(
  ref: ModelRef,
  config: RegistryConfig,
  manifest: Manifest,
  fetchImpl: typeof fetch,
): Promise<number | null> {
  const layer = manifest.layers.find((l) => l.mediaType === MEDIA_TYPE.params);
  if (!layer) return null;
  if (layer.size > PARAMS_MAX_BYTES) {
    throw new RegistryUnavailableError(`cannot size ${ref.canonical}: its params layer is larger than 64 KiB`);
  }
  const url = blobUrl(ref, config, layer.digest);
  const follows = (next: URL) => redirectAllowed(next, new URL(url).origin, ref.host, config.ollamaRegistries);
  const blob = openBlob(url, layer.size, PARAMS_MAX_BYTES, fetchImpl, follows);
  let text = "";
  const decoder = new TextDecoder();
  try {
    for (let chunk = await blob.next(); chunk !== null; chunk = await blob.next()) {
      text += decoder.decode(chunk, { stream: true });
    }
  } finally {
    await blob.close();
  }
  let params: unknown;
  try {
    params = JSON.parse(text + decoder.decode());
  } catch {
    throw new RegistryUnavailableError(`cannot size ${ref.canonical}: its params layer is not JSON`);
  }
  const numCtx = params && typeof params === "object" ? (params as Record<string, unknown>).num_ctx : undefined;
  if (numCtx === undefined) return null;
  if (typeof numCtx !== "number" || !Number.isInteger(numCtx) || numCtx < 1 || numCtx > 2 ** 24) {
    throw new RegistryUnavailableError(`cannot size ${ref.canonical}: its params set num_ctx to ${String(numCtx)}`);
  }
  return numCtx;
}

/**
 * A model's facts read from a registry, uncached: its manifest, its GGUF header and its params,
 * through `fetchImpl` (the sim's library answers in process: src/sim/ollama/library-registry.ts).
 */
export async function readModelFacts(
  ref: ModelRef,
  config: RegistryConfig,
  fetchImpl: typeof fetch,
): Promise<ModelFacts> {
  const manifest = await fetchManifest(ref, config, fetchImpl);
  const weights = weightsOf(ref, manifest);
  const arch = {
    ...(await readArch(ref, config, weights.model, fetchImpl)),
    params_num_ctx: await readParamsNumCtx(ref, config, manifest, fetchImpl),
  };
  return { name: ref.canonical, digest: manifest.digest, weights_bytes: weights.bytes, arch };
}

/**
 * A header already read for this digest from the same registry. Another registry serving the
 * same manifest bytes is not trusted for its blobs: its header is read from it, and cached apart.
 */
async function archOfDigest(db: D1Database, registry: string, digest: string): Promise<ModelFacts | null> {
  const row = await db
    .prepare("SELECT * FROM model_manifests WHERE registry = ? AND digest = ? ORDER BY fetched_at DESC LIMIT 1")
    .bind(registry, digest)
    .first<Row>();
  return row ? factsOf(row) : null;
}

async function save(db: D1Database, registry: string, facts: ModelFacts, at: number): Promise<void> {
  await db
    .prepare(
      `INSERT INTO model_manifests (name, registry, digest, weights_bytes, arch, fetched_at) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (name) DO UPDATE SET registry = excluded.registry, digest = excluded.digest,
         weights_bytes = excluded.weights_bytes, arch = excluded.arch, fetched_at = excluded.fetched_at`,
    )
    .bind(facts.name, registry, facts.digest, facts.weights_bytes, JSON.stringify(facts.arch), iso(at))
    .run();
}

/**
 * The facts cached for a model's digest from the registry its name resolves to, with no registry
 * call; null when none are cached or the name's registry is not (or no longer) allowed.
 */
export async function cachedFactsOf(
  db: D1Database,
  config: Config,
  name: string,
  digest: string,
): Promise<ModelFacts | null> {
  const parsed = parseModelRef(name);
  if (!parsed.ok) return null;
  let registry: string;
  try {
    registry = new URL(registryBase(parsed.ref, config)).origin;
  } catch {
    return null;
  }
  return archOfDigest(db, registry, digest);
}

/**
 * registry lookup with a D1 cache (table model_manifests). A stale row is not served when the
 * registry cannot be asked: the tag may have moved to a bigger build.
 */
export async function modelFacts(
  services: Services,
  ref: ModelRef,
  fetchImpl: typeof fetch = (input, init) => fetch(input, init),
): Promise<ModelFacts> {
  const now = services.clock();
  // The registry's origin as asked (an OLLAMA_REGISTRY_URL mirror is another registry); throws for
  // a host OLLAMA_REGISTRIES does not list, before any read.
  const registry = new URL(registryBase(ref, services.config)).origin;
  const row = await services.db
    .prepare("SELECT * FROM model_manifests WHERE name = ? AND registry = ?")
    .bind(ref.canonical, registry)
    .first<Row>();
  const cached = row ? factsOf(row) : null;
  if (row && cached && now - ms(row.fetched_at) < MODEL_FACTS_TTL_MS) return cached;

  const manifest = await fetchManifest(ref, services.config, fetchImpl);
  const weights = weightsOf(ref, manifest);
  const known =
    cached?.digest === manifest.digest ? cached : await archOfDigest(services.db, registry, manifest.digest);
  const arch = known?.arch ?? {
    ...(await readArch(ref, services.config, weights.model, fetchImpl)),
    params_num_ctx: await readParamsNumCtx(ref, services.config, manifest, fetchImpl),
  };
  const facts: ModelFacts = { name: ref.canonical, digest: manifest.digest, weights_bytes: weights.bytes, arch };
  await save(services.db, registry, facts, now);
  return facts;
}
