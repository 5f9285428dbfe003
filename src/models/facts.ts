import type { Config } from "../config";
import { iso, ms } from "../lib/time";
import { ModelNotFoundError, RegistryUnavailableError } from "./errors";
import { GgufError, readGgufArch } from "./gguf";
import type { ModelRef } from "./reference";
import { blobUrl, fetchManifest, type Manifest, MEDIA_TYPE, openBlob } from "./registry";
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

interface Row {
  name: string;
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
  if (!parsed.success) return null;
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
  config: Config,
  layer: Manifest["layers"][number],
  fetchImpl: typeof fetch,
): Promise<ModelFacts["arch"]> {
  const blob = openBlob(blobUrl(ref, config, layer.digest), layer.size, GGUF_HEADER_MAX_BYTES, fetchImpl);
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

/** The facts cached for a manifest digest, whatever name they were fetched by (no registry call). */
export async function archOfDigest(db: D1Database, digest: string): Promise<ModelFacts | null> {
  const row = await db
    .prepare("SELECT * FROM model_manifests WHERE digest = ? ORDER BY fetched_at DESC LIMIT 1")
    .bind(digest)
    .first<Row>();
  return row ? factsOf(row) : null;
}

async function save(db: D1Database, facts: ModelFacts, at: number): Promise<void> {
  await db
    .prepare(
      `INSERT INTO model_manifests (name, digest, weights_bytes, arch, fetched_at) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (name) DO UPDATE SET digest = excluded.digest, weights_bytes = excluded.weights_bytes,
         arch = excluded.arch, fetched_at = excluded.fetched_at`,
    )
    .bind(facts.name, facts.digest, facts.weights_bytes, JSON.stringify(facts.arch), iso(at))
    .run();
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
  const row = await services.db
    .prepare("SELECT * FROM model_manifests WHERE name = ?")
    .bind(ref.canonical)
    .first<Row>();
  const cached = row ? factsOf(row) : null;
  if (row && cached && now - ms(row.fetched_at) < MODEL_FACTS_TTL_MS) return cached;

  const manifest = await fetchManifest(ref, services.config, fetchImpl);
  const weights = weightsOf(ref, manifest);
  const known = cached?.digest === manifest.digest ? cached : await archOfDigest(services.db, manifest.digest);
  const arch = known?.arch ?? (await readArch(ref, services.config, weights.model, fetchImpl));
  const facts: ModelFacts = { name: ref.canonical, digest: manifest.digest, weights_bytes: weights.bytes, arch };
  await save(services.db, facts, now);
  return facts;
}
