import type { ModelFacts } from "../models/schema";

/**
 * What decoding one token reads from GPU memory, for turning a measured decode rate into the
 * memory bandwidth a card delivered: the weights a token passes through, plus the KV cache read
 * for the context so far (docs/models.md#measured-bandwidth).
 *
 * A dense model reads every weight. A mixture-of-experts model reads its shared weights and only
 * `expert_used_count` of `expert_count` experts per layer: Mixtral 8x7B about 12.9 of 46.7 B
 * parameters, qwen3:30b-a3b about 3.3 of 30.5 B. The header gives counts, not tensor sizes, so
 * the experts' share of the file is their share of the parameters: per layer `expert_count` ×
 * gate, up and down (3 × embedding × expert FFN length) against attention (q, k, v, o) and the
 * token embedding and output matrices.
 */

/** f16 cache (OLLAMA_KV_CACHE_TYPE unset): bytes per element of K and V. */
const KV_BYTES_PER_ELEMENT = 2;

/** The share of the weights one token reads: 1 for a dense model. */
export function activeShare(arch: ModelFacts["arch"]): number {
  const experts = arch.expert_count ?? 0;
  const used = arch.expert_used_count ?? 0;
  if (experts < 2 || used < 1 || used >= experts) return 1;
  const ffn = arch.expert_feed_forward_length ?? arch.feed_forward_length ?? null;
  if (ffn === null) return 1;
  const e = arch.embedding_length;
  const headDim = Math.floor(e / arch.head_count);
  const keyLength = arch.key_length ?? headDim;
  const valueLength = arch.value_length ?? headDim;
  const attention =
    e * arch.head_count * keyLength +
    e * arch.head_count_kv * (keyLength + valueLength) +
    arch.head_count * valueLength * e;
  const shared = arch.block_count * attention + 2 * (arch.vocab_size ?? 0) * e;
  const expertParams = arch.block_count * experts * 3 * e * ffn;
  const active = shared + (expertParams * used) / experts;
  return active / (shared + expertParams);
}

/** KV cache bytes one token's attention reads per token of context, over all layers. */
export function kvBytesPerContextToken(arch: ModelFacts["arch"]): number {
  const headDim = Math.floor(arch.embedding_length / arch.head_count);
  const keyLength = arch.key_length ?? headDim;
  const valueLength = arch.value_length ?? headDim;
  return arch.block_count * arch.head_count_kv * (keyLength + valueLength) * KV_BYTES_PER_ELEMENT;
}

/** Bytes read per decoded token at `contextTokens` of context. */
export function bytesPerToken(facts: Pick<ModelFacts, "weights_bytes" | "arch">, contextTokens: number): number {
  const context = Math.max(0, contextTokens);
  return facts.weights_bytes * activeShare(facts.arch) + kvBytesPerContextToken(facts.arch) * context;
}
