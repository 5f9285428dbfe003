import { describe, expect, it } from "vitest";
import { type ModelFacts, needOf, vramNeedBytes, vramNeedGb } from "../../src/models/need";

const MIB = 1024 ** 2;
const GIB = 1024 ** 3;

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

describe("VRAM need (Ollama's memory estimate, docs/models.md)", () => {
  it("llama3.2:1b at 4096 on one card: 2.2 GiB", () => {
    // KV     = 16 layers × 4096 × (64 + 64) × 8 heads × 2 B         =   134,217,728
    // graph  = max(4·512·(1 + 4·2048 + 4096·33), 4·512·(2048 + 128256)) = 293,603,328
    // buffer = ⌈1,321,082,688 / 16⌉ + 4096 × 128 × 8 × 2              =    90,956,276
    // card   = 457 MiB                                                =   479,199,232
    // total  = 1,321,082,688 + 134,217,728 + 293,603,328 + 90,956,276 + 479,199,232
    expect(vramNeedBytes(llama32_1b, 4096)).toBe(2_319_059_252);
    expect(vramNeedGb(llama32_1b, 4096)).toBe(2.2); // 2.1598 GiB
    expect(needOf(llama32_1b, 4096)).toEqual({
      name: "llama3.2:1b",
      digest: llama32_1b.digest,
      weights_gb: 1.4, // 1.321 GB, rounded up
      context_length: 4096,
      vram_need_gb: 2.2,
    });
  });

  it("qwen2.5:32b at 32768: 30.0 GiB on one card, 34.7 GiB over two (17.3 each: 2 × 24 GB fits)", () => {
    // KV     = 64 × 32768 × (128 + 128) × 8 × 2                     = 8,589,934,592
    // graph  = 4·512·(1 + 2·5120 + 32768 + 32768·40)  (qwen2, full)   = 2,772,436,992
    // buffer = ⌈19,851,335,840 / 64⌉ + 134,217,728                   =   444,394,851
    expect(vramNeedBytes(qwen25_32b, 32_768)).toBe(32_137_301_507);
    expect(vramNeedGb(qwen25_32b, 32_768)).toBe(30.0); // 29.93 GiB
    // two cards: the partial graph on each, 4·(512·(1 + 10240 + 32768·41) + 5120·32769) = 3,443,546,112,
    // and each card its own 457 MiB and layer buffer
    expect(vramNeedBytes(qwen25_32b, 32_768, 2)).toBe(37_175_550_822);
    expect(vramNeedGb(qwen25_32b, 32_768, 2)).toBe(34.7); // 34.62 GiB
    expect(vramNeedGb(qwen25_32b, 32_768, 2) / 2).toBeLessThanOrEqual(24);
    expect(vramNeedGb(qwen25_32b, 32_768)).toBeGreaterThan(24);
  });

  it("stays at most 3 % above what Ollama itself reported for the same model build", () => {
    // /api/ps `size` of qwen2.5-coder:32b (qwen2, Q4_K_M, the same shape and size as qwen2.5:32b)
    // on one card under Ollama 0.5–0.6, in MiB, as posted on Ollama's GitHub (docs/models.md,
    // "Checked against Ollama"). The gap is the token embedding: it stays in host memory but
    // counts in the file's size.
    const ollama: [number, number][] = [
      [2048, 20_090],
      [4096, 20_651],
      [8192, 22_019],
      [16_384, 24_755],
    ];
    for (const [context, mib] of ollama) {
      const ratio = vramNeedBytes(qwen25_32b, context) / (mib * MIB);
      expect(ratio, `num_ctx ${context}`).toBeGreaterThanOrEqual(1);
      expect(ratio, `num_ctx ${context}`).toBeLessThan(1.03);
    }
    expect(vramNeedBytes(qwen25_32b, 4096)).toBe(22_096_137_731); // 21,072.5 MiB against Ollama's 20,651
  });

  it("runs the model at its trained context at most, as Ollama does", () => {
    expect(vramNeedBytes(qwen25_32b, 65_536)).toBe(vramNeedBytes(qwen25_32b, 32_768));
    expect(needOf(qwen25_32b, 65_536).context_length).toBe(32_768);
  });

  it("defaults to Ollama's 4096 when no context is asked", () => {
    expect(needOf(qwen25_32b, null)).toEqual({
      name: "qwen2.5:32b",
      digest: qwen25_32b.digest,
      weights_gb: 19.9,
      context_length: 4096,
      vram_need_gb: 20.6, // 22,096,137,731 B = 20.58 GiB
    });
  });

  it("grows with the context by the KV cache and the graph", () => {
    const at = (context: number) => vramNeedBytes(llama32_1b, context);
    // 4096 → 8192: KV +134,217,728, its one-layer share +8,388,608, graph 4·512·4096·33 = +276,824,064
    expect(at(8192) - at(4096)).toBe(134_217_728 + 8_388_608 + 276_824_064);
    expect(vramNeedGb(llama32_1b, 131_072)).toBeGreaterThan(vramNeedGb(llama32_1b, 8192));
  });

  it("uses Ollama's fallback graph (gqa × KV / 6) for an architecture GraphSize has no case for", () => {
    const qwen3: ModelFacts = {
      ...llama32_1b,
      name: "qwen3:8b",
      weights_bytes: 5_225_374_976,
      arch: {
        architecture: "qwen3",
        block_count: 36,
        embedding_length: 4096,
        head_count: 32,
        head_count_kv: 8,
        key_length: 128,
        value_length: 128,
        context_length: 40_960,
        vocab_size: 151_936,
      },
    };
    const kv = 36 * 4096 * 256 * 8 * 2; // 603,979,776
    const graph = Math.floor((4 * kv) / 6); // gqa 32 / 8 = 4 → 402,653,184
    const buffer = Math.ceil(5_225_374_976 / 36) + kv / 36;
    expect(vramNeedBytes(qwen3, 4096)).toBe(5_225_374_976 + kv + 457 * MIB + buffer + graph);
  });

  it("counts key_length/value_length where the header has them, else embedding / heads", () => {
    const wide: ModelFacts = { ...llama32_1b, arch: { ...llama32_1b.arch, key_length: 128, value_length: 128 } };
    const kvGrowth = 16 * 4096 * (256 - 128) * 8 * 2;
    expect(vramNeedBytes(wide, 4096) - vramNeedBytes(llama32_1b, 4096)).toBe(kvGrowth + kvGrowth / 16);
  });

  it("adds a card's minimum, layer buffer and graph for every card a load is split over", () => {
    const one = vramNeedBytes(llama32_1b, 4096, 1);
    const four = vramNeedBytes(llama32_1b, 4096, 4);
    expect(four).toBeGreaterThan(one);
    expect(vramNeedBytes(llama32_1b, 4096, 0)).toBe(one);
    expect(vramNeedGb(llama32_1b, 4096, 4)).toBe(Math.ceil((four / GIB) * 10) / 10);
  });
});
