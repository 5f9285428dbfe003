import { describe, expect, it } from "vitest";
import { contextFor, fitOnCards, type ModelFacts, needOf, singleCardNeedBytes } from "../../src/models/need";
import { runnerFit } from "../../src/models/runner";

// As the registry and the GGUF headers give them (test/fakes/ollama-registry.ts has the headers).
const llama32_1b: ModelFacts = {
  name: "llama3.2:1b",
  digest: "sha256:baf6a787fdffd633537aa2eb51cfd54cb93ff08e28040095462bb63daf552878",
  weights_bytes: 1_321_082_688,
  arch: {
    architecture: "llama",
    block_count: 16,
    embedding_length: 2048,
    head_count: 32,
    head_count_kv: 8,
    key_length: 64,
    value_length: 64,
    context_length: 131_072,
    vocab_size: 128_256,
  },
};

const qwen25_32b: ModelFacts = {
  name: "qwen2.5:32b",
  digest: "sha256:9f13ba1299afea09d9a956fc6a85becc99115a6d596fae201a5487a03bdc4368",
  weights_bytes: 19_851_335_840,
  arch: {
    architecture: "qwen2",
    block_count: 64,
    embedding_length: 5120,
    head_count: 40,
    head_count_kv: 8,
    key_length: null,
    value_length: null,
    context_length: 32_768,
    vocab_size: 152_064,
  },
};

describe("VRAM need (the pinned runner's rule, docs/models.md#the-runners-rule)", () => {
  it("llama3.2:1b at 4096 on one card: 3.06 GiB of the card's memory", () => {
    // weights  (no tensor list read: the whole file on the GPU)          = 1,321,082,688
    // KV       = 16 layers × 4096 × (64 + 64) × 8 heads × 2 B             =   134,217,728
    // compute  = 512 × 128256 × 4 + 512 × 2048 × 4 + 4096 × 512 × 2       =   271,056,896
    // margin   = 1024 MiB, reserve = 457 MiB                              = 1,552,941,056
    expect(singleCardNeedBytes(llama32_1b, 4096)).toBe(3_279_298_368);
    expect(needOf(llama32_1b, 4096)).toEqual({
      name: "llama3.2:1b",
      digest: llama32_1b.digest,
      weights_gb: 1.32,
      context_length: 4096,
      vram_need_gb: 3.06,
    });
  });

  it("shows the weights in GB to two decimals, rounded to the nearest (1,321,082,688 bytes: 1.32, not 1.4)", () => {
    expect(needOf(llama32_1b, 4096).weights_gb).toBe(1.32);
    expect(needOf({ ...llama32_1b, weights_bytes: 19_851_335_840 }, 4096).weights_gb).toBe(19.85);
    expect(needOf({ ...llama32_1b, weights_bytes: 1_325_000_000 }, 4096).weights_gb).toBe(1.33);
  });

  it("leaves the input token embedding on the CPU unless the output shares it", () => {
    const split: ModelFacts = {
      ...qwen25_32b,
      arch: { ...qwen25_32b.arch, token_embd_bytes: 437_944_320, output_bytes: 638_668_800, output_tied: false },
    };
    const tied: ModelFacts = { ...split, arch: { ...split.arch, output_tied: true } };
    expect(singleCardNeedBytes(tied, 4096) - singleCardNeedBytes(split, 4096)).toBe(437_944_320);
  });

  it("runs the model at its trained context at most, as Ollama does", () => {
    expect(singleCardNeedBytes(qwen25_32b, 65_536)).toBe(singleCardNeedBytes(qwen25_32b, 32_768));
    expect(needOf(qwen25_32b, 65_536).context_length).toBe(32_768);
  });

  it("defaults to Ollama's 4096 when no context is asked, and the model's own num_ctx wins", () => {
    expect(needOf(qwen25_32b, null).context_length).toBe(4096);
    const own: ModelFacts = { ...qwen25_32b, arch: { ...qwen25_32b.arch, params_num_ctx: 8192 } };
    expect(contextFor(own, null)).toBe(8192);
    expect(contextFor(own, 16_384)).toBe(8192);
    expect(needOf(own, null).vram_need_gb).toBe(needOf(qwen25_32b, 8192).vram_need_gb);
  });

  it("pads the context to 256 as llama.cpp does", () => {
    expect(runnerFit(llama32_1b, 4000, { count: 1, memoryMib: 24_564, flashAttention: true }).context).toBe(4096);
    expect(singleCardNeedBytes(llama32_1b, 4000)).toBe(singleCardNeedBytes(llama32_1b, 4096));
  });

  it("grows with the context by the KV cache and the mask, not the old quadratic graph", () => {
    const at = (context: number) => singleCardNeedBytes(llama32_1b, context);
    // 4096 → 8192: KV 16 × 4096 × 128 × 8 × 2 = 134,217,728; mask 4096 × 512 × 2 = 4,194,304
    expect(at(8192) - at(4096)).toBe(134_217_728 + 4_194_304);
  });

  it("picks the batch Ollama picks: 1024 above 4096 tokens and 2048 above 32768 when the card has room", () => {
    const h100 = { count: 1, memoryMib: 81_559, flashAttention: true };
    expect(runnerFit(llama32_1b, 4096, h100).ubatch).toBe(512);
    expect(runnerFit(llama32_1b, 8192, h100).ubatch).toBe(1024);
    expect(runnerFit(llama32_1b, 65_536, h100).ubatch).toBe(2048);
    // a tight card: qwen2.5:32b's prediction takes more than 75 % of an A10, so the batch stays 512
    expect(runnerFit(qwen25_32b, 8192, { count: 1, memoryMib: 23_028, flashAttention: true }).ubatch).toBe(512);
  });

  it("uses the older graph formula where the card cannot run flash attention", () => {
    const noFa = runnerFit(qwen25_32b, 8192, { count: 1, memoryMib: 81_559, flashAttention: false });
    const fa = runnerFit(qwen25_32b, 8192, { count: 1, memoryMib: 81_559, flashAttention: true });
    expect(noFa.ubatch).toBe(512);
    expect(noFa.cards[0]!.compute).toBeGreaterThan(fa.cards[0]!.compute);
  });

  it("puts a model on one of several cards when Ollama's prediction takes at most 80 % of it", () => {
    const two = fitOnCards(llama32_1b, 4096, 2, 24_564);
    expect(two.placement).toBe("single");
    expect(two.fits).toBe(true);
  });

  it("splits a model that one card cannot hold over several, the last card holding the output layer", () => {
    const one = fitOnCards(qwen25_32b, 32_768, 1, 24_564);
    const two = fitOnCards(qwen25_32b, 32_768, 2, 24_564);
    expect(one.fits).toBe(false);
    expect(two.placement).toBe("split");
    expect(two.fits).toBe(true);
    expect(two.layersOnGpu).toBe(64);
    expect(two.cards[1]!.compute).toBeGreaterThan(two.cards[0]!.compute);
    expect(fitOnCards(qwen25_32b, 32_768, 2, 15_360).fits).toBe(false);
  });
});
