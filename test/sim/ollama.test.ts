import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createApp } from "../../src/app";
import { createSimProvider } from "../../src/providers/sim";
import type { MachineSpec, ProviderOffer } from "../../src/providers/types";
import { simCloud } from "../../src/sim/cloud";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { FAKE_MODELS, type FakeModel, OllamaRegistryFake } from "../fakes/ollama-registry";
import { api } from "../helpers";
import { ollamaSpec } from "../support/provider-fixtures";

// The SimCloud object runs in this test's isolate, so faking Date here moves its clock too.
const T0 = Date.parse("2030-01-01T00:00:00Z");
let now = T0;
const at = (seconds: number) => {
  now = T0 + seconds * 1000;
  vi.setSystemTime(now);
};

const cloud = () => simCloud(env.SIM_CLOUD);
const sim = createSimProvider({ namespace: env.SIM_CLOUD, clock: () => Date.now() });

/** qwen2.5:7b as the library serves it (the registry fake holds llama3.2:1b and qwen2.5:32b). */
const QWEN_7B: FakeModel = {
  host: "registry.ollama.ai",
  namespace: "library",
  name: "qwen2.5",
  tag: "7b",
  layers: [
    { mediaType: "application/vnd.ollama.image.model", size: 4_683_073_184 },
    { mediaType: "application/vnd.ollama.image.template", size: 1_482 },
  ],
};

const registry = new OllamaRegistryFake();
registry.put(QWEN_7B);
const LLAMA_1B = {
  /** what /api/tags shows: the hex sha256 of the manifest the registry sent */
  digest: "",
  weights: 1_321_082_688,
  manifest: FAKE_MODELS.llama32_1b.layers.reduce((sum, l) => sum + l.size, 0),
  // weights + f16 KV cache for 4,096 tokens + flash-attention compute buffer, as the runner takes them
  loaded4k: 1_726_357_312, // weights 1,321,082,688 + KV 134,217,728 + compute 271,056,896 (src/models/runner.ts)
};
let fakes: InstalledFakes;

async function offer(gpu: string, count = 1): Promise<ProviderOffer> {
  const found = (await sim.listOffers({ gpu, gpu_count: count }))[0];
  if (!found) throw new Error(`no sim offer for ${gpu} x${count}`);
  return found;
}

async function rentModel(model: string, over: Partial<MachineSpec> = {}, gpu = "4090"): Promise<string> {
  const spec = ollamaSpec({
    label: `gpulease-lse_${model.replace(/\W/g, "")}`,
    image: "ollama/ollama:0.32.15",
    ports: [],
    context_length: 4096,
    env: {
      GPULEASE_MODEL: model,
      GPULEASE_CALLBACK_URL: "http://gpulease.test/v1/leases/lse_x/done",
      GPULEASE_CALLBACK_TOKEN: "cbt",
    },
    ...over,
  });
  const result = await sim.rent(await offer(gpu), spec);
  if (!result.ok) throw new Error(`rent failed: ${result.error}`);
  return result.ref;
}

const probe = async (ref: string, model: string | null) => sim.ollamaProbe(ref, await sim.status(ref), model);
const ollama = (ref: string, path: string, json?: unknown) =>
  api(`/sim/ollama/${ref}${path}`, { token: null, ...(json === undefined ? {} : { method: "POST", json }) });

async function lines(res: Response): Promise<Record<string, unknown>[]> {
  return new TextDecoder()
    .decode(await res.arrayBuffer())
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

function events(body: string): unknown[] {
  return body
    .split("\n\n")
    .filter(Boolean)
    .map((e) => {
      expect(e.startsWith("data: ")).toBe(true);
      const data = e.slice("data: ".length);
      return data === "[DONE]" ? "[DONE]" : JSON.parse(data);
    });
}

beforeEach(async () => {
  fakes = installFakes(registry);
  LLAMA_1B.digest = (await registry.manifestDigest(FAKE_MODELS.llama32_1b)).slice("sha256:".length);
  at(0);
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(now);
  await cloud().reset();
  // running at 20 s, Ollama listens at 30 s; 1.32 GB at 250 MB/s: pulled 5.3 s after the manifest
  await cloud().configure({ bootSeconds: 20, readySeconds: 10, lingerSeconds: 8, downloadMbs: 250 });
});

afterEach(() => {
  fakes.restore();
  vi.useRealTimers();
});

describe("a model lease's machine pulls and loads its model by itself", () => {
  it("goes down → pulling (with progress) → loading → ready with the model's digest", async () => {
    const ref = await rentModel("llama3.2:1b");
    expect(await probe(ref, "llama3.2:1b")).toEqual({ phase: "down" });
    at(29.9);
    expect(await probe(ref, "llama3.2:1b")).toEqual({ phase: "down" });
    at(30);
    expect(await probe(ref, "llama3.2:1b")).toEqual({ phase: "pulling", completed: null, total: null });
    at(31.3); // one second after the manifest
    expect(await probe(ref, "llama3.2:1b")).toEqual({ phase: "pulling", completed: 250e6, total: LLAMA_1B.weights });
    at(35.6); // pulled at 35.585, loading for 0.66 s
    expect(await probe(ref, "llama3.2:1b")).toEqual({ phase: "loading", digest: LLAMA_1B.digest });
    at(36.3);
    // ready, with the time its load ended: 35.585 s + 0.661 s
    expect(await probe(ref, "llama3.2:1b")).toEqual({
      phase: "ready",
      digest: LLAMA_1B.digest,
      loaded_at: T0 + 36_246,
    });
    // the names Ollama lists the model under, too
    expect(await probe(ref, "registry.ollama.ai/library/llama3.2:1b")).toMatchObject({ phase: "ready" });
    // the machine asked the registry for the manifest once, like `ollama pull`
    expect(registry.requests.filter((r) => r.kind === "manifest").map((r) => r.url)).toEqual([
      "https://registry.ollama.ai/v2/library/llama3.2/manifests/1b",
    ]);

    const state = (await (await api("/v1/sim")).json()) as { machines: { ref: string; ollama: unknown }[] };
    expect(state.machines.find((m) => m.ref === ref)?.ollama).toEqual({
      model: "llama3.2:1b",
      probe: { phase: "ready", digest: LLAMA_1B.digest, loaded_at: T0 + 36_246 },
    });
  });

  it("its offers carry the download speed that sizes the start timeout", async () => {
    expect((await offer("4090")).download_mbs).toBe(250);
    await cloud().configure({ downloadMbs: 40 });
    expect((await offer("4090")).download_mbs).toBe(40);
  });

  it("an empty Ollama lease (no model) is ready once the server listens", async () => {
    const ref = await rentModel("llama3.2:1b", { env: {} });
    at(30);
    expect(await probe(ref, null)).toEqual({ phase: "ready", digest: "" });
    expect(await (await ollama(ref, "/api/tags")).json()).toEqual({ models: [] });
  });
});

describe("pull failures", () => {
  it("a registry that does not answer: the pull fails with Ollama's text for it", async () => {
    registry.down = "5xx";
    try {
      const ref = await rentModel("llama3.2:1b");
      at(31);
      expect(await probe(ref, "llama3.2:1b")).toEqual({
        phase: "failed",
        error:
          'pull model manifest: Get "https://registry.ollama.ai/v2/library/llama3.2/manifests/1b": dial tcp: i/o timeout',
      });
    } finally {
      registry.down = null;
    }
  });

  it("pull_failure: the pull fails at the manifest with Ollama's own text", async () => {
    await cloud().configure({ faults: { pull_failure: true } });
    const ref = await rentModel("llama3.2:1b");
    await cloud().configure({ faults: { pull_failure: false } }); // switched when the machine was created
    at(30.3);
    expect(await probe(ref, "llama3.2:1b")).toEqual({
      phase: "failed",
      error: "pull model manifest: file does not exist",
    });
    expect(await (await ollama(ref, "/api/tags")).json()).toEqual({ models: [] });
  });

  it("a model the registry does not have fails the same way, without any switch", async () => {
    const ref = await rentModel("nosuchmodel:7b");
    at(31);
    expect(await probe(ref, "nosuchmodel:7b")).toEqual({
      phase: "failed",
      error: "pull model manifest: file does not exist",
    });
  });

  it("a disk that fills half-way: pulling with progress, then failed with the error", async () => {
    const error = "write /root/.ollama/models/blobs/sha256-74701a8c35f6-partial: no space left on device";
    await cloud().configure({ faults: { pull_failure: { error, after_fraction: 0.5 } } });
    const ref = await rentModel("llama3.2:1b");
    at(32.3);
    expect(await probe(ref, "llama3.2:1b")).toEqual({ phase: "pulling", completed: 500e6, total: LLAMA_1B.weights });
    at(33); // half of 1.32 GB at 250 MB/s: 2.64 s after the manifest
    expect(await probe(ref, "llama3.2:1b")).toEqual({ phase: "failed", error });
  });
});

describe("a model that does not fit the GPUs", () => {
  it("partial_gpu: /api/ps shows part of it on the CPU and the probe says spilled", async () => {
    await cloud().configure({ faults: { partial_gpu: 0.5 } });
    const ref = await rentModel("llama3.2:1b");
    at(36.3);
    expect(await probe(ref, "llama3.2:1b")).toEqual({
      phase: "spilled",
      digest: LLAMA_1B.digest,
      size: LLAMA_1B.loaded4k,
      size_vram: LLAMA_1B.loaded4k / 2,
    });
    const ps = (await (await ollama(ref, "/api/ps")).json()) as { models: { size: number; size_vram: number }[] };
    expect(ps.models[0]).toMatchObject({ size: LLAMA_1B.loaded4k, size_vram: LLAMA_1B.loaded4k / 2 });
  });

  it("qwen2.5:32b spills on one RTX 4090 at 32k tokens of context, and fits at 4k", async () => {
    await cloud().configure({ downloadMbs: 20_000 });
    const big = await rentModel("qwen2.5:32b", { context_length: 32_768, label: "gpulease-lse_big" });
    const small = await rentModel("qwen2.5:32b", { context_length: 4096, label: "gpulease-lse_small" });
    at(45); // pulled about 1 s after the manifest, loaded 10 s later
    const spilled = await probe(big, "qwen2.5:32b");
    expect(spilled).toMatchObject({ phase: "spilled", digest: expect.stringMatching(/^[0-9a-f]{64}$/) });
    if (spilled.phase !== "spilled") throw new Error("not spilled");
    expect(spilled.size).toBeGreaterThan(24 * 1024 ** 3);
    expect(spilled.size_vram).toBeLessThan(24 * 1024 ** 3);
    expect(await probe(small, "qwen2.5:32b")).toMatchObject({ phase: "ready" });
  });
});

describe("the Ollama HTTP surface at /sim/ollama/{ref}", () => {
  let ref = "";
  beforeEach(async () => {
    ref = await rentModel("llama3.2:1b");
    at(40);
  });

  it("answers like a real server: /, /api/version, /api/tags, /api/ps", async () => {
    expect(await (await ollama(ref, "/")).text()).toBe("Ollama is running");
    expect(await (await ollama(ref, "/api/version")).json()).toEqual({ version: "0.32.15" });
    expect(await (await ollama(ref, "/api/tags")).json()).toEqual({
      models: [
        {
          name: "llama3.2:1b",
          model: "llama3.2:1b",
          modified_at: new Date(T0 + 35_585).toISOString(),
          size: LLAMA_1B.manifest,
          digest: LLAMA_1B.digest,
          details: {
            parent_model: "",
            format: "gguf",
            family: "llama",
            families: ["llama"],
            parameter_size: "1.2B",
            quantization_level: "Q8_0",
            context_length: 131072,
            embedding_length: 2048,
          },
          capabilities: ["completion", "tools"],
        },
      ],
    });
    const ps = (await (await ollama(ref, "/api/ps")).json()) as { models: Record<string, unknown>[] };
    expect(ps.models).toHaveLength(1);
    expect(ps.models[0]).toMatchObject({
      name: "llama3.2:1b",
      model: "llama3.2:1b",
      size: LLAMA_1B.loaded4k,
      size_vram: LLAMA_1B.loaded4k,
      digest: LLAMA_1B.digest,
      context_length: 4096,
      details: { family: "llama", quantization_level: "Q8_0" },
    });
    // keep_alive -1 from the start command: Ollama shows now + the largest Go duration
    expect(new Date(ps.models[0]!.expires_at as string).getUTCFullYear()).toBe(2322);
  });

  it("POST /api/generate: one token with num_predict 1, the whole reply without, real-looking counts", async () => {
    const one = await ollama(ref, "/api/generate", {
      model: "llama3.2:1b",
      prompt: "hi",
      stream: false,
      keep_alive: -1,
      options: { num_predict: 1 },
    });
    expect(one.status).toBe(200);
    const body = (await one.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ model: "llama3.2:1b", response: "Hello", done: true, done_reason: "length" });
    expect(body.eval_count).toBe(1);
    expect(body.prompt_eval_count).toBe(21);
    // The runner's decode clock starts at the first sampled token: one token is timed as next to nothing.
    expect(body.eval_duration as number).toBeLessThan(1e6);
    expect(body.eval_duration as number).toBeGreaterThan(0);

    const whole = (await (
      await ollama(ref, "/api/generate", { model: "llama3.2:1b", prompt: "Why is the sky blue?", stream: false })
    ).json()) as Record<string, unknown>;
    expect(whole.response).toBe('Hello from llama3.2:1b on a simulated GPU. You said: "Why is the sky blue?".');
    expect(whole).toMatchObject({ done: true, done_reason: "stop", prompt_eval_count: 26 });
    expect(whole.eval_count).toBeGreaterThan(15);
    expect(whole.context).toHaveLength((whole.prompt_eval_count as number) + (whole.eval_count as number));
  });

  it("/api/show, /api/embed, /api/embeddings, /v1/embeddings, /v1/completions and /v1/models/{id} in Ollama's shapes", async () => {
    const shown = (await (await ollama(ref, "/api/show", { model: "llama3.2:1b" })).json()) as Record<string, unknown>;
    expect(shown).toMatchObject({
      details: { format: "gguf", family: "llama" },
      model_info: { "general.architecture": "llama", "llama.context_length": 131_072 },
      capabilities: ["completion", "tools"],
    });
    const missing = await ollama(ref, "/api/show", { model: "nope:1b" });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ error: "model 'nope:1b' not found" });

    const embed = (await (await ollama(ref, "/api/embed", { model: "llama3.2:1b", input: ["a", "b c"] })).json()) as {
      embeddings: number[][];
      prompt_eval_count: number;
    };
    expect(embed.embeddings).toHaveLength(2);
    expect(embed.embeddings[0]).toHaveLength(2048);
    expect(Math.hypot(...embed.embeddings[0]!)).toBeCloseTo(1, 3);
    expect(embed.prompt_eval_count).toBe(3);
    const legacy = (await (await ollama(ref, "/api/embeddings", { model: "llama3.2:1b", prompt: "a" })).json()) as {
      embedding: number[];
    };
    expect(legacy.embedding).toEqual(embed.embeddings[0]);
    const list = (await (await ollama(ref, "/v1/embeddings", { model: "llama3.2:1b", input: "a" })).json()) as Record<
      string,
      unknown
    >;
    expect(list).toEqual({
      object: "list",
      data: [{ object: "embedding", embedding: embed.embeddings[0], index: 0 }],
      model: "llama3.2:1b",
      usage: { prompt_tokens: 1, total_tokens: 1 },
    });

    const completion = (await (
      await ollama(ref, "/v1/completions", { model: "llama3.2:1b", prompt: "hi", max_tokens: 3 })
    ).json()) as Record<string, unknown>;
    expect(completion).toMatchObject({
      object: "text_completion",
      model: "llama3.2:1b",
      system_fingerprint: "fp_ollama",
      choices: [{ text: "Hello from llama3", index: 0, finish_reason: "length" }],
      usage: { completion_tokens: 3 },
    });

    const retrieved = await ollama(ref, "/v1/models/llama3.2:1b");
    expect(await retrieved.json()).toMatchObject({ id: "llama3.2:1b", object: "model", owned_by: "library" });
    const unknown = await ollama(ref, "/v1/models/nope:1b");
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ error: { type: "not_found_error" } });
  });

  it("POST /api/generate streams NDJSON token by token, the last line with the counts", async () => {
    const res = await ollama(ref, "/api/generate", { model: "llama3.2:1b", prompt: "Why is the sky blue?" });
    expect(res.headers.get("content-type")).toBe("application/x-ndjson");
    const all = await lines(res);
    const last = all.at(-1)!;
    expect(last).toMatchObject({ done: true, done_reason: "stop", response: "" });
    const pieces = all.slice(0, -1);
    expect(pieces.every((p) => p.done === false)).toBe(true);
    expect(pieces.map((p) => p.response).join("")).toContain("You said");
    expect(last.eval_count).toBe(pieces.length);
  });

  it("an unknown model is a 404 with Ollama's text; an empty prompt only loads, keep_alive 0 unloads", async () => {
    const missing = await ollama(ref, "/api/generate", { model: "qwen2.5:7b", prompt: "hi" });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ error: "model 'qwen2.5:7b' not found" });
    expect(await (await ollama(ref, "/api/generate", { model: "llama3.2:1b" })).json()).toMatchObject({
      response: "",
      done: true,
      done_reason: "load",
    });
    expect(await (await ollama(ref, "/api/generate", { model: "llama3.2:1b", keep_alive: 0 })).json()).toMatchObject({
      done_reason: "unload",
    });
    expect(await (await ollama(ref, "/api/ps")).json()).toEqual({ models: [] });
  });

  it("POST /api/chat, non-streamed and streamed", async () => {
    const messages = [{ role: "user", content: "Say hello" }];
    const res = await ollama(ref, "/api/chat", { model: "llama3.2:1b", messages, stream: false });
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({
      model: "llama3.2:1b",
      message: { role: "assistant", content: expect.stringContaining('You said: "Say hello"') },
      done: true,
      done_reason: "stop",
    });
    const streamed = await lines(await ollama(ref, "/api/chat", { model: "llama3.2:1b", messages }));
    expect(
      streamed
        .slice(0, -1)
        .map((l) => (l.message as { content: string }).content)
        .join(""),
    ).toBe((body.message as { content: string }).content);
    expect(streamed.at(-1)).toMatchObject({ done: true, message: { role: "assistant", content: "" } });
  });

  it("POST /v1/chat/completions in the OpenAI shape, with usage", async () => {
    const res = await ollama(ref, "/v1/chat/completions", {
      model: "llama3.2:1b",
      messages: [{ role: "user", content: "Say hello" }],
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      id: string;
      usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
    };
    expect(body).toMatchObject({
      id: expect.stringMatching(/^chatcmpl-\d+$/),
      object: "chat.completion",
      model: "llama3.2:1b",
      system_fingerprint: "fp_ollama",
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: expect.stringContaining("Say hello") },
          finish_reason: "stop",
        },
      ],
    });
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + body.usage.completion_tokens);
    expect(body.usage.completion_tokens).toBeGreaterThan(10);

    const capped = (await (
      await ollama(ref, "/v1/chat/completions", {
        model: "llama3.2:1b",
        messages: [{ role: "user", content: "Say hello" }],
        max_tokens: 2,
      })
    ).json()) as { choices: { finish_reason: string }[]; usage: { completion_tokens: number } };
    expect(capped).toMatchObject({ choices: [{ finish_reason: "length" }], usage: { completion_tokens: 2 } });

    const missing = await ollama(ref, "/v1/chat/completions", {
      model: "nope:1b",
      messages: [{ role: "user", content: "x" }],
    });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({
      error: { message: "model 'nope:1b' not found", type: "not_found_error", param: null, code: null },
    });
  });

  it("POST /v1/chat/completions streams server-sent events: role first, a finish chunk, usage, [DONE]", async () => {
    const res = await ollama(ref, "/v1/chat/completions", {
      model: "llama3.2:1b",
      messages: [{ role: "user", content: "Say hello" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const all = events(new TextDecoder().decode(await res.arrayBuffer())) as Record<string, unknown>[];
    expect(all.at(-1)).toBe("[DONE]");
    type Chunk = {
      object: string;
      choices: { delta: { role?: string; content?: string }; finish_reason: string | null }[];
    };
    const chunks = all.slice(0, -1) as unknown as (Chunk & { usage?: { completion_tokens: number } })[];
    expect(chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true);
    expect(chunks[0]!.choices[0]!.delta.role).toBe("assistant");
    const usage = chunks.at(-1)!;
    expect(usage.choices).toEqual([]);
    const finish = chunks.at(-2)!;
    expect(finish.choices[0]).toMatchObject({ delta: {}, finish_reason: "stop" });
    const content = chunks
      .slice(0, -2)
      .map((c) => c.choices[0]!.delta.content)
      .join("");
    expect(content).toContain('You said: "Say hello"');
    expect(usage.usage?.completion_tokens).toBe(chunks.length - 2);
  });

  it("GET /v1/models lists the pulled models", async () => {
    expect(await (await ollama(ref, "/v1/models")).json()).toEqual({
      object: "list",
      data: [{ id: "llama3.2:1b", object: "model", created: Math.floor((T0 + 35_585) / 1000), owned_by: "library" }],
    });
  });

  it("POST /api/pull streams progress while the clock moves, then success; the model is then listed", async () => {
    const res = await ollama(ref, "/api/pull", { model: "qwen2.5:7b" });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/x-ndjson");
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    while (!text.includes('"total"')) text += (await reader.read()).value ?? "";
    at(70); // 4.7 GB at 250 MB/s: 19 s
    for (;;) {
      const next = await reader.read();
      if (next.done) break;
      text += next.value;
    }
    const all = text
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(all[0]).toEqual({ status: "pulling manifest" });
    expect(all[1]).toMatchObject({ status: expect.stringMatching(/^pulling [0-9a-f]{12}$/), total: 4_683_073_184 });
    expect(all.filter((l) => typeof l.total === "number" && l.completed === l.total)).toHaveLength(2);
    expect(all.slice(-3)).toEqual([
      { status: "verifying sha256 digest" },
      { status: "writing manifest" },
      { status: "success" },
    ]);
    const tags = (await (await ollama(ref, "/api/tags")).json()) as { models: { name: string }[] };
    expect(tags.models.map((m) => m.name).sort()).toEqual(["llama3.2:1b", "qwen2.5:7b"]);
  });

  it("a pull of an unknown model: 200 with a trailing error line, or a 500 without streaming", async () => {
    const res = await ollama(ref, "/api/pull", { model: "nosuchmodel:7b" });
    expect(res.status).toBe(200);
    expect(await lines(res)).toEqual([
      { status: "pulling manifest" },
      { error: "pull model manifest: file does not exist" },
    ]);
    const flat = await ollama(ref, "/api/pull", { model: "nosuchmodel:7b", stream: false });
    expect(flat.status).toBe(500);
    expect(await flat.json()).toEqual({ error: "pull model manifest: file does not exist" });
    expect((await ollama(ref, "/api/pull", { model: "" })).status).toBe(400);
  });
});

describe("where the sim's Ollama is served", () => {
  it("access.urls points at the worker's /sim/ollama/{ref}: the rent's call-back origin, else PUBLIC_URL", async () => {
    const behind = createSimProvider({
      namespace: env.SIM_CLOUD,
      clock: () => Date.now(),
      publicUrl: "https://gl.example/",
    });
    // The worker that rented the machine answers where its call-back goes (PUBLIC_URL or the request's origin).
    const ref = await rentModel("llama3.2:1b");
    // Without a call-back the machine has no origin of its own: PUBLIC_URL, else wrangler dev's address.
    const bare = await rentModel("llama3.2:1b", { env: { GPULEASE_MODEL: "llama3.2:1b" } });
    at(20);
    expect((await sim.status(ref)).access?.urls).toEqual([`http://gpulease.test/sim/ollama/${ref}`]);
    expect((await behind.status(ref)).access?.urls).toEqual([`http://gpulease.test/sim/ollama/${ref}`]);
    expect((await sim.status(bare)).access?.urls).toEqual([`http://localhost:8787/sim/ollama/${bare}`]);
    expect((await behind.status(bare)).access?.urls).toEqual([`https://gl.example/sim/ollama/${bare}`]);
  });

  it("a booting machine's server answers 502, an unknown machine 404, and nothing is there when the sim is off", async () => {
    const ref = await rentModel("llama3.2:1b");
    expect((await ollama(ref, "/api/version")).status).toBe(502);
    expect((await ollama("sim-nosuchmachine", "/api/version")).status).toBe(404);
    at(30);
    expect((await ollama(ref, "/api/version")).status).toBe(200);
    const off = await createApp().request(`/sim/ollama/${ref}/api/version`, {}, { ...env, ENABLE_SIM: "false" });
    expect(off.status).toBe(404);
  });
});
