import { env } from "cloudflare:workers";
import { beforeEach, describe, expect, it } from "vitest";
import { clearOfferCache } from "../../src/offers/cache";
import { findOffer, listRankedOffers } from "../../src/offers/service";
import { ProviderError } from "../../src/providers/http";
import type { ProviderOffer } from "../../src/providers/types";
import { PROVIDER_SECRETS } from "../helpers";
import { providerOffer } from "../support/provider-fixtures";
import { registryOf, type StubProvider, stubProvider, world } from "./stub-providers";

interface OffersBody {
  offers: Record<string, unknown>[];
  errors: { provider: string; code: string; error: string }[];
  fetched_at: string;
}

const runpodOffers: ProviderOffer[] = [
  providerOffer({
    offer_id: "runpod:SECURE:NVIDIA GeForce RTX 4090:1",
    provider: "runpod",
    cloud: "SECURE",
    price_per_hour: 0.69,
  }),
  providerOffer({
    offer_id: "runpod:SECURE:NVIDIA H100 80GB HBM3:1",
    provider: "runpod",
    gpu: "H100 SXM",
    gpu_key: "h100-sxm",
    vram_gb: 80,
    price_per_hour: 2.69,
  }),
  providerOffer({
    offer_id: "runpod:COMMUNITY:NVIDIA GeForce RTX 4090:2",
    provider: "runpod",
    gpu_count: 2,
    vram_gb: 48,
    price_per_hour: 1.38,
  }),
];
const vastOffers: ProviderOffer[] = [
  providerOffer({
    offer_id: "vast:9001",
    provider: "vast",
    bandwidth_gbs: 980,
    download_mbs: 300,
    download_cost_per_gb: 0.005,
    price_per_hour: 0.35,
  }),
  providerOffer({ offer_id: "vast:9002", provider: "vast", gpu: "RTX 3090", gpu_key: "rtx-3090", price_per_hour: 0.2 }),
  providerOffer({ offer_id: "vast:9003", provider: "vast", gpu: "Tesla P40", gpu_key: null, price_per_hour: 0.1 }),
];
const vramfarmOffers: ProviderOffer[] = [
  providerOffer({
    offer_id: "vramfarm:5101",
    provider: "vramfarm",
    price_per_hour: 0.49,
    currency: "EUR",
    min_billed_minutes: 15,
    templates: ["custom"],
    location: "DE",
  }),
];

function threeProviders() {
  const runpod = stubProvider("runpod", () => runpodOffers);
  const vast = stubProvider("vast", () => vastOffers);
  const vramfarm = stubProvider("vramfarm", () => vramfarmOffers);
  return { runpod, vast, vramfarm, registry: registryOf({ runpod, vast, vramfarm }) };
}

async function offersOf(res: Response): Promise<OffersBody> {
  expect(res.status).toBe(200);
  return (await res.json()) as OffersBody;
}

beforeEach(async () => {
  clearOfferCache();
  await env.OFFERS_CACHE.getByName("global").reset();
});

describe("GET /v1/offers", () => {
  it("ranks the offers of every configured provider, best value first, in the Offer shape of /openapi.json", async () => {
    const { registry } = threeProviders();
    const w = world(registry);
    const body = await offersOf(await w.get("/v1/offers"));
    expect(body.errors).toEqual([]); // the sim is off here and nobody asked for it
    expect(body.fetched_at).toBe("2026-11-29T02:00:00.000Z");
    expect(body.offers).toHaveLength(7);
    const ids = body.offers.map((o) => o.offer_id);
    // 3090 at 0.20 USD has the best bandwidth per dollar; the unknown P40 has no value and comes last
    expect(ids[0]).toBe("vast:9002");
    expect(ids.at(-1)).toBe("vast:9003");
    const values = body.offers.map((o) => o.value).filter((v): v is number => v !== null);
    expect(values).toEqual([...values].sort((a, b) => b - a));

    const runpod4090 = body.offers.find((o) => o.offer_id === "runpod:SECURE:NVIDIA GeForce RTX 4090:1");
    expect(runpod4090).toEqual({
      offer_id: "runpod:SECURE:NVIDIA GeForce RTX 4090:1",
      provider: "runpod",
      gpu: "RTX 4090",
      gpu_count: 1,
      vram_gb: 24,
      memory_gib: 23.99, // 24,564 MiB, as the driver reports an RTX 4090
      price_per_hour: 0.69,
      currency: "USD",
      price_per_hour_usd: 0.69,
      cloud: "SECURE",
      availability: "high",
      location: null,
      bandwidth_gbs: 1008,
      measured_bandwidth_gbs: null, // no metered lease yet
      measured_samples: 0,
      load_time_s: 100, // no vram_gb and no weights_gb: nothing to download
      first_hour_cost: 0.7092,
      first_hour_cost_usd: 0.7092,
      value: 1421,
      min_billed_minutes: 0,
      templates: ["ollama", "custom"],
    });
    const vramfarm = body.offers.find((o) => o.provider === "vramfarm");
    expect(vramfarm).toMatchObject({
      currency: "EUR",
      price_per_hour: 0.49,
      price_per_hour_usd: 0.5292,
      min_billed_minutes: 15,
    });
  });

  it("uses weights_gb, or else vram_gb, for the load estimate", async () => {
    const w = world(threeProviders().registry);
    const withVram = await offersOf(await w.get("/v1/offers?vram_gb=24&provider=runpod&gpu_count=1&gpu=4090"));
    expect(withVram.offers.map((o) => o.load_time_s)).toEqual([260]);
    const withWeights = await offersOf(
      await w.get("/v1/offers?vram_gb=24&weights_gb=12&provider=runpod&gpu_count=1&gpu=4090"),
    );
    expect(withWeights.offers.map((o) => o.load_time_s)).toEqual([180]);
  });

  it("filters by gpu, vram, count, template and max_price (EUR compared in USD), and cuts to limit", async () => {
    const w = world(threeProviders().registry);
    const ids = async (query: string) =>
      (await offersOf(await w.get(`/v1/offers?${query}`))).offers.map((o) => o.offer_id).sort();

    expect(await ids("gpu=h100")).toEqual(["runpod:SECURE:NVIDIA H100 80GB HBM3:1"]);
    expect(await ids("gpu=rtx4090&gpu_count=2")).toEqual(["runpod:COMMUNITY:NVIDIA GeForce RTX 4090:2"]);
    expect(await ids("vram_gb=48")).toEqual([
      "runpod:COMMUNITY:NVIDIA GeForce RTX 4090:2",
      "runpod:SECURE:NVIDIA H100 80GB HBM3:1",
    ]);
    expect(await ids("template=custom&gpu=4090&gpu_count=1")).toEqual([
      "runpod:SECURE:NVIDIA GeForce RTX 4090:1",
      "vast:9001",
      "vramfarm:5101",
    ]);
    expect(await ids("template=ollama&provider=vramfarm")).toEqual([]);
    // 0.49 EUR = 0.5292 USD: above 0.52, within 0.53
    expect(await ids("max_price=0.52&gpu=4090")).toEqual(["vast:9001"]);
    expect(await ids("max_price=0.53&gpu=4090")).toEqual(["vast:9001", "vramfarm:5101"]);
    const limited = await offersOf(await w.get("/v1/offers?limit=2"));
    expect(limited.offers.map((o) => o.offer_id)).toEqual([
      "vast:9002",
      (await offersOf(await w.get("/v1/offers"))).offers[1]!.offer_id,
    ]);
  });

  it("lists a failing provider in errors, scrubbed, and still answers 200 with the others", async () => {
    const { runpod, vramfarm } = threeProviders();
    const vast = stubProvider("vast", () => {
      throw new ProviderError("vast", "http", `HTTP 500: internal error for key ${PROVIDER_SECRETS[1]}`, 500);
    });
    const broken = () => {
      throw new Error(`cannot build adapter with Authorization: Bearer ${PROVIDER_SECRETS[2]}`);
    };
    const w = world(registryOf({ runpod, vast, vramfarm: broken }));
    const res = await w.get("/v1/offers");
    const raw = await res.clone().text();
    const body = await offersOf(res);
    expect(body.errors).toEqual([
      { provider: "vast", code: "provider_error", error: expect.stringContaining("HTTP 500") },
      { provider: "vramfarm", code: "provider_error", error: expect.stringContaining("cannot build adapter") },
    ]);
    for (const secret of PROVIDER_SECRETS) expect(raw).not.toContain(secret);
    expect(body.offers.map((o) => o.provider)).toEqual(["runpod", "runpod", "runpod"]);
    expect(vramfarm.calls).toHaveLength(0);
  });

  it("lists unconfigured real providers as not_configured, and the sim only when asked for", async () => {
    const vast = stubProvider("vast", () => vastOffers);
    const w = world(registryOf({ vast }));
    const all = await offersOf(await w.get("/v1/offers"));
    expect(all.errors.map((e) => [e.provider, e.code])).toEqual([
      ["runpod", "not_configured"],
      ["vramfarm", "not_configured"],
    ]);
    expect(all.errors[0]!.error).toContain("RUNPOD_API_KEY");
    expect(all.offers).toHaveLength(3);

    const named = await offersOf(await w.get("/v1/offers?provider=sim,vast"));
    expect(named.errors).toEqual([
      { provider: "sim", code: "not_configured", error: expect.stringContaining("ENABLE_SIM") },
    ]);

    const vastOnly = await offersOf(await w.get("/v1/offers?provider=VAST"));
    expect(vastOnly.errors).toEqual([]);
  });

  it("asks only the providers named in `provider`", async () => {
    const { runpod, vast, vramfarm, registry } = threeProviders();
    const w = world(registry);
    const body = await offersOf(await w.get("/v1/offers?provider=vramfarm,runpod"));
    expect(new Set(body.offers.map((o) => o.provider))).toEqual(new Set(["runpod", "vramfarm"]));
    expect([runpod.calls.length, vast.calls.length, vramfarm.calls.length]).toEqual([1, 0, 1]);
  });

  it("serves an identical request within 30 s from the cache, and asks again after", async () => {
    const { runpod, vast, vramfarm, registry } = threeProviders();
    const w = world(registry);
    const counts = () => [runpod, vast, vramfarm].map((p: StubProvider) => p.calls.length);

    const first = await offersOf(await w.get("/v1/offers?vram_gb=24"));
    expect(counts()).toEqual([1, 1, 1]);
    w.now += 20_000;
    const second = await offersOf(await w.get("/v1/offers?vram_gb=24&limit=5"));
    expect(counts()).toEqual([1, 1, 1]); // limit is applied after the listing: same listing
    expect(second.fetched_at).toBe(first.fetched_at);
    expect(second.offers).toEqual(first.offers.slice(0, 5));

    await w.get("/v1/offers?vram_gb=48");
    expect(counts()).toEqual([2, 2, 2]); // another filter, another listing

    w.now += 11_000;
    const third = await offersOf(await w.get("/v1/offers?vram_gb=24"));
    expect(counts()).toEqual([3, 3, 3]);
    expect(third.fetched_at).toBe("2026-11-29T02:00:31.000Z");
  });

  it("does not cache a failure", async () => {
    let failing = true;
    const vast = stubProvider("vast", () => {
      if (failing) throw new ProviderError("vast", "rate_limited", "HTTP 429: slow down", 429);
      return vastOffers;
    });
    const w = world(registryOf({ vast }));
    expect((await offersOf(await w.get("/v1/offers?provider=vast"))).errors).toHaveLength(1);
    failing = false;
    const again = await offersOf(await w.get("/v1/offers?provider=vast"));
    expect(again.errors).toEqual([]);
    expect(again.offers).toHaveLength(3);
  });

  it("queries the providers concurrently", async () => {
    // Each listing resolves only once all three have started: called one after another,
    // the first would give up (and be listed in errors) before the second started.
    const started: string[] = [];
    let release!: () => void;
    const allStarted = new Promise<void>((resolve) => (release = resolve));
    const gated = (offers: ProviderOffer[]) => async () => {
      started.push(offers[0]!.provider);
      if (started.length === 3) release();
      const gaveUp = new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error("called one after another")), 2_000),
      );
      await Promise.race([allStarted, gaveUp]);
      return offers;
    };
    const w = world(
      registryOf({
        runpod: stubProvider("runpod", gated(runpodOffers)),
        vast: stubProvider("vast", gated(vastOffers)),
        vramfarm: stubProvider("vramfarm", gated(vramfarmOffers)),
      }),
    );
    const body = await offersOf(await w.get("/v1/offers"));
    expect(body.errors).toEqual([]);
    expect(body.offers).toHaveLength(7);
    expect(started.sort()).toEqual(["runpod", "vast", "vramfarm"]);
  });

  it("reports a provider that does not answer in time as timeout, without waiting for it", async () => {
    const { runpod } = threeProviders();
    const hanging = stubProvider("vast", () => new Promise<ProviderOffer[]>(() => {}));
    const w = world(registryOf({ runpod, vast: hanging }));
    const result = await listRankedOffers(w.services, { provider: ["runpod", "vast"] }, { timeoutMs: 20 });
    expect(result.errors).toEqual([
      { provider: "vast", code: "timeout", error: expect.stringContaining("no offers within") },
    ]);
    expect(result.offers).toHaveLength(3);
  });
});

describe("GET /v1/offer-types", () => {
  it("groups by card: the cheapest offer (in USD) and how many there are", async () => {
    const w = world(threeProviders().registry);
    const res = await w.get("/v1/offer-types");
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      types: { gpu: string; vram_gb: number; cheapest: { offer_id: string; source?: unknown }; available: number }[];
      errors: unknown[];
    };
    const byGpu = Object.fromEntries(body.types.map((t) => [t.gpu, t]));
    expect(Object.keys(byGpu).sort()).toEqual(["H100 SXM", "RTX 3090", "RTX 4090", "Tesla P40"]);
    expect(byGpu["RTX 4090"]).toMatchObject({ vram_gb: 24, available: 4, cheapest: { offer_id: "vast:9001" } });
    expect(byGpu["H100 SXM"]).toMatchObject({ vram_gb: 80, available: 1 });
    expect(byGpu["Tesla P40"]).toMatchObject({ vram_gb: 24, available: 1 });
    expect(byGpu["RTX 4090"]!.cheapest).not.toHaveProperty("source");
    expect(body.types[0]!.gpu).toBe("RTX 3090"); // best-value type first

    const custom = (await (await w.get("/v1/offer-types?template=custom&max_price=0.3")).json()) as typeof body;
    expect(custom.types.map((t) => [t.gpu, t.available])).toEqual([
      ["RTX 3090", 1],
      ["Tesla P40", 1],
    ]);
  });

  it("rejects limit (it has none) and bad filters", async () => {
    const w = world(threeProviders().registry);
    expect((await w.get("/v1/offer-types?limit=5")).status).toBe(400);
    expect((await w.get("/v1/offer-types?provider=aws")).status).toBe(400);
  });
});

describe("findOffer", () => {
  it("finds a listed offer in the cache without asking the provider again", async () => {
    const { vast, registry } = threeProviders();
    const w = world(registry);
    await w.get("/v1/offers?vram_gb=24&gpu=4090");
    expect(vast.calls).toHaveLength(1);
    const found = await findOffer(w.services, "vast:9001", { weights_gb: 30 });
    expect(vast.calls).toHaveLength(1);
    expect(found).toMatchObject({ offer_id: "vast:9001", provider: "vast", load_time_s: 200 });
    expect(found?.source).toEqual(vastOffers[0]);
  });

  it("lists the provider when the cache lacks the offer; null for unknown ids and providers", async () => {
    const { runpod, registry } = threeProviders();
    const w = world(registry);
    expect((await findOffer(w.services, "runpod:COMMUNITY:NVIDIA GeForce RTX 4090:2"))?.gpu_count).toBe(2);
    expect(runpod.calls).toEqual([expect.objectContaining({ vram_gb: undefined, gpu: undefined })]);
    expect(await findOffer(w.services, "runpod:SECURE:NVIDIA B200:1")).toBeNull();
    expect(runpod.calls).toHaveLength(1); // the same cached listing answered
    expect(await findOffer(w.services, "aws:123")).toBeNull();
    expect(await findOffer(w.services, "sim:rtx-4090")).toBeNull(); // sim not configured here
  });

  it("throws when the provider's listing fails (not 'unknown offer')", async () => {
    const vast = stubProvider("vast", () => {
      throw new ProviderError("vast", "http", "HTTP 502: bad gateway", 502);
    });
    const w = world(registryOf({ vast }));
    await expect(findOffer(w.services, "vast:1")).rejects.toThrow(ProviderError);
  });
});
