import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { clearOfferCache } from "../../src/offers/cache";
import { type FakeService, type InstalledFakes, installFakes, json } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { api, PROVIDER_SECRETS } from "../helpers";

/** VRAMfarm's GET /api/offers as docs/providers.md (VRAMfarm) describes it; `down` answers 500 instead. */
class VramfarmOffersFake implements FakeService {
  down = false;
  offerCalls = 0;
  handles(url: URL): boolean {
    return url.host === "vramfarm.fake";
  }
  async handle(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (request.method !== "GET" || url.pathname !== "/api/offers")
      return json({ error: "not in this fake", code: "not_found" }, 404);
    this.offerCalls++;
    if (this.down) return json({ error: `internal error (token ${PROVIDER_SECRETS[2]})`, code: "internal" }, 500);
    return json({
      offers: [
        {
          id: 5101,
          gpu: "rtx-4090",
          gpu_name: "RTX 4090",
          count: 1,
          vram_gb: 24,
          vram_total_gb: 24,
          price: 0.49,
          currency: "EUR",
          country: "DE",
          reliable: true,
          traffic: { included_gb: 1000, eur_per_gb: 0.002 },
        },
        {
          id: 5102,
          gpu: "h100-sxm",
          gpu_name: "H100 SXM",
          count: 1,
          vram_gb: 80,
          vram_total_gb: 80,
          price: 2.1,
          currency: "EUR",
          country: "DE",
          reliable: true,
          traffic: null,
        },
      ],
    });
  }
}

/** Holds each provider host's first request until all `hosts` have sent one. */
class Gate implements FakeService {
  private readonly seen = new Set<string>();
  private release!: () => void;
  private readonly open = new Promise<void>((resolve) => (this.release = resolve));
  constructor(
    private readonly hosts: string[],
    private readonly inner: FakeService[],
  ) {}
  handles(url: URL): boolean {
    return this.inner.some((s) => s.handles(url));
  }
  async handle(request: Request): Promise<Response> {
    const host = new URL(request.url).host;
    if (!this.seen.has(host)) {
      this.seen.add(host);
      if (this.hosts.every((h) => this.seen.has(h))) this.release();
      // One provider after another would never open the gate: give up visibly instead.
      const gaveUp = new Promise<"late">((resolve) => setTimeout(() => resolve("late"), 2_000));
      if ((await Promise.race([this.open, gaveUp])) === "late") return json({ error: "called one after another" }, 500);
    }
    return this.inner.find((s) => s.handles(new URL(request.url)))!.handle(request);
  }
}

interface OffersBody {
  offers: { offer_id: string; provider: string; value: number | null; price_per_hour_usd: number }[];
  errors: { provider: string; code: string; error: string }[];
}

let fakes: InstalledFakes | null = null;
beforeEach(async () => {
  clearOfferCache();
  await env.OFFERS_CACHE.getByName("global").reset();
});
afterEach(() => {
  fakes?.restore();
  fakes = null;
});

describe("GET /v1/offers through the real adapters", () => {
  it("ranks offers from RunPod, Vast.ai, VRAMfarm and the sim together", async () => {
    const runpod = new RunpodFake();
    const vast = new VastFake();
    const vramfarm = new VramfarmOffersFake();
    fakes = installFakes(runpod, vast, vramfarm);

    const res = await api("/v1/offers?limit=200");
    expect(res.status).toBe(200);
    const body = (await res.json()) as OffersBody;
    expect(body.errors).toEqual([]);
    expect(new Set(body.offers.map((o) => o.provider))).toEqual(new Set(["runpod", "vast", "vramfarm", "sim"]));
    const values = body.offers.map((o) => o.value);
    const firstNull = values.indexOf(null);
    const ranked = (firstNull === -1 ? values : values.slice(0, firstNull)) as number[];
    expect(ranked).toEqual([...ranked].sort((a, b) => b - a));
    if (firstNull !== -1) expect(values.slice(firstNull).every((v) => v === null)).toBe(true);
    expect(body.offers.find((o) => o.provider === "vramfarm")?.price_per_hour_usd).toBeCloseTo(0.49 * 1.08, 4);
  });

  it("lists a provider that answers 500 under errors, scrubbed, and still answers 200", async () => {
    const vramfarm = new VramfarmOffersFake();
    vramfarm.down = true;
    fakes = installFakes(new RunpodFake(), new VastFake(), vramfarm);

    const res = await api("/v1/offers?vram_gb=20");
    expect(res.status).toBe(200);
    const raw = await res.clone().text();
    const body = (await res.json()) as OffersBody;
    expect(body.errors).toEqual([
      { provider: "vramfarm", code: "provider_error", error: expect.stringContaining("500") },
    ]);
    expect(body.offers.some((o) => o.provider === "runpod")).toBe(true);
    expect(body.offers.some((o) => o.provider === "vast")).toBe(true);
    for (const secret of PROVIDER_SECRETS) expect(raw).not.toContain(secret);
  });

  it("answers a repeat within 30 s from the cache: no new provider call", async () => {
    const vramfarm = new VramfarmOffersFake();
    fakes = installFakes(new RunpodFake(), new VastFake(), vramfarm);

    const first = (await (await api("/v1/offers?vram_gb=22")).json()) as OffersBody;
    const calls = fakes.requests.length;
    expect(calls).toBeGreaterThanOrEqual(3);
    expect(vramfarm.offerCalls).toBe(1);
    const second = (await (await api("/v1/offers?vram_gb=22")).json()) as OffersBody;
    expect(fakes.requests.length).toBe(calls);
    expect(second.offers).toEqual(first.offers);
  });

  it("calls the providers concurrently", async () => {
    const inner = [new RunpodFake(), new VastFake(), new VramfarmOffersFake()];
    fakes = installFakes(new Gate(["runpod.fake", "vast.fake", "vramfarm.fake"], inner));
    const body = (await (await api("/v1/offers?vram_gb=23")).json()) as OffersBody;
    expect(body.errors).toEqual([]);
    expect(new Set(body.offers.map((o) => o.provider))).toEqual(new Set(["runpod", "vast", "vramfarm", "sim"]));
  });
});
