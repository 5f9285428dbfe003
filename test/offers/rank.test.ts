import { describe, expect, it } from "vitest";
import { compareRanked, rankOffer, rankOffers, toOffer } from "../../src/offers/rank";
import type { ProviderOffer } from "../../src/providers/types";
import { providerOffer } from "../support/provider-fixtures";

const offer = (overrides: Partial<ProviderOffer> = {}): ProviderOffer =>
  providerOffer({
    offer_id: "runpod:SECURE:NVIDIA GeForce RTX 4090:1",
    provider: "runpod",
    cloud: "SECURE",
    ...overrides,
  });

const usd = { weightsGb: 24, eurUsd: 1.08 };

describe("value score", () => {
  it("reproduces the reference example: RTX 4090 at 0.69 USD, 24 GB at the default 150 MB/s", () => {
    const ranked = rankOffer(offer(), usd);
    // load = 100 + 24000/150 = 260 s; first hour = 0.69 × (1 + 260/3600) = 0.73983
    expect(ranked.load_time_s).toBe(260);
    expect(ranked.first_hour_cost).toBe(0.7398);
    expect(ranked.bandwidth_gbs).toBe(1008); // from the spec table (no reported figure)
    expect(ranked.value).toBe(1362); // 1008 / 0.73983 = 1362.47
    expect(ranked.source.offer_id).toBe(ranked.offer_id);
  });

  it("reduces bandwidth 10 % per extra card (and reports the reduced figure)", () => {
    const two = rankOffer(offer({ gpu_count: 2, vram_gb: 48, price_per_hour: 1.38 }), { weightsGb: 0, eurUsd: 1 });
    // bw = 1008 × 0.9 = 907.2; load = 100 s; first hour = 1.38 × (1 + 100/3600) = 1.418333
    expect(two.bandwidth_gbs).toBe(907);
    expect(two.load_time_s).toBe(100);
    expect(two.value).toBe(640); // 907.2 / 1.418333 = 639.62

    const four = rankOffer(offer({ gpu_count: 4, vram_gb: 96 }), usd);
    expect(four.bandwidth_gbs).toBe(735); // 1008 × 0.9³ = 734.83
  });

  it("estimates load time from the host's download speed, rounded", () => {
    expect(rankOffer(offer({ download_mbs: 500 }), { weightsGb: 40, eurUsd: 1 }).load_time_s).toBe(180); // 100 + 40000/500
    expect(rankOffer(offer(), { weightsGb: 1, eurUsd: 1 }).load_time_s).toBe(107); // 100 + 6.67
    expect(rankOffer(offer(), { weightsGb: 0, eurUsd: 1 }).load_time_s).toBe(100);
  });

  it("adds Vast's download fee and prefers its reported bandwidth over the spec table", () => {
    const vast = offer({
      offer_id: "vast:123",
      provider: "vast",
      bandwidth_gbs: 1000,
      download_mbs: 250,
      download_cost_per_gb: 0.01,
      price_per_hour: 0.4,
    });
    const ranked = rankOffer(vast, { weightsGb: 50, eurUsd: 1.08 });
    // load = 100 + 50000/250 = 300 s; first hour = 0.4 × (1 + 300/3600) + 0.01 × 50 = 0.93333
    expect(ranked.load_time_s).toBe(300);
    expect(ranked.first_hour_cost).toBe(0.9333);
    expect(ranked.bandwidth_gbs).toBe(1000);
    expect(ranked.value).toBe(1071); // 1000 / 0.93333 = 1071.43
  });

  it("converts EUR prices and fees with EUR_USD; VRAMfarm's 15-minute minimum does not change the first hour", () => {
    const vramfarm = offer({
      offer_id: "vramfarm:5101",
      provider: "vramfarm",
      price_per_hour: 0.49,
      currency: "EUR",
      download_cost_per_gb: 0.002,
      min_billed_minutes: 15,
      templates: ["custom"],
    });
    const ranked = rankOffer(vramfarm, usd);
    // first hour = 0.49 × (1 + 260/3600) + 0.002 × 24 = 0.573389 EUR = 0.619260 USD
    expect(ranked.currency).toBe("EUR");
    expect(ranked.price_per_hour).toBe(0.49);
    expect(ranked.price_per_hour_usd).toBe(0.5292);
    expect(ranked.first_hour_cost).toBe(0.5734);
    expect(ranked.first_hour_cost_usd).toBe(0.6193);
    expect(ranked.value).toBe(1628); // 1008 / 0.61926 = 1627.75
    expect(ranked.min_billed_minutes).toBe(15);
  });

  it("has no value when bandwidth or price is unknown, and sorts those last", () => {
    const unknownCard = offer({
      offer_id: "vast:1",
      provider: "vast",
      gpu: "Mystery",
      gpu_key: null,
      price_per_hour: 0.05,
    });
    const free = offer({ offer_id: "sim:free", provider: "sim", price_per_hour: 0 });
    const slow = offer({ offer_id: "runpod:slow", gpu: "L4", gpu_key: "l4", price_per_hour: 2 });
    expect(rankOffer(unknownCard, usd).value).toBeNull();
    expect(rankOffer(unknownCard, usd).bandwidth_gbs).toBeNull();
    expect(rankOffer(free, usd).value).toBeNull();
    expect(rankOffer(free, usd).bandwidth_gbs).toBe(1008);

    const order = rankOffers([unknownCard, free, slow], usd).map((o) => o.offer_id);
    // slow has a (low) value; among the nulls the cheaper (free) comes first
    expect(order).toEqual(["runpod:slow", "sim:free", "vast:1"]);
  });

  it("breaks equal values by price, then provider and id, whatever the input order", () => {
    // 1000 / (1 × 1.02778) and 2000 / (2 × 1.02778) both round to 973
    const cheap = offer({ offer_id: "vast:cheap", provider: "vast", bandwidth_gbs: 1000, price_per_hour: 1 });
    const dear = offer({ offer_id: "runpod:dear", bandwidth_gbs: 2000, price_per_hour: 2 });
    const ctx = { weightsGb: 0, eurUsd: 1 };
    expect(rankOffer(cheap, ctx).value).toBe(973);
    expect(rankOffer(dear, ctx).value).toBe(973);
    expect(rankOffers([dear, cheap], ctx).map((o) => o.offer_id)).toEqual(["vast:cheap", "runpod:dear"]);

    const a = offer({ offer_id: "vast:a", provider: "vast" });
    const b = offer({ offer_id: "runpod:b" });
    const c = offer({ offer_id: "runpod:a" });
    for (const input of [
      [a, b, c],
      [c, b, a],
      [b, a, c],
    ]) {
      expect(rankOffers(input, usd).map((o) => o.offer_id)).toEqual(["runpod:a", "runpod:b", "vast:a"]);
    }
    expect(compareRanked(rankOffer(a, usd), rankOffer(a, usd))).toBe(0);
  });

  it("keeps the adapter's offer out of the public object", () => {
    const ranked = rankOffer(offer(), usd);
    const shown = toOffer(ranked);
    expect(shown).not.toHaveProperty("source");
    expect(JSON.stringify(shown)).not.toContain("gpu_key");
  });
});
