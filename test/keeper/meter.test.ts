import { describe, expect, it } from "vitest";
import type { UsageSample } from "../../src/gateway/usage";
import { addSample, emptyMeter, implausible, MAX_TOKENS_PER_ANSWER, newlyDropped } from "../../src/keeper/meter";

const sample = (over: Partial<UsageSample> = {}): UsageSample => ({
  ok: true,
  prompt_tokens: 10,
  completion_tokens: 5,
  decode_tokens_per_s: 40,
  first_token_ms: 100,
  ...over,
});

describe("the meter checks every sample where it enters", () => {
  it.each([
    ["1e308 prompt tokens", { prompt_tokens: 1e308 }],
    ["Infinity completion tokens", { completion_tokens: Number.POSITIVE_INFINITY }],
    ["NaN prompt tokens", { prompt_tokens: Number.NaN }],
    ["a fractional count", { prompt_tokens: 0.5 }],
    ["a negative count", { completion_tokens: -3 }],
    ["more tokens than any answer holds", { prompt_tokens: MAX_TOKENS_PER_ANSWER + 1 }],
    ["a decode rate no GPU reaches", { decode_tokens_per_s: 1e9 }],
    ["a zero decode rate", { decode_tokens_per_s: 0 }],
    ["a negative first-token wait", { first_token_ms: -1 }],
    ["a first token after a day", { first_token_ms: 86_400_000 }],
    ["a count given as text", { prompt_tokens: "12" as unknown as number }],
  ])("drops %s, counts it, and adds nothing", (_name, over) => {
    const bad = sample(over);
    expect(implausible(bad)).not.toBeNull();
    const meter = addSample(emptyMeter, bad);
    expect(meter).toMatchObject({ requests: 0, prompt_tokens: 0, completion_tokens: 0, decode: [], dropped: 1 });
    expect(meter.dirty).toBe(true);
    expect(newlyDropped(meter)).toBe(1);
  });

  it("counts a plausible sample at the limits", () => {
    const meter = addSample(
      emptyMeter,
      sample({ prompt_tokens: MAX_TOKENS_PER_ANSWER, completion_tokens: 0, decode_tokens_per_s: null }),
    );
    expect(meter).toMatchObject({ requests: 1, prompt_tokens: MAX_TOKENS_PER_ANSWER, dropped: 0 });
  });

  it("drops a sample whose total would pass 2^53, so a stored sum is always a safe integer", () => {
    const near = { ...emptyMeter, prompt_tokens: Number.MAX_SAFE_INTEGER - 5 };
    const meter = addSample(near, sample({ prompt_tokens: 10 }));
    expect(meter.prompt_tokens).toBe(Number.MAX_SAFE_INTEGER - 5);
    expect(meter.dropped).toBe(1);
  });

  it("a meter stored before `dropped` existed reads as none dropped", () => {
    const { dropped: _d, droppedReported: _r, ...old } = emptyMeter;
    const meter = addSample(old as typeof emptyMeter, sample());
    expect(meter).toMatchObject({ requests: 1, dropped: 0, droppedReported: 0 });
  });
});
