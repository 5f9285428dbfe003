import type { ModelFacts } from "../models/schema";
import { bytesPerToken } from "./bytes-per-token";

/** What the keeper's meter holds that the bandwidth needs: its totals over the lease's requests. */
export interface MeterTotals {
  requests: number;
  errors: number;
  prompt_tokens: number;
  completion_tokens: number;
}

/**
 * pure: the memory bandwidth (GB/s over all cards) a lease's decode rate means: tokens/s × the
 * bytes one token reads (bytes-per-token.ts) at the mean context of its requests (the prompt and
 * half the answer; never more than the context the runner was sized for). Without the model's
 * facts (sized by hand) every weight counts and no KV cache.
 */
export function leaseBandwidthGbs(
  tokensPerS: number,
  model: { weights_gb: number; context_length: number | null },
  facts: Pick<ModelFacts, "weights_bytes" | "arch"> | null,
  meter: MeterTotals,
): number {
  if (!facts) return Math.round(tokensPerS * model.weights_gb * 100) / 100;
  const answered = Math.max(1, meter.requests - meter.errors);
  const meanContext = (meter.prompt_tokens + meter.completion_tokens / 2) / answered;
  const context = model.context_length === null ? meanContext : Math.min(meanContext, model.context_length);
  return Math.round(((tokensPerS * bytesPerToken(facts, context)) / 1e9) * 100) / 100;
}
