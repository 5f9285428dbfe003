import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ProviderError } from "../../src/providers/http";
import { createSimProvider } from "../../src/providers/sim";
import type { MachineSpec, ProviderOffer } from "../../src/providers/types";
import { SimCloud, simCloud } from "../../src/sim/cloud";
import { ollamaSpec } from "../support/provider-fixtures";

// The SimCloud object runs in this test's isolate, so faking Date here moves its clock too.
const T0 = Date.parse("2030-01-01T00:00:00Z");
let now = T0;
const advance = (seconds: number) => {
  now += seconds * 1000;
  vi.setSystemTime(now);
};

const cloud = () => simCloud(env.SIM_CLOUD);
const sim = createSimProvider({ namespace: env.SIM_CLOUD, clock: () => Date.now() });

const spec = (label: string, template: MachineSpec["template"] = "ollama") =>
  ollamaSpec({ label, template, ports: [] });

async function offer(gpu: string, count = 1): Promise<ProviderOffer> {
  const found = (await sim.listOffers({ gpu, gpu_count: count }))[0];
  if (!found) throw new Error(`no sim offer for ${gpu} x${count}`);
  return found;
}

async function rent(label: string, gpu = "4090", template: MachineSpec["template"] = "ollama"): Promise<string> {
  const result = await sim.rent(await offer(gpu), spec(label, template));
  if (!result.ok) throw new Error(`rent failed: ${result.error}`);
  return result.ref;
}

async function providerError(promise: Promise<unknown>): Promise<ProviderError> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ProviderError);
  return error as ProviderError;
}

beforeEach(async () => {
  now = T0;
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(now);
  await cloud().reset();
  await cloud().configure({ bootSeconds: 20, readySeconds: 10, lingerSeconds: 8 });
});

afterEach(() => {
  vi.useRealTimers();
});

describe("offers", () => {
  it("lists the catalogue in USD with both templates and sim:<slug>:<count> ids", async () => {
    const offers = await sim.listOffers({});
    expect(offers.length).toBeGreaterThan(4);
    for (const o of offers) {
      expect(o.offer_id).toBe(`sim:${o.gpu_key}:${o.gpu_count}`);
      expect(o).toMatchObject({
        provider: "sim",
        currency: "USD",
        templates: ["ollama", "custom"],
        min_billed_minutes: 0,
        bandwidth_gbs: null,
      });
    }
    const h100x2 = offers.find((o) => o.offer_id === "sim:h100-sxm:2");
    expect(h100x2).toMatchObject({ gpu: "H100 SXM", vram_gb: 160, price_per_hour: 5.98 });
  });

  it("honours vram_gb, gpu, gpu_count and max_price_usd", async () => {
    const big = await sim.listOffers({ vram_gb: 80 });
    expect(big.length).toBeGreaterThan(0);
    expect(big.every((o) => o.vram_gb >= 80)).toBe(true);
    expect(big.some((o) => o.gpu_key === "rtx-4090" && o.gpu_count === 4)).toBe(true); // 4 x 24 GB
    expect(big.some((o) => o.gpu_key === "rtx-4090" && o.gpu_count === 1)).toBe(false);

    const rtx = await sim.listOffers({ gpu: "4090" });
    expect(new Set(rtx.map((o) => o.gpu_key))).toEqual(new Set(["rtx-4090"]));
    expect(new Set((await sim.listOffers({ gpu: "h100" })).map((o) => o.gpu))).toEqual(new Set(["H100 SXM"]));

    const pairs = await sim.listOffers({ gpu_count: 2 });
    expect(pairs.length).toBeGreaterThan(0);
    expect(pairs.every((o) => o.gpu_count === 2)).toBe(true);

    const cheap = await sim.listOffers({ max_price_usd: 1 });
    expect(cheap.length).toBeGreaterThan(0);
    expect(cheap.every((o) => o.price_per_hour <= 1)).toBe(true);
    expect(cheap.some((o) => o.gpu_key === "h100-sxm")).toBe(false);
  });

  it("offers only sizes that are in stock", async () => {
    await cloud().plant({ label: null, gpu: "h100-sxm", gpu_count: 8 });
    expect(await sim.listOffers({ gpu: "h100" })).toEqual([]);
    const rent = await sim.rent({ ...(await offer("4090")), offer_id: "sim:h100-sxm:1" }, spec("gpulease-full"));
    expect(rent).toMatchObject({ ok: false, kind: "no_capacity" });
  });

  it("scales every type's stock for load benches", async () => {
    await cloud().plant({ label: null, gpu: "h100-sxm", gpu_count: 8 });
    await cloud().configure({ stockScale: 3 });
    expect((await sim.listOffers({ gpu: "h100" })).map((o) => o.gpu_count)).toEqual([1, 2, 4, 8]);
    await cloud().configure({ stockScale: 1 });
  });
});

describe("machine lifecycle", () => {
  it("boots, runs, gets Ollama ready, bills from creation, lingers after terminate, then is gone", async () => {
    const o = await offer("4090");
    const rented = await sim.rent(o, spec("gpulease-lse_a"));
    expect(rented).toEqual({ ok: true, ref: expect.stringMatching(/^sim-/), price_per_hour: o.price_per_hour });
    const ref = rented.ok ? rented.ref : "";

    expect(await sim.status(ref)).toMatchObject({ state: "booting", access: null, error: null });
    advance(19);
    expect((await sim.status(ref)).state).toBe("booting");

    advance(1);
    const running = await sim.status(ref);
    expect(running).toMatchObject({
      state: "running",
      access: { urls: [`http://localhost:8787/sim/ollama/${ref}`], ssh: null },
      price_per_hour: 0.69,
    });
    expect(await sim.ollamaProbe(ref, running, null)).toEqual({ phase: "down" });
    advance(10);
    expect(await sim.ollamaProbe(ref, running, null)).toEqual({ phase: "ready", digest: "" });

    advance(3600 - 30); // one hour after creation
    expect((await sim.status(ref)).cost).toBeCloseTo(0.69, 4);

    await sim.terminate(ref);
    advance(5);
    const lingering = await sim.status(ref);
    expect(lingering.state).toBe("running"); // terminating still exists: its last state, never "gone"
    expect(lingering.cost).toBeCloseTo(0.69, 4); // billing stopped at terminate
    expect(await sim.ollamaProbe(ref, lingering, null)).toEqual({ phase: "down" });

    advance(3);
    expect(await sim.status(ref)).toMatchObject({ state: "gone", access: null });
    await expect(sim.terminate(ref)).resolves.toBeUndefined(); // already gone = success
  });

  it("lingers exactly linger_seconds after an honoured terminate", async () => {
    const ref = await rent("gpulease-lse_linger");
    advance(25);
    await sim.terminate(ref);
    advance(7);
    expect((await sim.status(ref)).state).toBe("running");
    advance(1);
    expect((await sim.status(ref)).state).toBe("gone");
  });

  it("a machine terminated while booting lingers as booting, even past its boot time", async () => {
    await cloud().configure({ lingerSeconds: 60 });
    const ref = await rent("gpulease-lse_early");
    advance(5);
    await sim.terminate(ref);
    advance(30); // past its boot time, but it was stopped before coming up
    expect(await sim.status(ref)).toMatchObject({ state: "booting", access: null });
    advance(30);
    expect((await sim.status(ref)).state).toBe("gone");
  });

  it("reports an unknown ref as gone and terminates it as a success", async () => {
    expect((await sim.status("sim-nosuchmachine")).state).toBe("gone");
    await expect(sim.terminate("sim-nosuchmachine")).resolves.toBeUndefined();
  });

  it("custom machines expose the spec's ports", async () => {
    const result = await sim.rent(await offer("l40s"), { ...spec("gpulease-custom", "custom"), ports: [8000, 22] });
    const ref = result.ok ? result.ref : "";
    advance(20);
    expect((await sim.status(ref)).access?.urls).toEqual([
      `http://localhost:8787/sim/ports/${ref}/8000`,
      `http://localhost:8787/sim/ports/${ref}/22`,
    ]);
  });

  it("rejects an offer id that is not the sim's", async () => {
    const o = await offer("4090");
    expect(await sim.rent({ ...o, offer_id: "runpod:SECURE:NVIDIA GeForce RTX 4090" }, spec("x"))).toMatchObject({
      ok: false,
      kind: "rejected",
    });
    expect(await sim.rent({ ...o, offer_id: "sim:rtx-4090:3" }, spec("x"))).toMatchObject({
      ok: false,
      kind: "rejected",
    });
  });

  it("the balance starts at the credit and falls with what machines cost", async () => {
    expect(await sim.balance()).toEqual({ amount: 100, currency: "USD" });
    const ref = await rent("gpulease-lse_bill", "h100");
    advance(3600);
    expect((await sim.balance()).amount).toBeCloseTo(100 - 2.99, 2);
    await sim.terminate(ref);
    advance(3600);
    expect((await sim.status(ref)).state).toBe("gone");
    expect((await sim.balance()).amount).toBeCloseTo(100 - 2.99, 2); // spend kept after it is gone
  });
});

describe("labels", () => {
  it("finds a machine by its label and lists own machines by prefix", async () => {
    const ref = await rent("gpulease-lse_label1");
    const other = await rent("gpulease-lse_label2", "l40s");
    await cloud().plant({ label: "someone-else-1" });
    await cloud().plant({ label: null });

    expect(await sim.findByLabel("gpulease-lse_label1")).toMatchObject({
      ref,
      label: "gpulease-lse_label1",
      state: "booting",
      price_per_hour: 0.69,
    });
    expect(await sim.findByLabel("gpulease-lse_nope")).toBeNull();

    const own = (await sim.listOwn("gpulease-", [])).machines;
    expect(own.map((m) => m.ref).sort()).toEqual([ref, other].sort());
    expect(own.every((m) => m.created_at === new Date(T0).toISOString())).toBe(true);
  });

  it("lists a lingering machine, but not a gone one", async () => {
    const ref = await rent("gpulease-lse_listlinger");
    advance(20);
    await sim.terminate(ref);
    expect((await sim.listOwn("gpulease-", [])).machines.map((m) => m.ref)).toEqual([ref]);
    advance(8);
    expect(await sim.listOwn("gpulease-", [])).toEqual({ machines: [], next: null });
  });
});

describe("faults", () => {
  it("ignore_terminates: the first N terminates are answered and ignored", async () => {
    await cloud().configure({ faults: { ignore_terminates: 2 } });
    const ref = await rent("gpulease-lse_stubborn");
    advance(20);
    await sim.terminate(ref);
    await sim.terminate(ref);
    advance(60);
    expect((await sim.status(ref)).state).toBe("running");
    await sim.terminate(ref);
    advance(8);
    expect((await sim.status(ref)).state).toBe("gone");
  });

  it("no_capacity for every type, or for one GPU type; offers stay listed", async () => {
    await cloud().configure({ faults: { no_capacity: ["h100-sxm"] } });
    const h100 = await offer("h100");
    expect(await sim.rent(h100, spec("gpulease-a"))).toEqual({
      ok: false,
      kind: "no_capacity",
      error: expect.stringContaining("no longer any instances available"),
    });
    expect((await sim.rent(await offer("4090"), spec("gpulease-b"))).ok).toBe(true);

    await cloud().configure({ faults: { no_capacity: true } });
    expect(await sim.rent(await offer("4090"), spec("gpulease-c"))).toMatchObject({ ok: false, kind: "no_capacity" });
    expect((await sim.listOffers({})).length).toBeGreaterThan(0);
  });

  it("stuck_booting: the machine never comes up", async () => {
    await cloud().configure({ faults: { stuck_booting: true } });
    const ref = await rent("gpulease-lse_stuck");
    advance(24 * 3600);
    expect((await sim.status(ref)).state).toBe("booting");
    await sim.terminate(ref);
    advance(8);
    expect((await sim.status(ref)).state).toBe("gone");
  });

  it("fail_start: after booting the machine shows exited with the provider's reason", async () => {
    await cloud().configure({ faults: { fail_start: "OCI runtime create failed: exec: python: not found" } });
    const ref = await rent("gpulease-lse_fail", "4090", "custom");
    advance(20);
    expect(await sim.status(ref)).toMatchObject({
      state: "exited",
      access: null,
      error: "OCI runtime create failed: exec: python: not found",
    });
    expect(await sim.ollamaProbe(ref, await sim.status(ref), null)).toEqual({ phase: "down" });
  });

  it("status_error: reads throw a ProviderError", async () => {
    const ref = await rent("gpulease-lse_statuserr");
    await cloud().configure({ faults: { status_error: true } });
    const error = await providerError(sim.status(ref));
    expect(error).toMatchObject({ provider: "sim", kind: "api" });
    await cloud().configure({ faults: { status_error: false } });
    expect((await sim.status(ref)).state).toBe("booting");
  });

  it("listing_error: listOwn and findByLabel throw, never answer 'nothing'", async () => {
    await rent("gpulease-lse_listerr");
    await cloud().configure({ faults: { listing_error: true } });
    expect(await providerError(sim.listOwn("gpulease-", []))).toMatchObject({ provider: "sim", kind: "api" });
    expect((await providerError(sim.findByLabel("gpulease-lse_listerr"))).kind).toBe("api");
  });

  it("exit: machines die on their own after_seconds after they came up, with a reason", async () => {
    const before = await rent("gpulease-lse_alive");
    advance(20);
    // Switching it on also hits the machines alive now (up since T0+20: dies at T0+50).
    await cloud().configure({ faults: { exit: { after_seconds: 30, reason: "spot instance outbid" } } });
    const after = await rent("gpulease-lse_dies"); // up at T0+40, dies at T0+70
    advance(29);
    expect((await sim.status(before)).state).toBe("running");
    advance(1);
    expect(await sim.status(before)).toMatchObject({ state: "exited", access: null, error: "spot instance outbid" });
    advance(19);
    expect((await sim.status(after)).state).toBe("running");
    advance(1);
    expect(await sim.status(after)).toMatchObject({ state: "exited", error: "spot instance outbid" });
    expect((await sim.findByLabel("gpulease-lse_dies"))?.state).toBe("exited"); // an exited machine still exists
    expect((await sim.status(after)).cost).toBeCloseTo(0.69 * (50 / 3600), 3); // billed until it died
  });

  it("error_but_created: create reports failure (ambiguous) while the machine exists under its label", async () => {
    await cloud().configure({ faults: { error_but_created: true } });
    const result = await sim.rent(await offer("4090"), spec("gpulease-lse_ghost"));
    expect(result).toMatchObject({ ok: false, kind: "ambiguous" });
    const found = await sim.findByLabel("gpulease-lse_ghost");
    expect(found).toMatchObject({ label: "gpulease-lse_ghost", state: "booting" });
  });
});

describe("the object's storage", () => {
  it("a fresh instance restores machines, settings and spend from storage", async () => {
    await cloud().configure({ bootSeconds: 5, faults: { ignore_terminates: 1 } });
    const ref = await rent("gpulease-lse_persist");
    advance(5);
    const restored = await runInDurableObject(cloud(), (_instance, state) => new SimCloud(state, env).describe());
    expect(restored.settings).toMatchObject({ bootSeconds: 5, faults: { ignore_terminates: 1 } });
    expect(restored.machines).toEqual([
      expect.objectContaining({ ref, label: "gpulease-lse_persist", shown: "running", ignore_terminates: 1 }),
    ]);
  });
});
