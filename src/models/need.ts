import { CARD_RESERVED_BYTES, type Cards, FIT_MARGIN_BYTES, gibUp, runnerFit, servedContext } from "./runner";
import type { ModelFacts } from "./schema";

/**
 * How much GPU memory a model needs at a context length, by the rule of the runner gpulease pins
 * (src/models/runner.ts; docs/models.md#the-runners-rule gives every step and its source line).
 */

export type { ModelFacts } from "./schema";

export interface ModelNeed {
  name: string;
  digest: string;
  /** weights_bytes / 1e9 to two decimals, as near as they say (1,321,082,688 bytes: 1.32) */
  weights_gb: number;
  /** the context Ollama runs the model with: its params' num_ctx, else the one asked (else DEFAULT_CONTEXT_LENGTH), capped at the trained context */
  context_length: number;
  /**
   * GiB (as the driver counts a card's memory) one card must have for the whole model, rounded up
   * to 0.01: weights on the GPU + KV cache + compute buffer + llama.cpp's 1 GiB margin + the
   * CUDA reserve. A card of at least this many GiB holds it.
   */
  vram_need_gb: number;
}

/**
 * The context a model lease runs with when none is asked: Ollama's own default below 23 GiB of
 * VRAM (ollama/ollama `server/routes.go`). The machine must get it as OLLAMA_CONTEXT_LENGTH, or a bigger card
 * makes Ollama pick 32768 or 262144 on its own.
 */
export const DEFAULT_CONTEXT_LENGTH = 4096;

/** The context Ollama runs: the model's own num_ctx wins over OLLAMA_CONTEXT_LENGTH (ollama/ollama `server/routes.go` line 141). */
export function contextFor(facts: ModelFacts, asked: number | null): number {
  return servedContext(facts, facts.arch.params_num_ctx ?? asked ?? DEFAULT_CONTEXT_LENGTH);
}

/**
 * The bytes one card must report for the model to load whole: the smallest card the runner's
 * rule accepts (its batch falls to 512 on a card this tight, sched.go `automaticGenerationBatch`).
 */
export function singleCardNeedBytes(facts: ModelFacts, context: number): number {
  const probe: Cards = { count: 1, memoryMib: 1, flashAttention: true };
  const load = runnerFit(facts, context, probe).cards[0]!;
  return load.weights + load.kv + load.compute + FIT_MARGIN_BYTES + CARD_RESERVED_BYTES;
}

/** The download as a lease shows it: GB to two decimals, as near as they say. */
const weightsGb = (bytes: number) => Math.round(bytes / 1e7) / 100;

export function needOf(facts: ModelFacts, contextLength: number | null): ModelNeed {
  const context = contextFor(facts, contextLength);
  return {
    name: facts.name,
    digest: facts.digest,
    weights_gb: weightsGb(facts.weights_bytes),
    context_length: context,
    vram_need_gb: gibUp(singleCardNeedBytes(facts, context)),
  };
}

/** The runner's decision on `gpuCount` cards of `memoryMib` each (the offer's physical memory). */
export function fitOnCards(facts: ModelFacts, context: number, gpuCount: number, memoryMib: number) {
  return runnerFit(facts, context, { count: gpuCount, memoryMib, flashAttention: true });
}

export { ModelNotFoundError, RegistryUnavailableError } from "./errors";
export { modelFacts } from "./facts";
