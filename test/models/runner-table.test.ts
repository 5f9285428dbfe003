import { describe, expect, it } from "vitest";
import { contextFor, fitOnCards } from "../../src/models/need";
import { legacyFits } from "../support/legacy-need";
import { oracleFitsOneCard } from "../support/runner-oracle";
import { SIZING_CARDS, SIZING_CONTEXTS, SIZING_MODELS } from "../support/sizing-models";

/**
 * Every (model, context, card) of the table decided by the production rule (src/models/runner.ts)
 * and by an oracle written separately from the sources (test/support/runner-oracle.ts).
 */
describe("sizing table: the runner's rule against the oracle", () => {
  const cases = SIZING_MODELS.flatMap((model) =>
    SIZING_CONTEXTS.flatMap((context) => SIZING_CARDS.map((card) => ({ model, context, card }))),
  );

  it("covers dense, MoE, sliding-window and num_ctx models, four contexts and the named cards", () => {
    expect(new Set(SIZING_MODELS.map((m) => m.kind))).toEqual(new Set(["dense", "moe", "sliding-window", "num_ctx"]));
    expect(SIZING_MODELS.length).toBeGreaterThanOrEqual(8);
    expect(SIZING_CARDS.map((c) => c.name)).toEqual(
      expect.arrayContaining(["L40S", "A40", "L4", "A10", "RTX 4090", "RTX 5090", "RTX A6000", "H100 SXM"]),
    );
    expect(cases.length).toBe(SIZING_MODELS.length * 4 * SIZING_CARDS.length);
  });

  it.each(cases.map((c) => [c.model.name, c.context, c.card.name, c] as const))(
    "%s at %i on %s",
    (_m, _c, _k, { model, context, card }) => {
      const oracle = oracleFitsOneCard(model, context, card.memoryMib);
      const rule = fitOnCards(model, contextFor(model, context), 1, card.memoryMib);
      expect(rule.fits, `oracle leaves ${Math.round(oracle.leftOver / 2 ** 20)} MiB`).toBe(oracle.fits);
      expect(rule.ubatch).toBe(oracle.ubatch);
      expect(rule.context).toBe(oracle.nCtx);
    },
  );

  it("some decisions differ from the old estimate in both directions", () => {
    let nowFits = 0;
    let nowSpills = 0;
    for (const { model, context, card } of cases) {
      const ctx = contextFor(model, context);
      const old = legacyFits(model, ctx, 1, card.vramGb);
      const now = fitOnCards(model, ctx, 1, card.memoryMib).fits;
      if (now && !old) nowFits++;
      if (!now && old) nowSpills++;
    }
    expect(nowFits).toBeGreaterThan(0);
    expect(nowSpills).toBeGreaterThan(0);
  });
});

const model = (name: string) => SIZING_MODELS.find((m) => m.name === name)!;

describe("the cases the review found", () => {
  it("qwen2.5:72b at 4096 does not load whole on an L40S (44.99 GiB), though the old estimate said it fits 48", () => {
    const m = model("qwen2.5:72b");
    expect(legacyFits(m, 4096, 1, 48)).toBe(true);
    expect(fitOnCards(m, 4096, 1, 46_068).fits).toBe(false);
    expect(oracleFitsOneCard(m, 4096, 46_068).fits).toBe(false);
    // weights on the GPU 43.50 GiB + KV 1.25 + compute 0.31 = 45.06 GiB (more than the card has)
    const load = fitOnCards(m, 4096, 1, 46_068).cards[0]!;
    expect((load.weights + load.kv + load.compute) / 2 ** 30).toBeCloseTo(45.06, 1);
  });

  it("llama3.1:8b at 128k loads on a 24 GB card, which the old estimate refused", () => {
    const m = model("llama3.1:8b");
    expect(legacyFits(m, 131_072, 1, 24)).toBe(false);
    for (const mib of [24_564, 23_034, 23_028]) expect(fitOnCards(m, 131_072, 1, mib).fits).toBe(true);
  });

  it("deepseek-r1:70b passes the old estimate at 16k on an L40S but spills; at 13,568 it loads", () => {
    const m = model("deepseek-r1:70b");
    expect(legacyFits(m, 16_384, 1, 48)).toBe(true);
    expect(fitOnCards(m, 16_384, 1, 46_068).fits).toBe(false);
    expect(fitOnCards(m, 13_568, 1, 46_068).fits).toBe(true);
  });

  it("qwen2.5:32b at 12k passes the old estimate on an A10 but spills", () => {
    const m = model("qwen2.5:32b");
    expect(legacyFits(m, 12_288, 1, 24)).toBe(true);
    expect(fitOnCards(m, 12_288, 1, 23_028).fits).toBe(false);
    expect(fitOnCards(m, 10_240, 1, 23_028).fits).toBe(true);
  });

  it("a model's params num_ctx is what is sized, whatever context is asked", () => {
    const m = model("qwen2.5-coder:32b-16k");
    expect(contextFor(m, 4096)).toBe(16_384);
    expect(contextFor(m, null)).toBe(16_384);
    // on an A10 the 16k its params ask spills; the 4k the lease asked would have loaded
    expect(fitOnCards(m, contextFor(m, 4096), 1, 23_028).fits).toBe(false);
    expect(fitOnCards(m, 4096, 1, 23_028).fits).toBe(true);
  });

  it("sliding-window layers hold the window, not the whole context", () => {
    const m = model("gemma3:27b");
    const fit = fitOnCards(m, 131_072, 1, 81_559);
    // 62 layers, every 6th full (10): the other 52 hold 1024 + one batch, padded to 256
    const perCell = (128 + 128) * 16 * 2;
    const windowCells = Math.ceil((1024 + fit.ubatch) / 256) * 256;
    expect(fit.cards[0]!.kv).toBe(perCell * (10 * 131_072 + 52 * windowCells));
    expect(fit.cards[0]!.kv).toBeLessThan(perCell * 62 * 131_072 * 0.2);
  });
});
