import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { clearOfferCache } from "../../src/offers/cache";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { api } from "../helpers";

// One offers cache shared by every instance of the worker (OFFERS_CACHE_S), and Vast.ai's
// offer search held to 10 a minute for the whole worker (docs/providers.md#vast-offers).
// clearOfferCache() forgets this isolate's own copy: what follows is what another instance sees.

let runpod: RunpodFake;
let vast: VastFake;
let fakes: InstalledFakes;

beforeEach(async () => {
  clearOfferCache();
  await env.OFFERS_CACHE.getByName("global").reset();
  runpod = new RunpodFake();
  vast = new VastFake();
  fakes = installFakes(runpod, vast);
});
afterEach(() => fakes.restore());

const vastSearches = () => vast.requests.filter((r) => r.path === "/api/v0/bundles/").length;

async function offers(query: string): Promise<{ offers: unknown[]; errors: { provider: string; error: string }[] }> {
  const res = await api(`/v1/offers?provider=vast,runpod&${query}`);
  expect(res.status).toBe(200);
  return res.json();
}

describe("shared offers cache", () => {
  it("a warm listing is served to another instance without a provider call", async () => {
    await offers("vram_gb=20");
    const runpodCalls = runpod.calls("gpuTypes").length;
    expect(vastSearches()).toBe(1);
    clearOfferCache(); // another isolate: nothing of its own cached
    const warm = await offers("vram_gb=20");
    expect(warm.offers.length).toBeGreaterThan(0);
    expect(vastSearches()).toBe(1);
    expect(runpod.calls("gpuTypes")).toHaveLength(runpodCalls);
  });

  it("twenty clients asking the same cold query at once make one refresh per provider", async () => {
    const all = await Promise.all(
      Array.from({ length: 20 }, async () => {
        clearOfferCache();
        return offers("vram_gb=40");
      }),
    );
    expect(all.every((body) => body.errors.length === 0)).toBe(true);
    expect(vastSearches()).toBe(1);
    expect(runpod.calls("gpuTypes")).toHaveLength(2); // one catalogue read per cloud
  });

  it("never searches Vast.ai more than 10 times a minute, however many distinct queries come", async () => {
    const answers = [];
    for (let i = 0; i < 14; i++) answers.push(await offers(`vram_gb=${10 + i}`));
    expect(vastSearches()).toBe(10);
    const held = answers.slice(10).flatMap((a) => a.errors.filter((e) => e.provider === "vast"));
    expect(held).toHaveLength(4);
    expect(held[0]?.error).toMatch(/10 searches a minute/);
    // The budget is the Vast adapter's own: RunPod, which states none, was asked every time.
    expect(answers.flatMap((a) => a.errors.filter((e) => e.provider === "runpod"))).toEqual([]);
    expect(runpod.calls("gpuTypes").length).toBeGreaterThanOrEqual(14);
  });
});
