/**
 * The gateway's usage meter as a lease's keeper keeps it: requests and token counts added up in
 * the keeper's storage, written to D1 at most every FLUSH_EVERY_MS. The counts come from the
 * rented machine's answers, so each sample is checked where it enters: an implausible one (not a
 * whole number, more tokens than any answer holds, a decode rate or wait no GPU produces) is
 * dropped and counted, never added. The meter is not on the teardown's path: a flush that fails
 * is logged and tried again later, and no step waits for it.
 */
import type { UsageSample } from "../gateway/usage";

/** A lease's usage between flushes. */
export interface MeterState {
  requests: number;
  errors: number;
  prompt_tokens: number;
  completion_tokens: number;
  /** the most recent samples, for the medians */
  decode: number[];
  first: number[];
  /** implausible samples dropped, in all */
  dropped: number;
  /** lines and events over their bound the gateway passed on unparsed, in all */
  unparsed: number;
  /** of those, how many a flush has already reported (a `usage_dropped` event) */
  droppedReported: number;
  flushedAt: number;
  dirty: boolean;
}

export const emptyMeter: MeterState = {
  requests: 0,
  errors: 0,
  prompt_tokens: 0,
  completion_tokens: 0,
  decode: [],
  first: [],
  dropped: 0,
  unparsed: 0,
  droppedReported: 0,
  flushedAt: 0,
  dirty: false,
};

/** At most one D1 write per lease this often, whatever the request rate. */
export const FLUSH_EVERY_MS = 5_000;

/**
 * The most tokens one answer may report: above the largest context any served model has
 * (Llama 4 Scout's 10 M), so a real answer always fits and 1e308 never does.
 */
export const MAX_TOKENS_PER_ANSWER = 10_000_000;
/** Decode rate above this is not a GPU's (the fastest decode of small models is a few thousand). */
export const MAX_DECODE_TOKENS_PER_S = 100_000;
/** A first byte later than this is not an answer the gateway waited for. */
export const MAX_FIRST_TOKEN_MS = 3_600_000;
/** More overlong lines than this in one answer would be 256 GiB of it: not a count to add. */
export const MAX_UNPARSED_PER_ANSWER = 1_000_000;

const KEEP_SAMPLES = 101;

const count = (value: unknown, max: number): value is number =>
  typeof value === "number" && Number.isSafeInteger(value) && value >= 0 && value <= max;
const rate = (value: unknown, max: number): boolean =>
  value === null || (typeof value === "number" && Number.isFinite(value) && value > 0 && value <= max);

/** Why a sample is not plausible, or null when it may be counted. */
export function implausible(sample: UsageSample): string | null {
  if (typeof sample.ok !== "boolean") return "ok is not a boolean";
  if (!count(sample.prompt_tokens, MAX_TOKENS_PER_ANSWER)) return "prompt_tokens is not a plausible count";
  if (!count(sample.completion_tokens, MAX_TOKENS_PER_ANSWER)) return "completion_tokens is not a plausible count";
  if (!rate(sample.decode_tokens_per_s, MAX_DECODE_TOKENS_PER_S)) return "decode_tokens_per_s is not plausible";
  if (sample.first_token_ms !== null && !count(sample.first_token_ms, MAX_FIRST_TOKEN_MS))
    return "first_token_ms is not plausible";
  if (sample.unparsed !== undefined && !count(sample.unparsed, MAX_UNPARSED_PER_ANSWER))
    return "unparsed is not a plausible count";
  return null;
}

/**
 * One request added to the meter (pure); an implausible sample is counted as dropped instead.
 * Totals stay safe integers: a sum that would pass 2^53 is dropped too. The overlong lines are
 * the gateway's own count, added also when the machine's numbers are dropped.
 */
export function addSample(state: MeterState, sample: UsageSample): MeterState {
  const base = { ...emptyMeter, ...state };
  const unparsed = count(sample.unparsed, MAX_UNPARSED_PER_ANSWER) ? sample.unparsed : 0;
  const meter = { ...base, unparsed: base.unparsed + unparsed };
  const prompt = meter.prompt_tokens + sample.prompt_tokens;
  const completion = meter.completion_tokens + sample.completion_tokens;
  if (implausible(sample) !== null || !Number.isSafeInteger(prompt) || !Number.isSafeInteger(completion))
    return { ...meter, dropped: meter.dropped + 1, dirty: true };
  const keep = (list: number[], value: number | null) =>
    value === null ? list : [...list, value].slice(-KEEP_SAMPLES);
  return {
    ...meter,
    requests: meter.requests + 1,
    errors: meter.errors + (sample.ok ? 0 : 1),
    prompt_tokens: prompt,
    completion_tokens: completion,
    decode: keep(meter.decode, sample.decode_tokens_per_s),
    first: keep(meter.first, sample.first_token_ms),
    dirty: true,
  };
}

/** The dropped samples a flush should report now (0: none new). */
export const newlyDropped = (meter: MeterState): number => meter.dropped - meter.droppedReported;
