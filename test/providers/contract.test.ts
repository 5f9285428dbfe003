import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ProviderError } from "../../src/providers/http";
import { createRunpodProvider } from "../../src/providers/runpod";
import { createRunpodRestProvider, POD_PAGES_PER_CALL } from "../../src/providers/runpod-rest";
import { createSimProvider } from "../../src/providers/sim";
import { type LookupHint, type MachineSpec, type Provider, ProviderOfferSchema } from "../../src/providers/types";
import { createVastProvider } from "../../src/providers/vast";
import { createVramfarmProvider } from "../../src/providers/vramfarm";
import { simCloud } from "../../src/sim/cloud";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RUNPOD_FAKE_KEY, RUNPOD_FAKE_URL, RunpodFake } from "../fakes/runpod";
import { tooManyRequests } from "../fakes/runpod-rest";
import { VAST_FAKE_KEY, VAST_FAKE_URL, VastFake } from "../fakes/vast";
import { VRAMFARM_FAKE_TOKEN, VRAMFARM_FAKE_URL, VramfarmFake } from "../fakes/vramfarm";
import { batchSpec } from "../support/provider-fixtures";

/*
 * The Provider port's contract (src/providers/types.ts), run over every adapter against its
 * wire-faithful fake, and over the sim: the same rent → run → list → terminate → gone life, the
 * same failure rules. Each provider's quirks are tested in its own file (docs/providers.md).
 */

const T0 = Date.parse("2031-09-01T00:00:00Z");
const noSleep = async () => {};

interface Subject {
  name: string;
  provider: Provider;
  /** a listing that fails at the provider (HTTP 500) */
  failListing?: () => void;
  /** the machine disappears behind our back */
  remove: (ref: string) => void;
  /** the next create is refused with the provider's own 429 (nothing created) */
  rateLimitCreate?: () => void;
  /**
   * From now on the provider's listing shows only part of what exists: a state it refuses to
   * filter on (VRAMfarm's `provisioning`), more pages than one call reads (RunPod REST)
   */
  partialView?: () => void;
}

const subjects: Record<string, () => Promise<Subject>> = {
  "RunPod REST v2": async () => {
    const fake = new RunpodFake();
    fakes = installFakes(fake);
    const graphql = createRunpodProvider({
      apiKey: RUNPOD_FAKE_KEY,
      url: RUNPOD_FAKE_URL,
      proxyTemplate: PROXY,
      sleep: noSleep,
    });
    return {
      name: "runpod",
      provider: createRunpodRestProvider({
        apiKey: RUNPOD_FAKE_KEY,
        baseUrl: "http://runpod.fake",
        proxyTemplate: PROXY,
        minCudaVersion: "12.4",
        balance: () => graphql.balance(),
        sleep: noSleep,
      }),
      failListing: () => fake.fault("gpuTypes", { kind: "status", status: 500 }, 10),
      remove: (ref) => fake.removePod(ref),
      rateLimitCreate: () => fake.fault("deploy", tooManyRequests(2)),
      partialView: () => {
        fake.quirks.podsPageSize = 1;
        for (let i = 0; i <= POD_PAGES_PER_CALL; i++) fake.plantPod({ name: `someone-else-${i}` });
      },
    };
  },
  "RunPod GraphQL": async () => {
    const fake = new RunpodFake();
    fakes = installFakes(fake);
    return {
      name: "runpod",
      provider: createRunpodProvider({
        apiKey: RUNPOD_FAKE_KEY,
        url: RUNPOD_FAKE_URL,
        proxyTemplate: PROXY,
        minCudaVersion: "12.4",
        sleep: noSleep,
      }),
      failListing: () => fake.fault("gpuTypes", { kind: "status", status: 500 }, 10),
      remove: (ref) => fake.removePod(ref),
      rateLimitCreate: () => fake.fault("deploy", { kind: "status", status: 429, body: "Too Many Requests" }),
    };
  },
  "Vast.ai": async () => {
    const fake = new VastFake();
    fakes = installFakes(fake);
    return {
      name: "vast",
      provider: createVastProvider({ apiKey: VAST_FAKE_KEY, baseUrl: VAST_FAKE_URL, sleep: noSleep }),
      failListing: () => fake.inject("offers", { kind: "http", status: 500 }, 10),
      remove: (ref) => fake.model.remove(ref),
      rateLimitCreate: () => fake.inject("create", { kind: "http", status: 429 }),
    };
  },
  VRAMfarm: async () => {
    const fake = new VramfarmFake();
    fakes = installFakes(fake);
    return {
      name: "vramfarm",
      provider: createVramfarmProvider({
        apiKey: VRAMFARM_FAKE_TOKEN,
        baseUrl: VRAMFARM_FAKE_URL,
        eurUsd: 1.08,
        sleep: noSleep,
      }),
      failListing: () => {
        fake.inject("offers", { kind: "http", status: 500 }, 10);
        fake.inject("offerTypes", { kind: "http", status: 500 }, 10);
      },
      remove: (ref) => fake.model.remove(ref),
      rateLimitCreate: () => fake.inject("create", { kind: "http", status: 429, retryAfter: "2" }),
      partialView: () => {
        fake.quirks.rejectProvisioningFilter = true;
      },
    };
  },
  sim: async () => {
    const cloud = simCloud(env.SIM_CLOUD);
    await cloud.reset();
    await cloud.configure({ bootSeconds: 5, readySeconds: 0, lingerSeconds: 0, creditUsd: 100_000 });
    return {
      name: "sim",
      provider: createSimProvider({ namespace: env.SIM_CLOUD, clock: () => Date.now() }),
      remove: () => {
        throw new Error("the sim has no back door");
      },
    };
  },
};

const PROXY = "http://{id}-{port}.proxy.runpod.fake";
let fakes: InstalledFakes | null = null;

const spec = (label: string): MachineSpec =>
  // No HTTP ports: VRAMfarm publishes none (SSH only); ssh access is what every provider gives.
  batchSpec({ label, image: "ghcr.io/example/batch:1", cmd: "python run.py", env: { MODE: "test" }, weights_gb: 8 });

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(T0);
});
afterEach(() => {
  fakes?.restore();
  fakes = null;
  vi.useRealTimers();
});

const advance = (ms: number) => vi.setSystemTime(Date.now() + ms);

describe.each(Object.keys(subjects))("the Provider contract: %s", (subjectName) => {
  let s: Subject;
  beforeEach(async () => {
    s = await subjects[subjectName]!();
  });

  async function rented(label: string): Promise<{ ref: string; hint: LookupHint }> {
    const offers = await s.provider.listOffers({ template: "custom" });
    const offer = offers.find((o) => o.templates.includes("custom"));
    if (!offer) throw new Error("no offer for the custom template");
    const createdAfter = new Date(Date.now() - 1000).toISOString();
    const result = await s.provider.rent(offer, spec(label));
    if (!result.ok) throw new Error(`rent failed: ${result.error}`);
    return {
      ref: result.ref,
      hint: { createdAfter, offerId: offer.offer_id, image: spec(label).image, knownRefs: [], competing: 0 },
    };
  }

  it("declares who it is, its currency and when billing starts", () => {
    expect(s.provider.name).toBe(s.name);
    expect(["USD", "EUR"]).toContain(s.provider.currency);
    expect(["accepted", "running"]).toContain(s.provider.billingStartsAt);
    expect(s.provider.minimumBilledMinutes).toBeGreaterThanOrEqual(0);
  });

  it("lists well-formed offers of its own, each rentable again by its id", async () => {
    const offers = await s.provider.listOffers({});
    expect(offers.length).toBeGreaterThan(0);
    for (const offer of offers) {
      expect(ProviderOfferSchema.parse(offer)).toEqual(offer);
      expect(offer.provider).toBe(s.name);
      expect(offer.offer_id.startsWith(`${s.name}:`)).toBe(true);
      expect(offer.currency).toBe(s.provider.currency);
    }
  });

  it("rents, runs, is found by label and in its own listing, and is gone after terminate", async () => {
    const { ref, hint } = await rented(`gl-contract-${subjectName.length}`);
    advance(20 * 60_000);
    const running = await s.provider.status(ref);
    expect(running.state).toBe("running");
    expect(running.access).not.toBeNull();

    const found = await s.provider.findByLabel(`gl-contract-${subjectName.length}`, hint);
    expect(found?.ref).toBe(ref);
    const own = (await s.provider.listOwn("gl", [ref])).machines;
    expect(own.map((m) => m.ref)).toContain(ref);

    await s.provider.terminate(ref);
    advance(5 * 60_000);
    expect((await s.provider.status(ref)).state).toBe("gone");
    // Idempotent: terminating what is gone resolves.
    await expect(s.provider.terminate(ref)).resolves.toBeUndefined();
  });

  it("reads a machine that vanished behind its back as gone, on the provider's own word", async () => {
    if (s.name === "sim") return;
    const { ref } = await rented("gl-vanish");
    s.remove(ref);
    expect((await s.provider.status(ref)).state).toBe("gone");
  });

  it("throws a ProviderError when the listing fails, never an empty list", async () => {
    if (!s.failListing) return;
    s.failListing();
    await expect(s.provider.listOffers({})).rejects.toBeInstanceOf(ProviderError);
  });

  it("a create refused with the provider's 429 is never ambiguous: rented after the wait, or refused with nothing made", async () => {
    if (!s.rateLimitCreate) return;
    const offer = (await s.provider.listOffers({ template: "custom" })).find((o) => o.templates.includes("custom"));
    if (!offer) throw new Error("no offer for the custom template");
    s.rateLimitCreate();
    const result = await s.provider.rent(offer, spec("gl-limited"));
    expect(result.ok || result.kind).not.toBe("ambiguous");
    const own = (await s.provider.listOwn("gl", result.ok ? [result.ref] : [])).machines;
    const labelled = own.filter((machine) => machine.label === "gl-limited");
    expect(labelled).toHaveLength(result.ok ? 1 : 0);
  });

  it("a lookup that could not see everything never answers 'no machine', and its listing says it is not whole", async () => {
    if (!s.partialView) return;
    const { ref, hint } = await rented("gl-seen");
    s.partialView();
    // A create sent just now, whose machine is nowhere in what can be seen.
    const later = { ...hint, createdAfter: new Date(Date.now() + 60_000).toISOString(), knownRefs: [ref] };
    await expect(s.provider.findByLabel("gl-missing", later)).rejects.toBeInstanceOf(ProviderError);
    const listing = await s.provider.listOwn("gl", [ref]);
    expect(listing.next !== null || typeof listing.partial === "string").toBe(true);
  });

  it("reads its balance in its own currency", async () => {
    const balance = await s.provider.balance();
    expect(balance.currency).toBe(s.provider.currency);
    expect(Number.isFinite(balance.amount)).toBe(true);
  });
});
