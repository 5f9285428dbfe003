import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ProviderError } from "../../src/providers/http";
import type { MachineSpec, Provider, ProviderOffer } from "../../src/providers/types";
import { createVramfarmProvider } from "../../src/providers/vramfarm";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { VRAMFARM_FAKE_TOKEN, VRAMFARM_FAKE_URL, VramfarmFake } from "../fakes/vramfarm";
import { PROVIDER_SECRETS } from "../helpers";
import { batchSpec } from "../support/provider-fixtures";

const T0 = Date.parse("2026-11-29T02:00:00Z");
const MINUTE = 60_000;

let now: number;
let sleeps: number[];
let fake: VramfarmFake;
let fakes: InstalledFakes;
let farm: Provider;

function provider(options: { timeoutMs?: number; eurUsd?: number } = {}): Provider {
  return createVramfarmProvider({
    apiKey: VRAMFARM_FAKE_TOKEN,
    baseUrl: VRAMFARM_FAKE_URL,
    timeoutMs: options.timeoutMs ?? 2_000,
    eurUsd: options.eurUsd,
    now: () => now,
    sleep: async (ms) => {
      sleeps.push(ms);
      now += ms;
    },
  });
}

beforeEach(() => {
  now = T0;
  sleeps = [];
  fake = new VramfarmFake({ now: () => now, bootMs: 5 * MINUTE });
  fakes = installFakes(fake);
  farm = provider();
});

afterEach(() => {
  fakes.restore();
});

const spec = (overrides: Partial<MachineSpec> = {}) =>
  batchSpec({ image: "ghcr.io/you/batch:2026-11-12", disk_gb: 60, ...overrides });

const offer4090 = async (): Promise<ProviderOffer> => {
  const offers = await farm.listOffers({ gpu: "rtx-4090", gpu_count: 1 });
  if (!offers[0]) throw new Error("no rtx-4090 offer");
  return offers[0];
};

async function rented(overrides: Partial<MachineSpec> = {}): Promise<string> {
  const result = await farm.rent(await offer4090(), spec(overrides));
  if (!result.ok) throw new Error(`rent failed: ${result.error}`);
  return result.ref;
}

const creates = () => fake.requests.filter((r) => r.method === "POST" && r.path === "/instances");

async function providerError(promise: Promise<unknown>): Promise<ProviderError> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ProviderError);
  return error as ProviderError;
}

describe("vramfarm offers", () => {
  it("lists one offer per card and count, at the cheapest price a rent would get, in EUR", async () => {
    const offers = await farm.listOffers({});
    expect(fake.requests[0]?.url).toBe(`${VRAMFARM_FAKE_URL}/offers`);
    expect(offers.map((o) => o.offer_id).sort()).toEqual([
      "vramfarm:h100-sxm:1",
      "vramfarm:rtx-4090:1",
      "vramfarm:rtx-4090:2",
    ]);
    expect(offers.find((o) => o.offer_id === "vramfarm:rtx-4090:1")).toEqual({
      offer_id: "vramfarm:rtx-4090:1",
      provider: "vramfarm",
      gpu: "RTX 4090",
      gpu_key: "rtx-4090",
      gpu_count: 1,
      vram_gb: 24,
      price_per_hour: 0.45,
      currency: "EUR",
      cloud: null,
      availability: "available",
      location: "FI",
      bandwidth_gbs: null,
      download_mbs: null,
      download_cost_per_gb: 0.002,
      min_billed_minutes: 15,
      templates: ["custom"],
    });
    expect(offers.find((o) => o.offer_id === "vramfarm:rtx-4090:2")).toMatchObject({
      vram_gb: 48,
      gpu_count: 2,
      price_per_hour: 0.96,
    });
  });

  it("passes a slug and a count to the API and filters a name fragment itself", async () => {
    await farm.listOffers({ gpu: "rtx-4090", gpu_count: 2 });
    expect(new URL(fake.requests[0]!.url).search).toBe("?gpu=rtx-4090&count=2");
    const offers = await farm.listOffers({ gpu: "H100" });
    expect(new URL(fake.requests[1]!.url).search).toBe("");
    expect(offers.map((o) => o.offer_id)).toEqual(["vramfarm:h100-sxm:1"]);
  });

  it("compares its EUR prices with a USD cap through eurUsd", async () => {
    expect(
      (await farm.listOffers({ gpu: "rtx-4090", gpu_count: 1, max_price_usd: 0.49 })).map((o) => o.price_per_hour),
    ).toEqual([0.45]);
    const dearer = provider({ eurUsd: 1.1 });
    expect(await dearer.listOffers({ gpu: "rtx-4090", gpu_count: 1, max_price_usd: 0.49 })).toEqual([]);
  });

  it("offers nothing for the Ollama template and asks nothing", async () => {
    expect(await farm.listOffers({ template: "ollama" })).toEqual([]);
    expect(fake.requests).toHaveLength(0);
  });

  it("throws on an unreadable listing", async () => {
    fake.inject("offers", { kind: "malformed" });
    expect((await providerError(farm.listOffers({}))).kind).toBe("parse");
  });
});

describe("vramfarm rent and billing", () => {
  it("rents by card and count, is free while provisioning and bills from running with 15 minutes minimum", async () => {
    const ref = await rented();
    expect(creates()[0]?.body).toEqual({
      gpu: "rtx-4090",
      count: 1,
      template: "custom",
      image: "ghcr.io/you/batch:2026-11-12",
      cmd: "python /app/run.py",
      disk: 60,
    });
    expect(await farm.status(ref)).toEqual({
      state: "booting",
      access: null,
      cost: 0,
      traffic_cost: 0,
      price_per_hour: 0.45,
      error: null,
    });
    now += 5 * MINUTE + 2 * MINUTE;
    const early = await farm.status(ref);
    expect(early).toMatchObject({
      state: "running",
      access: { urls: [], ssh: { host: "203.0.113.7", port: expect.any(Number) } },
    });
    expect(early.cost).toBeCloseTo(15 * (0.45 / 60), 6);
    now += 18 * MINUTE;
    fake.setTraffic(ref, 0.04);
    const later = await farm.status(ref);
    expect(later.cost).toBeCloseTo(20 * (0.45 / 60), 6);
    expect(later.traffic_cost).toBe(0.04);
  });

  it("exports the spec's environment in front of the command, quoted for the shell", async () => {
    await rented({ env: { GPULEASE_CALLBACK_URL: "https://x.test/v1/leases/l/done", NOTE: "it's fine" } });
    expect((creates()[0]!.body as { cmd: string }).cmd).toBe(
      "export GPULEASE_CALLBACK_URL='https://x.test/v1/leases/l/done'\nexport NOTE='it'\\''s fine'\npython /app/run.py",
    );
  });

  it("writes the environment to a profile script when there is no command", async () => {
    await rented({ cmd: null, env: { A: "1" } });
    expect((creates()[0]!.body as { cmd: string }).cmd).toBe(
      "cat > /etc/profile.d/gpulease-env.sh <<'GPULEASE_ENV'\nexport A='1'\nGPULEASE_ENV",
    );
    await rented({ cmd: null, env: {} });
    expect(creates()[1]?.body).not.toHaveProperty("cmd");
  });

  it("refuses what VRAMfarm cannot run without asking it", async () => {
    const offer = await offer4090();
    expect(
      await farm.rent(offer, spec({ template: "ollama", image: "ollama/ollama:latest", cmd: null })),
    ).toMatchObject({ ok: false, kind: "rejected" });
    expect(await farm.rent(offer, spec({ ports: [8000] }))).toMatchObject({ ok: false, kind: "rejected" });
    expect(await farm.rent(offer, spec({ cmd: "x".repeat(4001) }))).toMatchObject({ ok: false, kind: "rejected" });
    expect(creates()).toHaveLength(0);
  });

  it("reads 409 no_capacity as no capacity", async () => {
    const offer = await offer4090();
    fake.listings = fake.listings.map((l) => ({ ...l, free: 0 }));
    expect(await farm.rent(offer, spec())).toEqual({
      ok: false,
      kind: "no_capacity",
      error: "no_capacity: no rtx-4090 machine is free right now",
    });
  });

  it("takes any 409 as no capacity whatever its code (docs/providers.md#vramfarm), and 402 as a refusal", async () => {
    const offer = await offer4090();
    fake.quirks.maxServers = 0;
    expect(await farm.rent(offer, spec())).toEqual({
      ok: false,
      kind: "no_capacity",
      error: "server_limit: at most 0 servers at once",
    });
    fake.quirks.maxServers = 4;
    fake.balanceEur = 0;
    expect(await farm.rent(offer, spec())).toEqual({
      ok: false,
      kind: "rejected",
      error: "insufficient_balance: balance too low",
    });
  });

  it("matches a create whose answer was lost to the one new server of that card and image", async () => {
    fake.plant();
    const offer = await offer4090();
    farm = provider({ timeoutMs: 100 });
    fake.inject("create", { kind: "hang" }, 1, true);
    const result = await farm.rent(offer, spec());
    expect(result).toMatchObject({ ok: true });
    const made = [...fake.model.machines.values()].find(
      (m) => (m.meta as { image?: string }).image === "ghcr.io/you/batch:2026-11-12",
    );
    expect(result.ok && result.ref).toBe(made?.id);
  });

  it("stays ambiguous when the lost create cannot be matched", async () => {
    const offer = await offer4090();
    fake.inject("create", { kind: "http", status: 502 }, 5);
    expect(await farm.rent(offer, spec())).toMatchObject({ ok: false, kind: "ambiguous" });
    expect(creates()).toHaveLength(1);
    // no snapshot before the create: nothing to compare with
    fake.inject("list", { kind: "http", status: 500 });
    fake.inject("create", { kind: "http", status: 500 }, 1, true);
    expect(await farm.rent(offer, spec())).toMatchObject({ ok: false, kind: "ambiguous" });
  });

  it("rejects a rate-limited create, which started nothing", async () => {
    const offer = await offer4090();
    fake.inject("create", { kind: "http", status: 429 });
    expect(await farm.rent(offer, spec())).toMatchObject({ ok: false, kind: "rejected" });
    expect(creates()).toHaveLength(1);
    expect(fake.model.machines.size).toBe(0);
  });
});

describe("vramfarm status and stop", () => {
  it("reads a status that does not echo `id` (the article promises only status, access, cost_eur, traffic_eur, error)", async () => {
    const ref = await rented();
    fake.quirks.statusOmitsId = true;
    now += 10 * MINUTE;
    const status = await farm.status(ref);
    expect(status.state).toBe("running");
    expect(status.access?.ssh).not.toBeNull();
  });

  it("reads a stop we asked for as gone, and a second stop as already done", async () => {
    const ref = await rented();
    now += 10 * MINUTE;
    await farm.terminate(ref);
    const stopped = await farm.status(ref);
    expect(stopped).toMatchObject({ state: "gone", error: null, access: null });
    expect(stopped.cost).toBeCloseTo(15 * (0.45 / 60), 6);
    await farm.terminate(ref);
    const stops = fake.requests.filter((r) => r.path === "/instances/stop");
    expect(stops.map((r) => r.body)).toEqual([{ id: Number(ref) }, { id: Number(ref) }]);
  });

  it("charges nothing for a server stopped while provisioning", async () => {
    const ref = await rented();
    await farm.terminate(ref);
    now += 10 * MINUTE;
    expect((await farm.status(ref)).cost).toBe(0);
  });

  it("reads a stop nobody asked for as gone with VRAMfarm's reason", async () => {
    const ref = await rented();
    now += 6 * MINUTE;
    fake.model.exit(ref, "balance reached zero; disk deleted");
    expect(await farm.status(ref)).toMatchObject({ state: "gone", error: "balance reached zero; disk deleted" });
  });

  it("reads an unknown id (404 not_found) as gone and stops it as a no-op", async () => {
    expect((await farm.status("999999")).state).toBe("gone");
    await farm.terminate("999999");
  });

  it("throws on a failed read instead of guessing", async () => {
    const ref = await rented();
    farm = provider({ timeoutMs: 100 });
    for (const fault of [
      { kind: "http", status: 500 },
      { kind: "malformed" },
      { kind: "empty" },
      { kind: "error200" },
      { kind: "hang" },
    ] as const) {
      fake.inject("show", fault, 10);
      await providerError(farm.status(ref));
      fake.faults.show = [];
    }
  });

  it("reports a flapping read as it comes and recovers on the next read", async () => {
    const ref = await rented();
    now += 6 * MINUTE;
    fake.inject("show", { kind: "flap", as: "provisioning" });
    expect((await farm.status(ref)).state).toBe("booting");
    expect((await farm.status(ref)).state).toBe("running");
  });

  it("honours Retry-After on 429, 502 and 503", async () => {
    const ref = await rented();
    fake.quirks.retryAfterSeconds = 4;
    fake.inject("show", { kind: "http", status: 429 });
    fake.inject("show", { kind: "http", status: 502 });
    expect((await farm.status(ref)).state).toBe("booting");
    fake.inject("stop", { kind: "http", status: 503, retryAfter: "1" });
    await farm.terminate(ref);
    expect(sleeps).toEqual([4_000, 4_000, 1_000]);
  });

  it("gives up when Retry-After asks for longer than it waits", async () => {
    fake.inject("account", { kind: "http", status: 429, retryAfter: "120" });
    expect((await providerError(farm.balance())).kind).toBe("rate_limited");
    expect(sleeps).toEqual([]);
  });

  it("resolves a stop that is accepted but ignored: only a status read proves it", async () => {
    const ref = await rented();
    fake.inject("stop", { kind: "ignore" });
    await farm.terminate(ref);
    expect((await farm.status(ref)).state).toBe("booting");
  });

  it("throws when a stop answer makes no sense, so the caller re-sends it", async () => {
    const ref = await rented();
    fake.inject("stop", { kind: "error200" });
    await providerError(farm.terminate(ref));
  });
});

describe("vramfarm own machines and account", () => {
  it("lists only the servers gpulease recorded, running or provisioning, never an unknown id", async () => {
    const running = await rented();
    now += 6 * MINUTE;
    const booting = await rented();
    const stranger = fake.plant();
    const stopped = await rented();
    await farm.terminate(stopped);
    const own = (await farm.listOwn("gpulease-", [running, booting, stopped, "424242"])).machines;
    expect(own).toHaveLength(2);
    expect(own.map((m) => [m.ref, m.state, m.label])).toEqual(
      expect.arrayContaining([
        [booting, "booting", null],
        [running, "running", null],
      ]),
    );
    expect(own.map((m) => m.ref)).not.toContain(stranger.id);
    const listed = fake.requests
      .filter((r) => r.method === "GET" && r.path === "/instances")
      .map((r) => new URL(r.url).searchParams.get("status"));
    expect(listed).toEqual(expect.arrayContaining(["running", "provisioning"]));
  });

  it("still lists running servers when the provisioning filter is refused", async () => {
    const running = await rented();
    now += 6 * MINUTE;
    fake.quirks.rejectProvisioningFilter = true;
    expect((await farm.listOwn("", [running])).machines.map((m) => m.ref)).toEqual([running]);
  });

  it("asks nothing when no id is known, and throws when the listing fails", async () => {
    expect(await farm.listOwn("gpulease-", [])).toEqual({ machines: [], next: null });
    expect(fake.requests).toHaveLength(0);
    fake.inject("list", { kind: "malformed" });
    await providerError(farm.listOwn("gpulease-", ["4101"]));
  });

  it("has no labels: findByLabel refuses without a fingerprint, and with one finds only an unknown matching server", async () => {
    const before = new Date(now - 1000).toISOString();
    const ref = await rented();
    await providerError(farm.findByLabel("gpulease-lse01"));
    const hint = {
      createdAfter: before,
      offerId: "vramfarm:rtx-4090:1",
      image: "ghcr.io/you/batch:2026-11-12",
      knownRefs: [] as string[],
      competing: 0,
    };
    expect(await farm.findByLabel("gpulease-lse01", hint)).toMatchObject({ ref, label: null });
    // Another lease's create with the same card and image is unresolved too: the one match may be theirs.
    expect((await providerError(farm.findByLabel("gpulease-lse01", { ...hint, competing: 1 }))).message).toMatch(
      /other lease\(s\) sent the same create/,
    );
    // Known to the ledger (another lease's), another card, another image, or older than the lease: not ours.
    expect(await farm.findByLabel("gpulease-lse01", { ...hint, knownRefs: [ref] })).toBeNull();
    expect(await farm.findByLabel("gpulease-lse01", { ...hint, offerId: "vramfarm:a100-pcie-80gb:1" })).toBeNull();
    expect(await farm.findByLabel("gpulease-lse01", { ...hint, image: "other:1" })).toBeNull();
    expect(
      await farm.findByLabel("gpulease-lse01", { ...hint, createdAfter: new Date(now + 10 * MINUTE).toISOString() }),
    ).toBeNull();
    // Two candidates: cannot tell which one is ours.
    await rented();
    await providerError(farm.findByLabel("gpulease-lse01", hint));
    now += 6 * MINUTE;
    expect(await farm.ollamaProbe(ref, await farm.status(ref), null)).toEqual({ phase: "down" });
  });

  it("reads the balance in EUR", async () => {
    expect(await farm.balance()).toEqual({ amount: 12.5, currency: "EUR" });
  });

  it("sends the token only as a Bearer header and scrubs it from errors", async () => {
    const ref = await rented();
    await farm.status(ref);
    await farm.terminate(ref);
    await farm.balance();
    for (const request of fake.requests) {
      expect(request.authorization).toBe(`Bearer ${VRAMFARM_FAKE_TOKEN}`);
      expect(request.userAgent).toMatch(/^gpulease\//);
      for (const secret of PROVIDER_SECRETS) expect(decodeURIComponent(request.url)).not.toContain(secret);
    }
    const wrong = createVramfarmProvider({ apiKey: "gf_live_wrongtoken000000", baseUrl: VRAMFARM_FAKE_URL });
    const error = await providerError(wrong.balance());
    expect(error.kind).toBe("auth");
    expect(error.message).not.toContain("gf_live_wrongtoken000000");
  });
});
