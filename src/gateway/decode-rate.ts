/**
 * A decode rate as the runner times it. The pinned Ollama answers `eval_count` = llama.cpp's
 * `predicted_n` and `eval_duration` = its `predicted_ms` (ollama/ollama `llm/llama_server.go`);
 * llama.cpp starts that clock when the first token is sampled (`t_start_generation` is set at
 * `n_decoded == 1`, llama.cpp `tools/server/server-context.cpp`), so the duration covers
 * `eval_count − 1` tokens: a one-token answer would read as a rate of 1 / almost nothing, a
 * two-token answer as twice its real rate.
 */

/** Fewest tokens inside `eval_duration` (eval_count − 1) for a rate: short answers are noise. */
export const MIN_TIMED_TOKENS = 4;

/** Decoded tokens per second (2 decimals), or null for an answer too short or a duration that is none. */
export function decodeRate(evalCount: number | null, evalDurationNs: number | null): number | null {
  if (evalCount === null || evalDurationNs === null) return null;
  if (!Number.isInteger(evalCount) || !(evalDurationNs > 0)) return null;
  const timed = evalCount - 1;
  if (timed < MIN_TIMED_TOKENS) return null;
  return Math.round((timed / (evalDurationNs / 1e9)) * 100) / 100;
}
