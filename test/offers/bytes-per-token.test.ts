import { describe, expect, it } from "vitest";
import type { ModelFacts } from "../../src/models/schema";
import { activeShare, bytesPerToken, kvBytesPerContextToken } from "../../src/offers/bytes-per-token";
import { leaseBandwidthGbs } from "../../src/offers/lease-bandwidth";

// Header facts as the models' GGUF files give them (llama.cpp's converters, Hugging Face configs).
const mixtral: ModelFacts["arch"] = {
  architecture: "llama",
  block_count: 32,
  embedding_length: 4096,
  head_count: 32,
  head_count_kv: 8,
  key_length: null,
  value_length: null,
  context_length: 32_768,
  vocab_size: 32_000,
  feed_forward_length: 14_336,
  expert_count: 8,
  expert_used_count: 2,
};
const qwen3moe: ModelFacts["arch"] = {
  architecture: "qwen3moe",
  block_count: 48,
  embedding_length: 2048,
  head_count: 32,
  head_count_kv: 4,
  key_length: 128,
  value_length: 128,
  context_length: 40_960,
  vocab_size: 151_936,
  feed_forward_length: 6144,
  expert_feed_forward_length: 768,
  expert_count: 128,
  expert_used_count: 8,
};
const llama32_1b: ModelFacts["arch"] = {
  architecture: "llama",
  block_count: 16,
  embedding_length: 2048,
  head_count: 32,
  head_count_kv: 8,
  key_length: 64,
  value_length: 64,
  context_length: 131_072,
  vocab_size: 128_256,
  feed_forward_length: 8192,
  expert_count: null,
  expert_used_count: null,
};

describe("bytes read per decoded token", () => {
  it("a mixture of experts reads its used experts only: Mixtral ~12.9 of 46.7 B, qwen3:30b-a3b ~3.3 of 30.5 B", () => {
    // total ÷ active: about 3.6 for Mixtral, about 9 for qwen3:30b-a3b.
    expect(1 / activeShare(mixtral)).toBeCloseTo(3.6, 1);
    expect(1 / activeShare(qwen3moe)).toBeGreaterThan(8.8);
    expect(1 / activeShare(qwen3moe)).toBeLessThan(9.6);
  });

  it("a dense model, and a header without expert counts (cached before they were read), reads every weight", () => {
    expect(activeShare(llama32_1b)).toBe(1);
    const { expert_count: _c, expert_used_count: _u, ...old } = mixtral;
    expect(activeShare(old)).toBe(1);
    expect(activeShare({ ...mixtral, expert_used_count: 8 })).toBe(1);
  });

  it("plus the KV cache for the context so far: llama3.2:1b reads 32 KiB per token of context (f16)", () => {
    expect(kvBytesPerContextToken(llama32_1b)).toBe(16 * 8 * (64 + 64) * 2);
    const facts = { weights_bytes: 1_321_082_688, arch: llama32_1b };
    expect(bytesPerToken(facts, 0)).toBe(1_321_082_688);
    expect(bytesPerToken(facts, 4096)).toBe(1_321_082_688 + 4096 * 32_768);
  });

  it("a lease's bandwidth: tokens/s × the bytes at its requests' mean context, capped at the sized context", () => {
    const meter = { requests: 4, errors: 0, prompt_tokens: 4000, completion_tokens: 800 };
    const facts = { weights_bytes: 26_000_000_000, arch: mixtral };
    // 40 tokens/s on Mixtral: not 40 × 26 GB = 1040 GB/s, but 40 × (7.2 GB active + the KV cache).
    const gbs = leaseBandwidthGbs(40, { weights_gb: 26, context_length: 4096 }, facts, meter);
    const expected = (40 * (26e9 * activeShare(mixtral) + kvBytesPerContextToken(mixtral) * 1100)) / 1e9;
    expect(gbs).toBeCloseTo(expected, 1);
    expect(gbs).toBeLessThan(330);
    // A context larger than the runner's is cut at it.
    const long = { ...meter, prompt_tokens: 400_000 };
    expect(leaseBandwidthGbs(40, { weights_gb: 26, context_length: 4096 }, facts, long)).toBeCloseTo(
      (40 * (26e9 * activeShare(mixtral) + kvBytesPerContextToken(mixtral) * 4096)) / 1e9,
      1,
    );
    // Sized by hand (no facts): every weight, as before.
    expect(leaseBandwidthGbs(40, { weights_gb: 26, context_length: null }, null, meter)).toBe(1040);
  });
});
