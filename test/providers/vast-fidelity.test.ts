import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Provider } from "../../src/providers/types";
import { createVastProvider } from "../../src/providers/vast";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { VAST_FAKE_KEY, VAST_FAKE_URL, VastFake, vastOffer } from "../fakes/vast";
import { api } from "../helpers";
import { batchSpec, ollamaSpec } from "../support/provider-fixtures";

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

  it("a lease that names a larger disk searches, prices and creates with that disk", async () => {
    for (const o of fake.offers) o.disk_space = 300;
    fake.offers.push(vastOffer(20000701, "RTX 4090", 1, 24564, 0.45, { disk_space: 2000 }));
    const res = await api("/v1/leases", {
      method: "POST",
      json: { provider: "vast", gpu: "4090", disk_gb: 500, max_minutes: 30, template: "custom", image: "x/y:1" },
    });
    expect(res.status).toBe(202);
    const lease = (await res.json()) as { price_per_hour: number; provider_ref: string; creates: unknown[] };
    // Only the host with room was offered: the first create is the one that rents.
    expect(lease.creates).toHaveLength(1);
    const search = bundleBodies().at(-1)!;
    expect(search.disk_space).toEqual({ gte: 500 });
    expect(search.allocated_storage).toBe(500);
    expect(putBodies()[0]?.disk).toBe(500);
    expect(fake.model.get(lease.provider_ref)?.pricePerHour).toBe(lease.price_per_hour);
  });
});

describe("create limits", () => {
  it("waits out the create's 12 s penalty after a 429, then creates", async () => {
    let now = Date.parse("2026-11-29T02:00:00Z");
    installed.restore();
    fake = new VastFake({ now: () => now });
    installed = installFakes(fake);
    fake.quirks.rateLimits = true;
    const timed = createVastProvider({
      apiKey: VAST_FAKE_KEY,
      baseUrl: VAST_FAKE_URL,
      sleep: async (ms) => {
        now += ms;
      },
    });
    const offers = await timed.listOffers({});
    expect(await timed.rent(offers[0]!, ollamaSpec())).toMatchObject({ ok: true });
    now += 1_000;
    // Inside create's 4.5 s interval: a 429 and 12 s of lockout.
    expect(await timed.rent(offers[1]!, ollamaSpec({ label: "gpulease-lse02" }))).toMatchObject({ ok: true });
    expect(fake.model.list()).toHaveLength(2);
  });

  it("refuses an env over 32,768 characters in total before any create, as Vast would", async () => {
    const env = Object.fromEntries(Array.from({ length: 130 }, (_, i) => [`VAR_${i}`, "x".repeat(250)]));
    const problems = vast().validateSpec?.({ env, cmd: null, template: "custom" }) ?? [];
    expect(problems.join("; ")).toContain("32768");
    const offers = await vast().listOffers({ gpu: "4090" });
    const result = await vast().rent(offers[0]!, batchSpec({ env }));
    expect(result).toMatchObject({ ok: false, kind: "rejected" });
    expect(fake.requests.some((r) => r.method === "PUT")).toBe(false);
  });
});

describe("the fake answers like Vast", () => {
  it("a filter on a field an offer lacks excludes it (a null fails the comparison)", async () => {
    const { disk_space: _, ...noDisk } = fake.offers[0]!;
    fake.offers[0] = noDisk as (typeof fake.offers)[0];
    const offers = await vast().listOffers({ gpu: "4090" });
    expect(offers.map((o) => o.offer_id)).not.toContain(`vast:${noDisk.id}`);
  });

  it("an unknown route is an HTML 404, which the adapter never reads as gone", async () => {
    const wrong = createVastProvider({ apiKey: VAST_FAKE_KEY, baseUrl: `${VAST_FAKE_URL}/v0`, sleep: async () => {} });
    await expect(wrong.status("27114906")).rejects.toThrow();
  });
});
