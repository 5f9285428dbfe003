import type { ModelFacts } from "../../src/models/schema";

/**
 * Models the sizing table test and bench/sizing-decisions.mjs decide over. Shapes are the keys of
 * each model's GGUF header (as `ollama show --verbose` lists them); weights are the model layer
 * of the Ollama library's manifest; the token-embedding and output tensor sizes follow from their
 * shapes and quantisation (Q4_K 144 bytes and Q6_K 210 bytes per 256 weights, Q8_0 34 per 32,
 * Q4_0 18 per 32). One model sets num_ctx in its params, as a Modelfile's PARAMETER does.
 */

const q4k = (rows: number, cols: number) => (rows * cols * 144) / 256;
const q6k = (rows: number, cols: number) => (rows * cols * 210) / 256;
const q80 = (rows: number, cols: number) => (rows * cols * 34) / 32;
const q40 = (rows: number, cols: number) => (rows * cols * 18) / 32;

interface Shape {
  name: string;
  kind: "dense" | "moe" | "sliding-window" | "num_ctx";
  weights: number;
  architecture: string;
  layers: number;
  embedding: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  trained: number;
  vocab: number;
  tokenEmbd: number;
  /** null: the output shares the token embedding */
  output: number | null;
  slidingWindow?: number;
  experts?: [number, number];
  numCtx?: number;
}

function facts(s: Shape): ModelFacts & { kind: Shape["kind"] } {
  return {
    kind: s.kind,
    name: s.name,
    digest: `sha256:${"0".repeat(64)}`,
    weights_bytes: s.weights,
    arch: {
      architecture: s.architecture,
      block_count: s.layers,
      embedding_length: s.embedding,
      head_count: s.heads,
      head_count_kv: s.kvHeads,
      key_length: s.headDim,
      value_length: s.headDim,
      context_length: s.trained,
      vocab_size: s.vocab,
      token_embd_bytes: Math.round(s.tokenEmbd),
      output_bytes: s.output === null ? null : Math.round(s.output),
      output_tied: s.output === null,
      sliding_window: s.slidingWindow ?? null,
      sliding_window_pattern: null,
      expert_count: s.experts?.[0] ?? null,
      expert_used_count: s.experts?.[1] ?? null,
      params_num_ctx: s.numCtx ?? null,
    },
  };
}

export const SIZING_MODELS = [
  facts({
    name: "llama3.2:1b",
    kind: "dense",
    weights: 1_321_082_688,
    architecture: "llama",
    layers: 16,
    embedding: 2048,
    heads: 32,
    kvHeads: 8,
    headDim: 64,
    trained: 131_072,
    vocab: 128_256,
    tokenEmbd: q80(128_256, 2048),
    output: null,
  }),
  facts({
    name: "llama3.1:8b",
    kind: "dense",
    weights: 4_920_734_016,
    architecture: "llama",
    layers: 32,
    embedding: 4096,
    heads: 32,
    kvHeads: 8,
    headDim: 128,
    trained: 131_072,
    vocab: 128_256,
    tokenEmbd: q4k(128_256, 4096),
    output: q6k(128_256, 4096),
  }),
  facts({
    name: "qwen2.5:32b",
    kind: "dense",
    weights: 19_851_335_840,
    architecture: "qwen2",
    layers: 64,
    embedding: 5120,
    heads: 40,
    kvHeads: 8,
    headDim: 128,
    trained: 32_768,
    vocab: 152_064,
    tokenEmbd: q4k(152_064, 5120),
    output: q6k(152_064, 5120),
  }),
  facts({
    name: "qwen3:32b",
    kind: "dense",
    weights: 20_199_340_704,
    architecture: "qwen3",
    layers: 64,
    embedding: 5120,
    heads: 64,
    kvHeads: 8,
    headDim: 128,
    trained: 40_960,
    vocab: 151_936,
    tokenEmbd: q4k(151_936, 5120),
    output: q6k(151_936, 5120),
  }),
  facts({
    name: "qwen2.5:72b",
    kind: "dense",
    weights: 47_415_713_568,
    architecture: "qwen2",
    layers: 80,
    embedding: 8192,
    heads: 64,
    kvHeads: 8,
    headDim: 128,
    trained: 32_768,
    vocab: 152_064,
    tokenEmbd: q4k(152_064, 8192),
    output: q6k(152_064, 8192),
  }),
  facts({
    name: "deepseek-r1:70b",
    kind: "dense",
    weights: 42_520_412_128,
    architecture: "llama",
    layers: 80,
    embedding: 8192,
    heads: 64,
    kvHeads: 8,
    headDim: 128,
    trained: 131_072,
    vocab: 128_256,
    tokenEmbd: q4k(128_256, 8192),
    output: q6k(128_256, 8192),
  }),
  facts({
    name: "qwen3:30b-a3b",
    kind: "moe",
    weights: 18_556_689_568,
    architecture: "qwen3moe",
    layers: 48,
    embedding: 2048,
    heads: 32,
    kvHeads: 4,
    headDim: 128,
    trained: 40_960,
    vocab: 151_936,
    tokenEmbd: q4k(151_936, 2048),
    output: q6k(151_936, 2048),
    experts: [128, 8],
  }),
  facts({
    name: "mixtral:8x7b",
    kind: "moe",
    weights: 26_442_481_440,
    architecture: "llama",
    layers: 32,
    embedding: 4096,
    heads: 32,
    kvHeads: 8,
    headDim: 128,
    trained: 32_768,
    vocab: 32_000,
    tokenEmbd: q40(32_000, 4096),
    output: q6k(32_000, 4096),
    experts: [8, 2],
  }),
  facts({
    name: "gemma3:27b",
    kind: "sliding-window",
    weights: 17_396_936_960,
    architecture: "gemma3",
    layers: 62,
    embedding: 5376,
    heads: 32,
    kvHeads: 16,
    headDim: 128,
    trained: 131_072,
    vocab: 262_144,
    tokenEmbd: q4k(262_144, 5376),
    output: null,
    slidingWindow: 1024,
  }),
  facts({
    name: "gpt-oss:20b",
    kind: "sliding-window",
    weights: 13_780_154_624,
    architecture: "gptoss",
    layers: 24,
    embedding: 2880,
    heads: 64,
    kvHeads: 8,
    headDim: 64,
    trained: 131_072,
    vocab: 201_088,
    tokenEmbd: q80(201_088, 2880),
    output: q80(201_088, 2880),
    slidingWindow: 128,
    experts: [32, 4],
  }),
  facts({
    name: "qwen2.5-coder:32b-16k",
    kind: "num_ctx",
    weights: 19_851_335_840,
    architecture: "qwen2",
    layers: 64,
    embedding: 5120,
    heads: 40,
    kvHeads: 8,
    headDim: 128,
    trained: 32_768,
    vocab: 152_064,
    tokenEmbd: q4k(152_064, 5120),
    output: q6k(152_064, 5120),
    numCtx: 16_384,
  }),
];

/** The card types the table covers, with their memory as the driver reports it (docs/models.md#gpu-memory). */
export const SIZING_CARDS = [
  { key: "l40s", name: "L40S", vramGb: 48, memoryMib: 46_068 },
  { key: "a40", name: "A40", vramGb: 48, memoryMib: 46_068 },
  { key: "l4", name: "L4", vramGb: 24, memoryMib: 23_034 },
  { key: "a10", name: "A10", vramGb: 24, memoryMib: 23_028 },
  { key: "rtx-4090", name: "RTX 4090", vramGb: 24, memoryMib: 24_564 },
  { key: "rtx-5090", name: "RTX 5090", vramGb: 32, memoryMib: 32_607 },
  { key: "rtx-a6000", name: "RTX A6000", vramGb: 48, memoryMib: 46_068 },
  { key: "h100-sxm", name: "H100 SXM", vramGb: 80, memoryMib: 81_559 },
  { key: "t4", name: "Tesla T4", vramGb: 16, memoryMib: 15_360 },
] as const;

export const SIZING_CONTEXTS = [4096, 8192, 32_768, 131_072] as const;
