import { graphSize } from "./graph";
import type { ModelFacts } from "./schema";

/**
 * Whether a model loads whole on a machine's GPUs, decided as the Ollama gpulease pins decides it:
 * Ollama's scheduler picks the cards and the batch, then starts llama.cpp's server with `-c`,
 * `-np`, `-b`/`-ub` and no layer count, and llama.cpp's fit (`common/fit.cpp`) keeps every layer
 * on the GPUs only while each card keeps its margin free; otherwise it moves layers to the CPU.
 * docs/models.md#the-runners-rule gives every step with its source line. Sources:
 * ollama/ollama at `v0.32.15` (commit b7871fc0), which builds llama.cpp `b10488` (its
 * `LLAMA_CPP_VERSION`).
 */

/** The Ollama release the rule is written from; OLLAMA_IMAGE must pin the same (test/models/runner-pin.test.ts). */
export const RUNNER_OLLAMA_VERSION = "0.32.15";
/** llama.cpp as that release builds it (ollama/ollama `LLAMA_CPP_VERSION` at v0.32.15). */
export const RUNNER_LLAMA_CPP_VERSION = "b10488";

const MIB = 1024 ** 2;
const GIB = 1024 ** 3;

/** `-np`: gpulease starts every model server with OLLAMA_NUM_PARALLEL=1 (ollama `server/sched.go` line 497). */
export const NUM_PARALLEL = 1;
/** llama.cpp rounds `-c` up to a multiple of 256 (`src/llama-context.cpp`, `GGML_PAD(cparams.n_ctx, 256)`). */
export const CONTEXT_PAD = 256;
/** What llama.cpp's fit keeps free on every card (`common/common.h` `fit_params_target`, 1024 MiB). */
export const FIT_MARGIN_BYTES = 1024 * MIB;
/**
 * Memory a card does not offer a model: the CUDA context and what the driver keeps. Ollama allows
 * 457 MiB for it on CUDA (ollama `ml/device.go` line 363, `MinimumMemory`); the free memory
 * llama.cpp's fit starts from is the card's total less this.
 */
export const CARD_RESERVED_BYTES = 457 * MIB;
/** f16 K and V (llama.cpp `common/common.h` `cache_type_k/v`; gpulease sets no OLLAMA_KV_CACHE_TYPE). */
export const KV_BYTES_PER_ELEMENT = 2;
/** Logits and activations are f32 (llama.cpp `src/llama-graph.cpp`). */
const F32 = 4;
/** The flash-attention mask is f16 (llama.cpp `src/llama-graph.cpp`, `build_attn_inp_kq_mask`). */
const F16 = 2;

/** ollama `server/sched.go` lines 798-804 and 905-913: the automatic generation batch. */
const BATCH = { default: 512, constrained: 256, medium: 1024, large: 2048 } as const;
const BATCH_HEADROOM_PERCENT = { medium: 75, large: 60 } as const;
const BATCH_SURCHARGE = { medium: 768 * MIB, large: 2 * GIB } as const;
/** sched.go line 875 and line 1064: 80 % of the free memory is what a prediction may take. */
const PREDICTION_SHARE = 0.8;
/** sched.go line 855: a CUDA card of at most 8 GiB without flash attention gets the 256 batch. */
const SMALL_CARD_BYTES = 8 * GIB;

/**
 * llama.cpp's sliding-window layer pattern per architecture (`src/llama-model.cpp`,
 * `hparams.set_swa_pattern(n)`: of every n layers the first n − 1 are windowed), for GGUFs
 * that do not carry `<arch>.attention.sliding_window_pattern`.
 */
const SWA_PATTERN: Record<string, number> = { gemma2: 2, gemma3: 6, cohere2: 4, "gpt-oss": 2, gptoss: 2 };

/** The machine: identical cards, each of `memoryMib` as the driver reports it. */
export interface Cards {
  count: number;
  memoryMib: number;
  /** Ollama passes `--flash-attn auto` where every card supports it (ml/device.go `FlashAttentionSupported`) */
  flashAttention: boolean;
}

export interface CardLoad {
  weights: number;
  kv: number;
  compute: number;
  /** the card's free memory as llama.cpp reads it (total − CARD_RESERVED_BYTES) */
  free: number;
}

export interface RunnerFit {
  /** every layer on the GPUs, each card keeping FIT_MARGIN_BYTES free */
  fits: boolean;
  /** the context the runner allocates (`-c` × `-np`, padded to 256) */
  context: number;
  /** `-ub`, the physical batch */
  ubatch: number;
  flashAttention: boolean;
  /** one card chosen by Ollama's placement, or the layers split over all of them */
  placement: "single" | "split";
  layersOnGpu: number;
  layers: number;
  /** what each card used carries, in bytes */
  cards: CardLoad[];
  /**
   * Bytes the cards must have in all, as the driver counts them, for the model to load whole:
   * weights + KV cache + compute buffers + the margin and the reserve per card used.
   */
  needBytes: number;
}

const pad = (value: number, to: number) => Math.ceil(value / to) * to;

/** The context Ollama runs: never more than the model was trained for (ollama `server/sched.go` lines 149-166). */
export function servedContext(facts: ModelFacts, contextLength: number): number {
  const trained = facts.arch.context_length;
  return trained !== null && trained > 0 ? Math.min(contextLength, trained) : contextLength;
}

/** The weights that go to the GPUs: all but the input token embedding, which llama.cpp keeps on the CPU unless the output shares it. */
export function weightsOnGpu(facts: ModelFacts): number {
  const { token_embd_bytes, output_tied } = facts.arch;
  if (token_embd_bytes === undefined || token_embd_bytes === null || output_tied !== false) return facts.weights_bytes;
  return facts.weights_bytes - token_embd_bytes;
}

function headDims(facts: ModelFacts): { k: number; v: number } {
  const { arch } = facts;
  const head = Math.floor(arch.embedding_length / arch.head_count);
  return { k: arch.key_length ?? head, v: arch.value_length ?? head };
}

/** How many of the layers are sliding-window layers, and their window (0 when none). */
function slidingWindow(facts: ModelFacts): { layers: number; window: number } {
  const { arch } = facts;
  const window = arch.sliding_window ?? 0;
  const pattern = arch.sliding_window_pattern ?? SWA_PATTERN[arch.architecture] ?? 0;
  if (window <= 0 || pattern <= 1) return { layers: 0, window: 0 };
  let layers = 0;
  for (let il = 0; il < arch.block_count; il++) if (il % pattern < pattern - 1) layers++;
  return { layers, window };
}

/**
 * The KV cache per layer kind, in bytes: full layers hold `context` cells; windowed layers hold
 * the window plus one batch (llama.cpp `src/llama-kv-cache-iswa.cpp`, swa_full off).
 */
export function kvCacheBytes(facts: ModelFacts, context: number, ubatch: number): { total: number; perLayer: number } {
  const { k, v } = headDims(facts);
  const perCell = (k + v) * facts.arch.head_count_kv * KV_BYTES_PER_ELEMENT;
  const swa = slidingWindow(facts);
  const swaCells = Math.min(context, pad(swa.window + ubatch, CONTEXT_PAD));
  const full = facts.arch.block_count - swa.layers;
  const total = perCell * (full * context + swa.layers * swaCells);
  return { total, perLayer: Math.ceil(total / facts.arch.block_count) };
}

/**
 * The compute buffer llama.cpp reserves for one batch of `ubatch` tokens. With flash attention
 * its largest live tensors are the logits of the batch (n_vocab × ubatch, f32), the batch's
 * hidden state (n_embd × ubatch, f32) and the f16 attention mask (context × ubatch); without it
 * the attention scores grow with the context, and Ollama's older `GraphSize` formula is used.
 */
export function computeBytes(facts: ModelFacts, context: number, ubatch: number, flashAttention: boolean): number {
  const { arch } = facts;
  const vocab = arch.vocab_size ?? 0;
  if (flashAttention) return ubatch * vocab * F32 + ubatch * arch.embedding_length * F32 + context * ubatch * F16;
  const { k } = headDims(facts);
  return graphSize({
    architecture: arch.architecture,
    e: arch.embedding_length,
    h: arch.head_count,
    hkv: arch.head_count_kv,
    headDim: Math.floor(arch.embedding_length / arch.head_count),
    headDimK: k,
    v: vocab,
    c: context,
    b: Math.min(context, ubatch),
    kvTotal: kvCacheBytes(facts, context, ubatch).total,
  }).full;
}

/** Ollama's own quick prediction, which steers its placement and batch (ollama `llm/llama_server.go` line 2697). */
export function predictedBytes(facts: ModelFacts, context: number): number {
  const { arch } = facts;
  const headDim = Math.floor(arch.embedding_length / arch.head_count);
  return facts.weights_bytes + 2 * arch.block_count * arch.head_count_kv * headDim * context * 2;
}

/** ollama `server/sched.go` `automaticGenerationBatch` (lines 822-835). */
export function generationBatch(context: number, predicted: number, available: number, cards: Cards): number {
  if (!cards.flashAttention) {
    const small = context > 4096 && cards.memoryMib * MIB <= SMALL_CARD_BYTES;
    return small ? BATCH.constrained : BATCH.default;
  }
  let batch: number = context > 32768 ? BATCH.large : context > 4096 ? BATCH.medium : BATCH.default;
  const fits = (b: number) => {
    const threshold = Math.floor((available * 80) / 100);
    if (predicted > threshold) return false;
    if (b >= BATCH.large && predicted > (available * BATCH_HEADROOM_PERCENT.large) / 100) return false;
    if (b >= BATCH.medium && predicted > (available * BATCH_HEADROOM_PERCENT.medium) / 100) return false;
    const surcharge = b >= BATCH.large ? BATCH_SURCHARGE.large : b >= BATCH.medium ? BATCH_SURCHARGE.medium : 0;
    return surcharge <= threshold - predicted;
  };
  while (batch > BATCH.default && !fits(batch)) batch = batch > BATCH.medium ? BATCH.medium : BATCH.default;
  return batch;
}

/**
 * pure: does the model load whole at `contextLength` on these cards? One card: everything on it.
 * Several: Ollama puts the model on one card when its prediction takes at most 80 % of that
 * card (`bestSingleGPUFit`), else llama.cpp fills the cards with whole layers from the last card
 * (which also holds the output layer) to the first (`common/fit.cpp` step 3).
 */
export function runnerFit(facts: ModelFacts, contextLength: number, cards: Cards): RunnerFit {
  const count = Math.max(1, Math.floor(cards.count));
  const asked = servedContext(facts, contextLength) * NUM_PARALLEL;
  const context = pad(asked, CONTEXT_PAD);
  const free = Math.max(0, cards.memoryMib * MIB - CARD_RESERVED_BYTES);
  const predicted = predictedBytes(facts, asked);
  const single = count === 1 || predicted <= free * PREDICTION_SHARE;
  const ubatch = generationBatch(asked, predicted, single ? free : free * count, cards);
  const weights = weightsOnGpu(facts);
  const kv = kvCacheBytes(facts, context, ubatch);
  const compute = computeBytes(facts, context, ubatch, cards.flashAttention);
  const layers = facts.arch.block_count;
  const base = { context, ubatch, flashAttention: cards.flashAttention, layers };

  if (single) {
    const used = weights + kv.total + compute;
    const fits = free - used >= FIT_MARGIN_BYTES;
    return {
      ...base,
      fits,
      placement: "single",
      layersOnGpu: fits ? layers : layersThatFit(free - FIT_MARGIN_BYTES - compute, weights, kv.perLayer, layers),
      cards: [{ weights, kv: kv.total, compute, free }],
      needBytes: used + FIT_MARGIN_BYTES + CARD_RESERVED_BYTES,
    };
  }
  // Split: the last card carries the output layer and the logits; every card its layers' weights
  // and KV cache, and a compute buffer for the hidden state and the mask.
  const output = outputBytes(facts);
  const perLayerWeights = Math.ceil((weights - output) / layers);
  const perLayer = perLayerWeights + kv.perLayer;
  const hiddenAndMask = compute - ubatch * (facts.arch.vocab_size ?? 0) * F32;
  let placed = 0;
  const loads: CardLoad[] = [];
  for (let card = count - 1; card >= 0; card--) {
    const last = card === count - 1;
    const carry = (last ? output + compute : hiddenAndMask) + FIT_MARGIN_BYTES;
    const room = Math.max(0, Math.floor((free - carry) / perLayer));
    const n = Math.min(room, layers - placed);
    placed += n;
    loads.unshift({
      weights: n * perLayerWeights + (last ? output : 0),
      kv: n * kv.perLayer,
      compute: last ? compute : hiddenAndMask,
      free,
    });
  }
  const used = weights + kv.total + compute + hiddenAndMask * (count - 1);
  return {
    ...base,
    fits: placed >= layers,
    placement: "split",
    layersOnGpu: placed,
    cards: loads,
    needBytes: used + count * (FIT_MARGIN_BYTES + CARD_RESERVED_BYTES),
  };
}

/** The output layer's weights on the GPU: its own tensor, or the embedding it shares. */
function outputBytes(facts: ModelFacts): number {
  const { output_bytes, token_embd_bytes, output_tied } = facts.arch;
  if (output_tied === true) return token_embd_bytes ?? 0;
  return output_bytes ?? 0;
}

function layersThatFit(room: number, weights: number, kvPerLayer: number, layers: number): number {
  const perLayer = Math.ceil(weights / layers) + kvPerLayer;
  return Math.max(0, Math.min(layers - 1, Math.floor(room / perLayer)));
}

/** GiB from bytes, rounded up to 0.01 (a need shown never reads lower than it is). */
export const gibUp = (bytes: number) => Math.ceil(Math.round((bytes / GIB) * 1e6) / 1e4) / 100;
