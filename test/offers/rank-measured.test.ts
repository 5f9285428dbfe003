import { describe, expect, it } from "vitest";
import { type MeasuredFigure, measuredKey, offerHost } from "../../src/offers/bandwidth";
import { type RankContext, rankOffer, rankOffers } from "../../src/offers/rank";
import type { ProviderOffer } from "../../src/providers/types";
import { providerOffer } from "../support/provider-fixtures";

const runpod4090 = (overrides: Partial<ProviderOffer> = {}): ProviderOffer =>
  providerOffer({ offer_id: "runpod:SECURE:NVIDIA GeForce RTX 4090", provider: "runpod", ...overrides });

const measured = (...entries: [key: string, gbs: number, samples: number][]): Map<string, MeasuredFigure> =>
  new Map(entries.map(([key, gbs, samples]) => [key, { gbs, samples }]));

// weights 24 GB at 150 MB/s: first hour = 0.69 × (1 + 260/3600) = 0.739833 USD
const ctx = (over: Partial<RankContext> = {}): RankContext => ({ weightsGb: 24, eurUsd: 1.08, ...over });

describe("measured bandwidth in the value score", () => {
  it("shows nothing measured and ranks on the vendor's figure when there are no samples", () => {
    for (const context of [ctx(), ctx({ measured: new Map() })]) {
      const ranked = rankOffer(runpod4090(), context);
      expect(ranked.bandwidth_gbs).toBe(1008);
      expect(ranked.measured_bandwidth_gbs).toBeNull();
      expect(ranked.measured_samples).toBe(0);
      expect(ranked.value).toBe(1362); // 1008 / 0.739833
    }
  });

  it("shows a figure with too few samples but keeps ranking on the vendor's (default 3)", () => {
    const ranked = rankOffer(runpod4090(), ctx({ measured: measured([measuredKey("runpod", "RTX 4090"), 800, 2]) }));
    expect(ranked.measured_bandwidth_gbs).toBe(800);
    expect(ranked.measured_samples).toBe(2);
    expect(ranked.bandwidth_gbs).toBe(1008);
    expect(ranked.value).toBe(1362);
  });

  it("ranks on the measured figure from MEASURED_MIN_SAMPLES samples on", () => {
    const m = measured([measuredKey("runpod", "RTX 4090"), 800, 3]);
    const ranked = rankOffer(runpod4090(), ctx({ measured: m }));
    expect(ranked.measured_bandwidth_gbs).toBe(800);
    expect(ranked.bandwidth_gbs).toBe(1008); // the vendor's figure stays beside it
    expect(ranked.value).toBe(1081); // 800 / 0.739833 = 1081.32
    expect(rankOffer(runpod4090(), ctx({ measured: m, measuredMinSamples: 4 })).value).toBe(1362);
    expect(rankOffer(runpod4090(), ctx({ measured: m, measuredMinSamples: 1 })).value).toBe(1081);
  });

  it("applies a per-card figure to each card count with the multi-GPU rule", () => {
    const m = measured([measuredKey("runpod", "RTX 4090"), 800, 5]);
    const two = rankOffer(runpod4090({ gpu_count: 2, vram_gb: 48, price_per_hour: 1.38 }), {
      weightsGb: 0,
      eurUsd: 1,
      measured: m,
    });
    // 800 × 0.9 = 720; first hour = 1.38 × (1 + 100/3600) = 1.418333
    expect(two.measured_bandwidth_gbs).toBe(720);
    expect(two.bandwidth_gbs).toBe(907);
    expect(two.value).toBe(508); // 720 / 1.418333 = 507.64
  });

  it("reorders offers: a card that delivers less than its vendor says falls behind", () => {
    const rtx4090 = runpod4090({ price_per_hour: 0.69 });
    const rtx3090 = runpod4090({
      offer_id: "runpod:SECURE:NVIDIA GeForce RTX 3090",
      gpu: "RTX 3090",
      gpu_key: "rtx-3090",
      price_per_hour: 0.6,
    });
    const vendorOnly = rankOffers([rtx4090, rtx3090], ctx()).map((o) => o.offer_id);
    expect(vendorOnly[0]).toBe(rtx3090.offer_id); // 936 / 0.6433 = 1455 beats 1362
    const learned = rankOffers(
      [rtx4090, rtx3090],
      ctx({ measured: measured([measuredKey("runpod", "RTX 3090"), 500, 3]) }),
    );
    expect(learned.map((o) => o.offer_id)).toEqual([rtx4090.offer_id, rtx3090.offer_id]);
    expect(learned[1]!.value).toBe(777); // 500 / 0.643333
  });

  it("gives a card the vendor table does not know a value once it was measured", () => {
    const mystery = providerOffer({
      offer_id: "vast:1",
      provider: "vast",
      gpu: "Mystery",
      gpu_key: null,
      price_per_hour: 0.5,
    });
    expect(rankOffer(mystery, ctx()).value).toBeNull();
    const ranked = rankOffer(mystery, ctx({ measured: measured([measuredKey("vast", "Mystery"), 600, 3]) }));
    expect(ranked.bandwidth_gbs).toBeNull();
    expect(ranked.measured_bandwidth_gbs).toBe(600);
    expect(ranked.value).toBe(1119); // 600 / (0.5 × 1.072222)
  });

  it("prefers a host's own samples once it has enough, else the GPU's", () => {
    const offer = providerOffer({ offer_id: "vast:9001", provider: "vast", bandwidth_gbs: 1000, price_per_hour: 0.69 });
    const gpu = measuredKey("vast", "RTX 4090");
    const host = measuredKey("vast", "RTX 4090", "9001");
    const own = rankOffer(offer, ctx({ measured: measured([gpu, 900, 10], [host, 600, 3]) }));
    expect([own.measured_bandwidth_gbs, own.measured_samples, own.value]).toEqual([600, 3, 811]);
    const few = rankOffer(offer, ctx({ measured: measured([gpu, 900, 10], [host, 600, 2]) }));
    expect([few.measured_bandwidth_gbs, few.measured_samples, few.value]).toEqual([900, 10, 1216]);
    // another host's samples count for its GPU, never for this host
    const other = rankOffer(offer, ctx({ measured: measured([measuredKey("vast", "RTX 4090", "7777"), 300, 5]) }));
    expect(other.measured_samples).toBe(0);
    expect(other.value).toBe(1352); // the vendor's 1000
  });

  it("keeps providers apart: RunPod's measurements never rank a Vast.ai offer", () => {
    const vast = providerOffer({ offer_id: "vast:9001", provider: "vast", price_per_hour: 0.69 });
    const ranked = rankOffer(vast, ctx({ measured: measured([measuredKey("runpod", "RTX 4090"), 100, 9]) }));
    expect(ranked.measured_samples).toBe(0);
    expect(ranked.value).toBe(1362);
  });
});

describe("measured keys and hosts", () => {
  it("meets a lease's GPU name and an offer's however the vendor words are written", () => {
    expect(measuredKey("vast", "NVIDIA GeForce RTX 4090")).toBe(measuredKey("vast", "RTX 4090"));
    expect(measuredKey("vast", "rtx4090")).toBe(measuredKey("vast", "RTX 4090"));
    expect(measuredKey("vast", "RTX 4090")).not.toBe(measuredKey("runpod", "RTX 4090"));
    expect(measuredKey("vast", "RTX 4090", "1")).not.toBe(measuredKey("vast", "RTX 4090"));
    expect(measuredKey("vast", "RTX 4090")).not.toBe(measuredKey("vast", "RTX 4080"));
  });

  it("names a Vast.ai offer's host by its ask and no host elsewhere", () => {
    expect(offerHost({ provider: "vast", offer_id: "vast:18463529" })).toBe("18463529");
    expect(offerHost({ provider: "vast", offer_id: "vast:bogus" })).toBeNull();
    expect(offerHost({ provider: "runpod", offer_id: "runpod:SECURE:NVIDIA GeForce RTX 4090" })).toBeNull();
    expect(offerHost({ provider: "sim", offer_id: "sim:rtx-4090:1" })).toBeNull();
  });
});
