import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { probeOllama } from "../../src/providers/ollama";
import { FAKE_MODELS, OllamaRegistryFake } from "../fakes/ollama-registry";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";

// The provider fakes' Ollama runs on Date.now, which these tests move.
const T0 = Date.parse("2031-03-01T00:00:00Z");
const at = (seconds: number) => vi.setSystemTime(T0 + seconds * 1000);

const MODEL_ENV = {
  GPULEASE_MODEL: "llama3.2:1b",
  OLLAMA_KEEP_ALIVE: "-1",
  OLLAMA_CONTEXT_LENGTH: "4096",
  GPULEASE_CALLBACK_URL: "http://gpulease.test/v1/leases/lse_01/done",
  GPULEASE_CALLBACK_TOKEN: "cbt_secret",
};
const WEIGHTS = 1_321_082_688;
const registry = new OllamaRegistryFake();
/** the manifest's sha256, as /api/tags lists it */
let DIGEST = "";
const viaRegistry = { url: "https://registry.ollama.ai", fetch: (request: Request) => registry.handle(request) };

beforeEach(async () => {
  DIGEST = (await registry.manifestDigest(FAKE_MODELS.llama32_1b)).slice("sha256:".length);
  vi.useFakeTimers({ toFake: ["Date"] });
  at(0);
});
afterEach(() => {
  vi.useRealTimers();
});

function runpod(env: Record<string, string> = MODEL_ENV) {
  const fake = new RunpodFake({ quirks: { ollamaListenDelayMs: 10_000 } });
  fake.ollama.registry = viaRegistry;
  const id = fake.plantPod({ name: "gpulease-lse_01", env });
  const url = `http://${id}-11434.proxy.runpod.fake`;
  const call = (path: string, json?: unknown) =>
    fake.handle(new Request(`${url}${path}`, json === undefined ? {} : { method: "POST", body: JSON.stringify(json) }));
  return { fake, id, url, call };
}

const body = async (res: Response) => (await res.json()) as Record<string, unknown>;

describe("the Ollama server on a RunPod fake's pod", () => {
  it("502 until it listens, then pulls GPULEASE_MODEL by itself and loads it for good", async () => {
    const { call } = runpod();
    expect((await call("/api/version")).status).toBe(502);
    at(10);
    expect(await body(await call("/api/version"))).toEqual({ version: "0.32.15" });
    expect(await body(await call("/api/tags"))).toEqual({ models: [] });
    at(16); // 0.3 s manifest + 5.3 s download at the default 250 MB/s + 0.66 s load
    const tags = (await body(await call("/api/tags"))) as { models: { name: string; digest: string; size: number }[] };
    const size = FAKE_MODELS.llama32_1b.layers.reduce((sum, l) => sum + l.size, 0);
    expect(tags.models).toMatchObject([{ name: "llama3.2:1b", digest: DIGEST, size }]);
    const ps = (await body(await call("/api/ps"))) as { models: Record<string, unknown>[] };
    expect(ps.models).toMatchObject([{ name: "llama3.2:1b", size_vram: 1_726_357_312, context_length: 4096 }]);
    const one = await body(
      await call("/api/generate", {
        model: "llama3.2:1b",
        prompt: "hi",
        stream: false,
        keep_alive: -1,
        options: { num_predict: 1 },
      }),
    );
    expect(one).toMatchObject({ response: "Hello", done: true, done_reason: "length", eval_count: 1 });
  });

  it("the download speed is a switch: a pull takes weights / speed", async () => {
    const { fake, call } = runpod();
    fake.ollama.switches.downloadBytesPerS = 10e6;
    at(10.3 + 100); // 1.32 GB at 10 MB/s: 132 s
    expect(await body(await call("/api/tags"))).toEqual({ models: [] });
    expect((await fake.ollama.state(fake.model.list()[0]!.id))?.downloads["llama3.2:1b"]?.completed).toBe(1e9);
    at(10.3 + 133);
    expect(((await body(await call("/api/tags"))).models as unknown[]).length).toBe(1);
  });

  it("an HTTP pull downloads only while its client stays: hung up, the download stops; a new pull resumes", async () => {
    const { fake, id, call } = runpod({});
    at(10);
    const res = await call("/api/pull", { model: "llama3.2:1b" });
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    const read = async () => decoder.decode((await reader.read()).value ?? new Uint8Array());
    let text = "";
    while (!text.includes('"total"')) text += await read();
    at(12);
    text += await read(); // a progress line at the moved clock
    expect(text).toContain('"completed":500000000');
    await reader.cancel();
    at(100); // nobody waits: nothing more is downloaded
    expect((await fake.ollama.state(id))?.downloads["llama3.2:1b"]).toMatchObject({ completed: 500e6, waiting: 0 });
    expect(await body(await call("/api/tags"))).toEqual({ models: [] });

    const again = await call("/api/pull", { model: "llama3.2:1b" });
    const resumed = again.body!.pipeThrough(new TextDecoderStream()).getReader();
    let more = "";
    while (!more.includes('"total"')) more += (await resumed.read()).value ?? "";
    expect(more).toContain('"completed":500000000');
    at(104); // the other 821 MB
    for (;;) {
      const next = await resumed.read();
      if (next.done) break;
      more += next.value;
    }
    expect(more.trim().split("\n").at(-1)).toBe('{"status":"success"}');
    expect(((await body(await call("/api/tags"))).models as unknown[]).length).toBe(1);
  });
});

describe("the Ollama server on a Vast.ai fake's instance", () => {
  function vast(env: Record<string, string> = MODEL_ENV, model = "llama3.2:1b") {
    const fake = new VastFake();
    fake.ollama.registry = viaRegistry;
    const m = fake.plant({ label: "gpulease-lse_01", env: { ...env, GPULEASE_MODEL: model } });
    const url = fake.ollamaUrl(m.id);
    const call = (path: string) => fake.handle(new Request(`${url}${path}`));
    return { fake, id: m.id, call };
  }

  it("a failed pull: nothing in /api/tags, and the start command's call-back carries Ollama's error", async () => {
    const { fake, call } = vast();
    fake.ollama.switches.pullFailure = { error: "pull model manifest: file does not exist", afterFraction: 0 };
    at(0.2);
    expect(await fake.ollama.callbacks()).toEqual([]);
    at(1);
    expect(await body(await call("/api/tags"))).toEqual({ models: [] });
    expect(await fake.ollama.callbacks()).toEqual([
      {
        machine: expect.any(String),
        url: "http://gpulease.test/v1/leases/lse_01/done",
        token: "cbt_secret",
        body: { exit_code: 1, error: "pull model manifest: file does not exist" },
        at: T0 + 300,
        delivered: false,
      },
    ]);
    const sent: Request[] = [];
    const send = async (request: Request) => {
      sent.push(request);
      return new Response('{"ok":true}');
    };
    expect(await fake.ollama.deliverCallbacks(send)).toHaveLength(1);
    expect(await fake.ollama.deliverCallbacks(send)).toHaveLength(0); // sent once
    expect(sent[0]!.method).toBe("POST");
    expect(sent[0]!.headers.get("authorization")).toBe("Bearer cbt_secret");
    expect(await sent[0]!.json()).toEqual({ exit_code: 1, error: "pull model manifest: file does not exist" });
  });

  it("a partial-GPU load shows size_vram < size; qwen2.5:32b at 32k tokens spills out of one RTX 4090 by itself", async () => {
    const small = vast();
    small.fake.ollama.override(small.id, { gpuFraction: 0.25 });
    const big = vast({ ...MODEL_ENV, OLLAMA_CONTEXT_LENGTH: "32768" }, "qwen2.5:32b");
    big.fake.ollama.switches.downloadBytesPerS = 20e9;
    at(20);
    const ps = (await body(await small.call("/api/ps"))) as { models: { size: number; size_vram: number }[] };
    expect(ps.models[0]!.size_vram).toBe(Math.floor(ps.models[0]!.size * 0.25));
    const spilled = (await body(await big.call("/api/ps"))) as { models: { size: number; size_vram: number }[] };
    expect(spilled.models[0]!.size).toBeGreaterThan(24_564 * 1024 ** 2);
    expect(spilled.models[0]!.size_vram).toBeLessThan(spilled.models[0]!.size);
  });
});

describe("the keeper's probe (probeOllama) against the fake", () => {
  it("down → pulling with progress → ready with the digest; spilled; failed with Ollama's text", async () => {
    const { fake, id, url } = runpod();
    const fetchImpl = ((input: RequestInfo | URL, init?: RequestInit) =>
      fake.handle(new Request(input, init))) as typeof fetch;
    const probe = () => probeOllama(url, "llama3.2:1b", fetchImpl, { pullWindowMs: 30 });
    expect(await probe()).toEqual({ phase: "down" });
    at(12.3);
    expect(await probe()).toEqual({ phase: "pulling", completed: 500e6, total: WEIGHTS });
    at(16);
    const ready = await probe();
    expect(ready).toEqual({ phase: "ready", digest: DIGEST, loaded_at: expect.any(Number) });
    // The server's load, from its generation's timings: before the answer, not after.
    const loadedAt = (ready as { loaded_at: number }).loaded_at;
    expect(loadedAt).toBeLessThanOrEqual(Date.now());
    expect(loadedAt).toBeGreaterThan(Date.now() - 1_000);
    fake.ollama.override(id, { gpuFraction: 0.5 });
    await fake.handle(
      new Request(`${url}/api/generate`, {
        method: "POST",
        body: JSON.stringify({ model: "llama3.2:1b", keep_alive: 0 }),
      }),
    );
    expect(await probe()).toMatchObject({ phase: "spilled", digest: DIGEST, size_vram: 863_178_656 });

    const failing = runpod({ ...MODEL_ENV, GPULEASE_MODEL: "nosuchmodel:7b" });
    const fetchFailing = ((input: RequestInfo | URL, init?: RequestInit) =>
      failing.fake.handle(new Request(input, init))) as typeof fetch;
    at(30);
    expect(await probeOllama(failing.url, "nosuchmodel:7b", fetchFailing, { pullWindowMs: 30 })).toEqual({
      phase: "failed",
      error: "pull model manifest: file does not exist",
    });
  });
});
