import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { loadConfig, overlayVars } from "../../src/config";
import worker from "../../src/index";
import { leaseModelFacts } from "../../src/leases/model-sizing";
import type { Lease } from "../../src/leases/schema";
import { parseModelRef } from "../../src/models/reference";
import { runnerFit } from "../../src/models/runner";
import { createServices } from "../../src/services";
import { simCloud } from "../../src/sim/cloud";
import { libraryModel, profileFacts } from "../../src/sim/ollama/library";
import { SIM_LIBRARY_MODELS, simModelLibrary } from "../../src/sim/ollama/library-registry";
import { type FakeService, type InstalledFakes, installFakes } from "../fakes/install";
import { OllamaRegistryFake } from "../fakes/ollama-registry";
import { RunpodFake } from "../fakes/runpod";
import { api, apiRequest } from "../helpers";
import { TestClock } from "../support/clock";
import { driveTo } from "../support/keeper";
import { rent } from "../support/lease";

// SIM_MODELS=library (the default with ENABLE_SIM, as under `npm start`): the sim's model library
// is the registry for sim offers and the sim's machines, answered in process. Nothing here may
// reach a network: every outbound request is recorded by a tripwire and fails the test.
const clock = new TestClock(Date.parse("2035-07-01T00:00:00Z"));
const cloud = () => simCloud(env.SIM_CLOUD);

let outbound: string[];
let fakes: InstalledFakes | null = null;

/** Answers every outbound request as a dropped connection would, and remembers it. */
const offline: FakeService = {
  handles: () => true,
  handle: async (request) => {
    outbound.push(`${request.method} ${request.url}`);
    throw new TypeError("Network connection lost.");
  },
};

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  outbound = [];
  overlayVars({ SIM_MODELS: "library" });
  await cloud().reset();
  await cloud().configure({ bootSeconds: 20, readySeconds: 5, lingerSeconds: 0, creditUsd: 100_000, downloadMbs: 500 });
});

afterEach(async () => {
  const leases = ((await (await api("/v1/leases?limit=200")).json()) as { leases: Lease[] }).leases;
  for (const lease of leases) {
    if (lease.status === "stopped") continue;
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await driveTo(lease.id, "stopped", { clock, maxAlarms: 400 });
  }
  overlayVars({});
  fakes?.restore();
  fakes = null;
});

interface Listed {
  offers: { provider: string; gpu_count: number; fits?: { vram_need_gb: number; headroom_gb: number } }[];
  errors: { provider: string; code: string; error: string }[];
}

async function listed(query: string): Promise<Listed> {
  const res = await api(`/v1/offers?${query}`);
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return JSON.parse(text) as Listed;
}

describe("the sim's library as a registry (SIM_MODELS=library)", () => {
  it("sizes every library model from the manifest and GGUF header it writes, as its machines load them", async () => {
    fakes = installFakes(offline);
    for (const name of SIM_LIBRARY_MODELS) {
      const parsed = parseModelRef(name);
      if (!parsed.ok) throw new Error(parsed.reason);
      const facts = await simModelLibrary.facts(parsed.ref);
      expect(facts.name).toBe(name);
      expect(facts.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
      // The machine's physics (src/sim/ollama/machine.ts) reads the profile: the header agrees with it.
      const stored = { digest: facts.digest.slice(7), model: { digest: "x", size: facts.weights_bytes }, small: [] };
      const machine = profileFacts(libraryModel(name, stored));
      expect(facts.arch).toMatchObject({ ...machine.arch, params_num_ctx: null });
      for (const context of [4096, 32_768]) {
        const cards = { count: 1, memoryMib: 24_564, flashAttention: true };
        expect(runnerFit(facts, context, cards)).toEqual(runnerFit(machine, context, cards));
      }
    }
    await expect(simModelLibrary.facts(parseRef("nosuchmodel:1b"))).rejects.toThrow(/not found/);
    await expect(simModelLibrary.facts(parseRef("hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M"))).rejects.toThrow(
      /not in the simulated cloud's model library/,
    );
    expect(outbound).toEqual([]);
  });

  it("GET /v1/offers?model=llama3.2:1b&provider=sim lists sized offers without the internet", async () => {
    fakes = installFakes(offline);
    const body = await listed("model=llama3.2:1b&provider=sim");
    expect(body.offers.length).toBeGreaterThan(0);
    expect(new Set(body.offers.map((o) => o.provider))).toEqual(new Set(["sim"]));
    // 1,321,082,688 bytes of weights + KV + compute at 4096 + 1 GiB margin + 457 MiB (docs/models.md)
    const single = body.offers.filter((o) => o.gpu_count === 1);
    expect(single.length).toBeGreaterThan(0);
    for (const offer of single) expect(offer.fits?.vram_need_gb).toBe(3.06);
    expect(body.errors).toEqual([]);

    // Only the library's own names: another model, namespace or registry is not in it (400), and
    // nothing is fetched for any of them.
    for (const model of [
      "nosuchmodel:1b",
      "someone/llama3.2:1b",
      "hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M",
    ]) {
      const res = await api(`/v1/offers?model=${encodeURIComponent(model)}&provider=sim`);
      expect(res.status, model).toBe(400);
      expect(((await res.json()) as { code: string }).code).toBe("invalid_request");
    }
    expect(outbound).toEqual([]);
  });

  it("a listing that mixes the sim and the clouds sizes sim offers from the library when the registry is unreachable", async () => {
    fakes = installFakes(offline);
    const body = await listed("model=llama3.2:1b");
    expect(body.offers.length).toBeGreaterThan(0);
    expect(new Set(body.offers.map((o) => o.provider))).toEqual(new Set(["sim"]));
    expect(body.offers.every((o) => o.fits !== undefined)).toBe(true);
    // The clouds' offers need the registry: each is listed with why, none was asked for a listing.
    for (const provider of ["runpod", "vast", "vramfarm"]) {
      const failure = body.errors.find((e) => e.provider === provider);
      expect(failure, provider).toMatchObject({ code: "provider_error" });
      expect(failure?.error).toMatch(/model registry \(registry\.ollama\.ai\) could not be reached/);
    }
    expect(outbound.length).toBeGreaterThan(0);
    expect(outbound.every((line) => line.startsWith("GET https://registry.ollama.ai/v2/"))).toBe(true);

    // A rental naming no provider goes the same way: the sim's offers, sized from the library.
    const res = await rent({ model: "llama3.2:1b", max_minutes: 5 });
    const text = await res.text();
    expect(res.status, text).toBe(202);
    expect(JSON.parse(text)).toMatchObject({ provider: "sim", model: { name: "llama3.2:1b", weights_gb: 1.32 } });
    expect(outbound.every((line) => line.startsWith("GET https://registry.ollama.ai/v2/"))).toBe(true);
  });

  it("sizes each provider's offers from its own source: the library's model lists at the sim only, the registry's at the clouds only", async () => {
    const registry = new OllamaRegistryFake();
    fakes = installFakes(registry, new RunpodFake());
    // qwen2.5:7b: in the sim's library, not in the registry fake.
    const libraryOnly = await listed("model=qwen2.5:7b&provider=sim,runpod");
    expect(libraryOnly.offers.length).toBeGreaterThan(0);
    expect(new Set(libraryOnly.offers.map((o) => o.provider))).toEqual(new Set(["sim"]));
    expect(libraryOnly.errors).toContainEqual({
      provider: "runpod",
      code: "provider_error",
      error: 'model "qwen2.5:7b" not found in the registry',
    });
    // A Hugging Face model: in the registry fake, not in the library.
    const hf = "hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M";
    const registryOnly = await listed(`model=${encodeURIComponent(hf)}&provider=sim,runpod`);
    expect(registryOnly.offers.length).toBeGreaterThan(0);
    expect(new Set(registryOnly.offers.map((o) => o.provider))).toEqual(new Set(["runpod"]));
    expect(registryOnly.errors.map((e) => e.provider)).toEqual(["sim"]);
    // One manifest read per listing, for the clouds' offers: the sim's never reach the registry.
    expect(registry.count("manifest")).toBe(2);
  });

  it("a sim model lease for llama3.2:1b is pulled, loaded, running and answers a chat through the gateway, offline", async () => {
    fakes = installFakes(offline);
    // 1.3 GB at 50 MB/s: a download the keeper's 10 s polls see.
    await cloud().configure({ downloadMbs: 50 });
    const res = await rent({ provider: "sim", model: "llama3.2:1b", max_minutes: 30 });
    const text = await res.text();
    expect(res.status, text).toBe(202);
    const rented = JSON.parse(text) as Lease & { inference_key: string };
    expect(rented.model).toMatchObject({ name: "llama3.2:1b", weights_gb: 1.32, context_length: 4096 });
    expect(rented.model?.digest).toMatch(/^sha256:[0-9a-f]{64}$/);

    const running = await driveTo(rented.id, "running", { clock, maxAlarms: 200 });
    // The machine pulled the manifest the worker sized from: the same digest.
    expect(running.model?.digest).toBe(rented.model?.digest);
    const events = ((await (await api(`/v1/leases/${rented.id}/events`)).json()) as { events: { kind: string }[] })
      .events;
    const kinds = events.map((e) => e.kind);
    // Pulled (the download seen), then running: a generation of the loaded model answered.
    expect(kinds.indexOf("pulling")).toBeGreaterThan(kinds.indexOf("waiting_for_ollama"));
    expect(kinds.indexOf("running")).toBeGreaterThan(kinds.lastIndexOf("pulling"));
    expect(running.model?.loaded_at).toEqual(expect.any(String));

    const request = apiRequest(`/llm/${rented.id}/v1/chat/completions`, {
      method: "POST",
      json: { model: "llama3.2:1b", messages: [{ role: "user", content: "Say hi" }] },
      token: rented.inference_key,
    });
    const ctx = createExecutionContext();
    const chat = await worker.fetch(request as Request<unknown, IncomingRequestCfProperties>, env, ctx);
    const answer = await chat.text();
    await waitOnExecutionContext(ctx);
    expect(chat.status, answer).toBe(200);
    expect(JSON.parse(answer)).toMatchObject({ object: "chat.completion", model: "llama3.2:1b" });
    expect(outbound).toEqual([]);
  });
});

describe("a sim lease's measured bandwidth", () => {
  it("is worked out from the library's facts for the build it was sized with, never by a registry call", async () => {
    fakes = installFakes(offline);
    const services = createServices(env, loadConfig(env));
    const facts = await simModelLibrary.facts(parseRef("llama3.2:1b"));
    expect(await leaseModelFacts(services, "sim", { name: "llama3.2:1b", digest: facts.digest })).toEqual(facts);
    // Another build than the lease's, or no digest: no facts (the figure then uses the weights alone).
    const other = `sha256:${"0".repeat(64)}`;
    expect(await leaseModelFacts(services, "sim", { name: "llama3.2:1b", digest: other })).toBeNull();
    expect(await leaseModelFacts(services, "sim", { name: "llama3.2:1b", digest: null })).toBeNull();
    // A cloud's lease: the registry's cache only (empty here).
    expect(await leaseModelFacts(services, "runpod", { name: "llama3.2:1b", digest: facts.digest })).toBeNull();
    expect(outbound).toEqual([]);
  });
});

function parseRef(name: string) {
  const parsed = parseModelRef(name);
  if (!parsed.ok) throw new Error(parsed.reason);
  return parsed.ref;
}
