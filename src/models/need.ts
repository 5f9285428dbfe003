import { graphSize } from "./graph";
import type { ModelFacts } from "./schema";

/**
 * How much GPU memory a model needs at a context length: the shape of Ollama's own memory
 * estimate (weights + KV cache + compute graph + a fixed per-card minimum). docs/models.md
 * gives the formula and the source line of every constant.
 */

export type { ModelFacts } from "./schema";

export interface ModelNeed {
  name: string;
  digest: string;
  /** weights_bytes / 1e9, rounded up to 0.1 */
  weights_gb: number;
  /** the one asked for (else DEFAULT_CONTEXT_LENGTH), capped at the model's trained context as Ollama caps it */
  context_length: number;
  /** weights + KV cache for context_length + graph + per-card minimum, on 1 GPU, GiB rounded up to 0.1 */
  vram_need_gb: number;
}

const MIB = 1024 ** 2;
const GIB = 1024 ** 3;

/** Ollama's num_batch default (ollama/ollama `api/types.go` DefaultOptions). */
export const NUM_BATCH = 512;
/** What Ollama keeps free on every CUDA card beyond the model (ollama/ollama `ml/device.go` MinimumMemory). */
export const CARD_MINIMUM_BYTES = 457 * MIB;
/** f16 KV cache (ollama/ollama `fs/ggml/ggml.go` kvCacheBytesPerElement; OLLAMA_KV_CACHE_TYPE unset). */
export const KV_BYTES_PER_ELEMENT = 2;
/**
 * The context a model lease runs with when none is asked: Ollama's own default below 23 GiB of
 * VRAM (ollama/ollama `server/routes.go`). The machine must get it as OLLAMA_CONTEXT_LENGTH, or a bigger card
 * makes Ollama pick 32768 or 262144 on its own.
 */
export const DEFAULT_CONTEXT_LENGTH = 4096;

/** The context Ollama runs the model with: never more than it was trained for (ollama/ollama `llm/server.go`). */
export function effectiveContext(facts: ModelFacts, contextLength: number): number {
  const trained = facts.arch.context_length;
  return trained !== null && trained > 0 ? Math.min(contextLength, trained) : contextLength;
}

/** The need in bytes, summed over `gpuCount` cards that share the layers evenly. */
export function vramNeedBytes(facts: ModelFacts, contextLength: number, gpuCount = 1): number {
  const cards = Math.max(1, Math.floor(gpuCount));
  const { arch } = facts;
  const context = effectiveContext(facts, contextLength);
  const headDim = Math.floor(arch.embedding_length / arch.head_count);
  const keyLength = arch.key_length ?? headDim;
  const valueLength = arch.value_length ?? headDim;
  const kvPerLayer = context * (keyLength + valueLength) * arch.head_count_kv * KV_BYTES_PER_ELEMENT;
  const kvTotal = kvPerLayer * arch.block_count;
  const graph = graphSize({
    architecture: arch.architecture,
    e: arch.embedding_length,
    h: arch.head_count,
    hkv: arch.head_count_kv,
    headDim,
    headDimK: keyLength,
    v: arch.vocab_size ?? 0,
    c: context,
    b: Math.min(context, NUM_BATCH),
    kvTotal,
  });
  // Ollama loads with the full graph on one card and the partial graph on each of several.
  const graphPerCard = cards > 1 ? graph.partial : graph.full;
  // One layer (weights + its KV) held back on every card as a buffer.
  const layerBuffer = Math.ceil(facts.weights_bytes / arch.block_count) + kvPerLayer;
  return facts.weights_bytes + kvTotal + cards * (CARD_MINIMUM_BYTES + layerBuffer + graphPerCard);
}

const roundUpTenth = (value: number) => Math.ceil(Math.round(value * 1e6) / 1e5) / 10;

/**
 * pure: Ollama's memory estimate shape, in GiB (the unit of a card's nominal "24 GB"), rounded up to 0.1.
 * The total over `gpuCount` cards: N cards of V GiB fit when this / N ≤ V.
 */
export function vramNeedGb(facts: ModelFacts, contextLength: number, gpuCount = 1): number {
  return roundUpTenth(vramNeedBytes(facts, contextLength, gpuCount) / GIB);
}

export function needOf(facts: ModelFacts, contextLength: number | null): ModelNeed {
  const context = effectiveContext(facts, contextLength ?? DEFAULT_CONTEXT_LENGTH);
  return {
    name: facts.name,
    digest: facts.digest,
    weights_gb: roundUpTenth(facts.weights_bytes / 1e9),
    context_length: context,
    vram_need_gb: vramNeedGb(facts, context),
  };
}

export { ModelNotFoundError, RegistryUnavailableError } from "./errors";
export { modelFacts } from "./facts";
