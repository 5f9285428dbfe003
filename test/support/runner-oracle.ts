import type { ModelFacts } from "../../src/models/schema";

/**
 * An oracle for "does the model load whole on one card", written step by step from the sources
 * of the Ollama gpulease pins (ollama/ollama v0.32.15; llama.cpp b10488), apart from
 * src/models/runner.ts: the table test holds the production rule to it. Each step names the
 * line it follows.
 */

const MiB = 1048576;

export interface OracleAnswer {
  fits: boolean;
  /** bytes llama.cpp would leave free on the card (negative: short by that much) */
  leftOver: number;
  ubatch: number;
  nCtx: number;
}

export function oracleFitsOneCard(model: ModelFacts, asked: number, cardMib: number): OracleAnswer {
  const a = model.arch;
  // server/routes.go line 141: opts.FromMap(model.Options) after the env default -> params num_ctx wins.
  let numCtx = a.params_num_ctx ?? asked;
  // server/sched.go effectiveContext (lines 161-166): capped at the trained context.
  if (a.context_length !== null && a.context_length > 0 && numCtx > a.context_length) numCtx = a.context_length;
  // server/sched.go line 794: times num_parallel (1).
  const predictedCtx = numCtx * 1;

  // The card's free memory as llama.cpp reads it: total less the CUDA context (457 MiB, ml/device.go line 363).
  const free = cardMib * MiB - 457 * MiB;

  // llm/llama_server.go PredictServerVRAM (lines 2681-2700).
  const predHeadDim = Math.floor(a.embedding_length / a.head_count);
  const predicted = model.weights_bytes + 2 * a.block_count * a.head_count_kv * predHeadDim * predictedCtx * 2;

  // server/sched.go automaticGenerationBatch (lines 822-835), flash attention auto on CUDA >= 6.0.
  let batch = predictedCtx > 32768 ? 2048 : predictedCtx > 4096 ? 1024 : 512;
  for (;;) {
    if (batch <= 512) break;
    // generationBatchFits (lines 870-884)
    const threshold = Math.floor((free * 80) / 100);
    let ok = predicted <= threshold;
    if (ok && batch >= 2048) ok = predicted <= (free * 60) / 100;
    else if (ok && batch >= 1024) ok = predicted <= (free * 75) / 100;
    const surcharge = batch >= 2048 ? 2 * 1024 * MiB : batch >= 1024 ? 768 * MiB : 0;
    if (ok) ok = surcharge <= threshold - predicted;
    if (ok) break;
    batch = batch > 1024 ? 1024 : 512; // nextLowerGenerationBatch
  }

  // llama.cpp src/llama-context.cpp: cparams.n_ctx = GGML_PAD(cparams.n_ctx, 256).
  const nCtx = Math.ceil(predictedCtx / 256) * 256;

  // llama.cpp: the input token embedding stays on the CPU; an untied output tensor goes to the GPU.
  const onGpuWeights = a.output_tied === false ? model.weights_bytes - (a.token_embd_bytes ?? 0) : model.weights_bytes;

  // KV cache, f16: each full layer nCtx cells; each windowed layer min(nCtx, pad256(n_swa + n_ubatch)).
  const dk = a.key_length ?? Math.floor(a.embedding_length / a.head_count);
  const dv = a.value_length ?? Math.floor(a.embedding_length / a.head_count);
  const cellBytes = (dk + dv) * a.head_count_kv * 2;
  const pattern = a.sliding_window_pattern ?? { gemma2: 2, gemma3: 6, cohere2: 4, gptoss: 2 }[a.architecture] ?? 0;
  let kv = 0;
  for (let il = 0; il < a.block_count; il++) {
    const windowed = (a.sliding_window ?? 0) > 0 && pattern > 1 && il % pattern !== pattern - 1;
    const cells = windowed ? Math.min(nCtx, Math.ceil(((a.sliding_window ?? 0) + batch) / 256) * 256) : nCtx;
    kv += cells * cellBytes;
  }

  // Compute buffer with flash attention: logits f32, hidden state f32, f16 mask.
  const compute = batch * (a.vocab_size ?? 0) * 4 + batch * a.embedding_length * 4 + nCtx * batch * 2;

  // common/fit.cpp common_params_fit_impl, one device: projected_free >= margin (1024 MiB) -> no changes.
  const leftOver = free - (onGpuWeights + kv + compute);
  return { fits: leftOver >= 1024 * MiB, leftOver: leftOver - 1024 * MiB, ubatch: batch, nCtx };
}
