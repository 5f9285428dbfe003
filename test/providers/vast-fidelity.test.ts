import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Provider } from "../../src/providers/types";
import { createVastProvider } from "../../src/providers/vast";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { VAST_FAKE_KEY, VAST_FAKE_URL, VastFake, vastOffer } from "../fakes/vast";
import { api } from "../helpers";

// Vast.ai fidelity against the real clients: gpuhunt, SkyPilot, vast-cli (docs/providers.md#vastai).

let fake: VastFake;
let installed: InstalledFakes;
beforeEach(() => {
  fake = new VastFake();
  installed = installFakes(fake);
});
afterEach(() => installed.restore());

const vast = (): Provider =>
  createVastProvider({ apiKey: VAST_FAKE_KEY, baseUrl: VAST_FAKE_URL, sleep: async () => {} });

const bundleBodies = () =>
  fake.requests
    .filter((r) => r.method === "POST" && r.path === "/api/v0/bundles/")
    .map((r) => r.body as Record<string, unknown>);

describe("GPU names go to Vast", () => {
  it("finds an H100 behind a hundred cheaper cards, without a VRAM filter", async () => {
    fake.offers = [
      ...Array.from({ length: 100 }, (_, i) => vastOffer(20000000 + i, "RTX 3090", 1, 24576, 0.1 + i / 1000)),
      vastOffer(20000500, "H100 SXM", 1, 81559, 2.2, { compute_cap: 900 }),
      vastOffer(20000501, "H100 PCIE", 1, 81559, 1.9, { compute_cap: 900 }),
    ];
    const offers = await vast().listOffers({ gpu: "h100" });
    expect(offers.map((o) => o.gpu).sort()).toEqual(["H100 PCIE", "H100 SXM"]);
    expect(bundleBodies()[0]?.gpu_name).toEqual({ in: expect.arrayContaining(["H100 SXM", "H100 PCIE", "H100 NVL"]) });
  });

  it("sends Vast's own spelling for a spaced-out or run-together name", async () => {
    await vast().listOffers({ gpu: "rtx4090" });
    expect(bundleBodies()[0]?.gpu_name).toEqual({ in: ["RTX 4090"] });
    const offers = await vast().listOffers({ gpu: "rtx4090" });
    expect(offers.length).toBeGreaterThan(0);
    expect(offers.every((o) => o.gpu === "RTX 4090")).toBe(true);
  });

  it("a name outside the table searches without a name filter and wider, then checks names here", async () => {
    fake.offers = [
      ...Array.from({ length: 100 }, (_, i) => vastOffer(20000000 + i, "RTX 3090", 1, 24576, 0.1 + i / 1000)),
      vastOffer(20000600, "Q RTX 8000", 1, 49152, 0.5),
    ];
    const offers = await vast().listOffers({ gpu: "q rtx 8000" });
    expect(offers.map((o) => o.gpu)).toEqual(["Q RTX 8000"]);
    expect(bundleBodies()[0]?.gpu_name).toBeUndefined();
  });
});

describe("one disk size for search, price and create", () => {
  const putBodies = () => fake.requests.filter((r) => r.method === "PUT").map((r) => r.body as Record<string, unknown>);

  // Hosts with a disk between the two sizes gpulease used to ask (30/40 GB at no weights, 62/68 at 24).
  it.each([
    [0, 35],
    [24, 65],
  ])(
    "a lease with %i GB of weights asks the disk it searched and priced (hosts with %i GB)",
    async (weights, hostDisk) => {
      for (const o of fake.offers) o.disk_space = hostDisk;
      fake.offers.push(vastOffer(20000700, "RTX 4090", 1, 24564, 0.4, { disk_space: 2000 }));
      const res = await api("/v1/leases", {
        method: "POST",
        json: {
          provider: "vast",
          gpu: "4090",
          weights_gb: weights,
          max_minutes: 30,
          template: "custom",
          image: "x/y:1",
        },
      });
      expect(res.status).toBe(202);
      const lease = (await res.json()) as { price_per_hour: number; provider_ref: string; creates: unknown[] };
      // A host the search found does not refuse the create for its disk.
      expect(lease.creates).toHaveLength(1);
      const search = bundleBodies().at(-1)!;
      const [create] = putBodies();
      expect(create?.disk).toBe((search.disk_space as { gte: number }).gte);
      expect(create?.disk).toBe(search.allocated_storage);
      // dph_total priced the same storage the instance bills.
      expect(fake.model.get(lease.provider_ref)?.pricePerHour).toBe(lease.price_per_hour);
    },
  );
});
