import { graphSize } from "../../src/models/graph";
import type { ModelFacts } from "../../src/models/schema";

/**
 * The VRAM need gpulease computed before it sized by the pinned runner's rule: the shape of
 * Ollama 0.12.10's `llm/memory.go` (weights + KV + graph + 457 MiB + one layer per card), in GiB
 * rounded up to 0.1, compared against the card's marketing size. Kept only so the table test and
 * bench/sizing-decisions.mjs can show which decisions changed.
 */

const MIB = 1024 ** 2;
const GIB = 1024 ** 3;

export function legacyNeedGb(facts: ModelFacts, contextLength: number, gpuCount = 1): number {
  const cards = Math.max(1, Math.floor(gpuCount));
  const { arch } = facts;
  const trained = arch.context_length;
  const context = trained !== null && trained > 0 ? Math.min(contextLength, trained) : contextLength;
  const headDim = Math.floor(arch.embedding_length / arch.head_count);
  const keyLength = arch.key_length ?? headDim;
  const valueLength = arch.value_length ?? headDim;
  const kvPerLayer = context * (keyLength + valueLength) * arch.head_count_kv * 2;
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
    b: Math.min(context, 512),
    kvTotal,
  });
  const graphPerCard = cards > 1 ? graph.partial : graph.full;
  const layerBuffer = Math.ceil(facts.weights_bytes / arch.block_count) + kvPerLayer;
  const bytes = facts.weights_bytes + kvTotal + cards * (457 * MIB + layerBuffer + graphPerCard);
  return Math.ceil(Math.round((bytes / GIB) * 1e6) / 1e5) / 10;
}

/** The old decision: the need per card against the card's marketing GB. */
export function legacyFits(facts: ModelFacts, contextLength: number, gpuCount: number, vramGbPerCard: number): boolean {
  return legacyNeedGb(facts, contextLength, gpuCount) <= vramGbPerCard * gpuCount;
}
