import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type Config, loadSettings } from "../../src/config";
import {
  type ModelFacts,
  ModelNotFoundError,
  modelFacts,
  needOf,
  RegistryUnavailableError,
} from "../../src/models/need";
import { type ModelRef, parseModelRef } from "../../src/models/reference";
import { MANIFEST_ACCEPT } from "../../src/models/registry";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { FAKE_MODELS, type FakeModel, OllamaRegistryFake } from "../fakes/ollama-registry";

const HOUR = 60 * 60 * 1000;
const MIB = 1024 * 1024;

let registry: OllamaRegistryFake;
let fakes: InstalledFakes;
let now: number;
let config: Config;

const ref = (text: string): ModelRef => {
  const parsed = parseModelRef(text);
  if (!parsed.ok) throw new Error(parsed.reason);
  return parsed.ref;
};
const facts = (text: string) => modelFacts({ db: env.DB, config, clock: () => now }, ref(text));
const failure = (text: string) =>
  facts(text).then(
    (got) => {
      throw new Error(`expected ${text} to fail, got ${JSON.stringify(got)}`);
    },
    (error: Error) => error,
  );
const cached = () => env.DB.prepare("SELECT * FROM model_manifests ORDER BY name").all<Record<string, unknown>>();
/** Every requested range of one kind, as [first, last]. */
const ranges = (kind: "blob" | "cdn") =>
  registry.requests
    .filter((r) => r.kind === kind)
    .map(
      (r) =>
        /^bytes=(\d+)-(\d+)$/
          .exec(r.range ?? "")!
          .slice(1)
          .map(Number) as [number, number],
    );

beforeEach(async () => {
  await env.DB.exec("DELETE FROM model_manifests");
  config = loadSettings(env).config;
  now = Date.parse("2033-01-01T00:00:00Z");
  registry = new OllamaRegistryFake();
  fakes = installFakes(registry);
});

afterEach(() => fakes.restore());

describe("model facts from the registry", () => {
  it("reads llama3.2:1b's manifest, follows the blob's redirect, reads its GGUF header to the tensor list, and its params", async () => {
    const got = await facts("llama3.2:1b");
    expect(got).toEqual({
      name: "llama3.2:1b",
      digest: await registry.manifestDigest(FAKE_MODELS.llama32_1b),
      weights_bytes: 1_321_082_688,
      arch: {
        architecture: "llama",
        block_count: 16,
        embedding_length: 2048,
        head_count: 32,
        head_count_kv: 8,
        key_length: 64,
        value_length: 64,
        context_length: 131_072,
        vocab_size: 128_256,
        token_embd_bytes: 279_085_056,
        output_bytes: null,
        output_tied: true,
        sliding_window: null,
        sliding_window_pattern: null,
        expert_count: null,
        expert_used_count: null,
        params_num_ctx: null,
        feed_forward_length: 8192,
        expert_feed_forward_length: null,
      },
    } satisfies ModelFacts);
    expect(got.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    const [manifest, blob, cdn, ...rest] = registry.requests;
    expect(manifest).toMatchObject({
      kind: "manifest",
      url: "https://registry.ollama.ai/v2/library/llama3.2/manifests/1b",
      accept: MANIFEST_ACCEPT,
    });
    expect(blob).toMatchObject({ kind: "blob", range: "bytes=0-1048575" });
    expect(blob?.url).toMatch(/^https:\/\/registry\.ollama\.ai\/v2\/library\/llama3\.2\/blobs\/sha256:[0-9a-f]{64}$/);
    // the 307's Location, with the Range header carried over
    expect(cdn).toMatchObject({ kind: "cdn", range: "bytes=0-1048575" });
    expect(cdn?.url).toContain("https://dd20bb891979d25aebc8bec07b2b3bbc.r2.cloudflarestorage.com/blobs/sha256/");
    // the tokenizer comes before the tensor list: more ranges of the same blob, then the params layer
    const params = rest.slice(-2);
    expect(params.map((r) => r.kind)).toEqual(["blob", "cdn"]);
    expect(params[0]!.url).not.toBe(blob!.url);
    expect(rest.slice(0, -2).every((r) => r.kind === "cdn" && r.url === cdn!.url)).toBe(true);
    expect(needOf(got, 4096)).toMatchObject({ weights_gb: 1.32, context_length: 4096, vram_need_gb: 3.06 });
  });

  it("serves a name from the cache for a day without asking the registry again", async () => {
    const first = await facts("qwen2.5:32b");
    const asked = registry.requests.length;
    now += 24 * HOUR - 1;
    expect(await facts("qwen2.5:32b")).toEqual(first);
    expect(registry.requests.length).toBe(asked);
    const { results } = await cached();
    expect(results).toEqual([
      {
        name: "qwen2.5:32b",
        registry: "https://registry.ollama.ai",
        digest: first.digest,
        weights_bytes: 19_851_335_840,
        arch: JSON.stringify(first.arch),
        fetched_at: "2033-01-01T00:00:00.000Z",
      },
    ]);
  });

  it("asks for the manifest again after a day, and reads no header when the digest is the same", async () => {
    const first = await facts("qwen2.5:32b");
    now += 24 * HOUR;
    expect(await facts("qwen2.5:32b")).toEqual(first);
    expect(registry.count("manifest")).toBe(2);
    expect(registry.count("blob")).toBe(1); // the first read only (its later ranges go straight to the CDN)
    expect(registry.count("cdn")).toBe(3);
    expect((await cached()).results[0]?.fetched_at).toBe("2033-01-02T00:00:00.000Z");
  });

  it("reads the header of a tag that moved to another build", async () => {
    const first = await facts("qwen2.5:32b");
    const rebuilt: FakeModel = {
      ...FAKE_MODELS.qwen25_32b,
      build: "qwen2.5:32b@2033-01",
      layers: FAKE_MODELS.qwen25_32b.layers.map((layer, i) => (i === 0 ? { ...layer, size: 19_851_340_000 } : layer)),
    };
    registry.put(rebuilt);
    now += 25 * HOUR;
    const second = await facts("qwen2.5:32b");
    expect(second.digest).not.toBe(first.digest);
    expect(second.digest).toBe(await registry.manifestDigest(rebuilt));
    expect(second.weights_bytes).toBe(19_851_340_000);
    expect(registry.count("blob")).toBe(2);
  });

  it("reads a header once per digest, whichever name shares it", async () => {
    registry.put({ ...FAKE_MODELS.qwen25_32b, tag: "32b-instruct", build: "qwen2.5-32b" });
    registry.put({ ...FAKE_MODELS.qwen25_32b, tag: "32b", build: "qwen2.5-32b" });
    const a = await facts("qwen2.5:32b");
    const b = await facts("qwen2.5:32b-instruct");
    expect(b.digest).toBe(a.digest);
    expect(b.arch).toEqual(a.arch);
    expect(registry.count("manifest")).toBe(2);
    expect(registry.count("blob")).toBe(1);
  });

  it("reads past the first range when the header is bigger, in contiguous ranges each twice the last", async () => {
    const got = await facts("hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M");
    expect(got.arch).toMatchObject({
      architecture: "llama",
      block_count: 28,
      embedding_length: 3072,
      head_count: 24,
      head_count_kv: 8,
      key_length: null,
      value_length: null,
      context_length: 131_072,
      vocab_size: 128_256,
      feed_forward_length: 8192,
      expert_feed_forward_length: null,
      expert_count: null,
      expert_used_count: null,
    });
    expect(got.weights_bytes).toBe(2_019_377_696);
    expect(registry.requests[0]?.url).toBe("https://hf.co/v2/bartowski/Llama-3.2-3B-Instruct-GGUF/manifests/Q4_K_M");
    // hf.co redirects once (302); the later ranges go straight to the CDN's URL, as Ollama does
    // then the params layer's 105 bytes, once
    expect(ranges("blob")).toEqual([
      [0, MIB - 1],
      [0, 104],
    ]);
    expect(ranges("cdn")).toEqual([
      [0, MIB - 1],
      [MIB, 3 * MIB - 1],
      [3 * MIB, 7 * MIB - 1],
      [0, 104],
    ]);
    expect(
      registry.requests.filter((r) => r.kind === "cdn").every((r) => r.url.includes("cas-bridge.xethub.hf.co")),
    ).toBe(true);
    expect(got.arch).toMatchObject({ token_embd_bytes: 221_626_368, output_tied: true, params_num_ctx: null });
    // weights 2,019,377,696 (tied: all on the GPU) + KV 939,524,096 + compute 277,348,352 + 1 GiB + 457 MiB
    expect(needOf(got, 8192).vram_need_gb).toBe(4.47);
  });

  it("reads a header from a CDN that ignores Range, and stops reading once it has it", async () => {
    registry.ignoreRange = true;
    const got = await facts("qwen2.5:32b");
    expect(got.arch).toMatchObject({ architecture: "qwen2", block_count: 64, vocab_size: 152_064 });
    expect(registry.count("cdn")).toBe(1);
  });

  it("fails clearly on a header past 32 MiB, having read exactly 32 MiB", async () => {
    const error = await failure("bloated");
    expect(error).toBeInstanceOf(RegistryUnavailableError);
    expect(error.message).toBe("cannot size bloated:latest: the GGUF header is larger than 32 MiB");
    const read = ranges("cdn").reduce((sum, [first, last]) => sum + last - first + 1, 0);
    expect(read).toBe(32 * MIB);
    expect((await cached()).results).toEqual([]);
  });

  it("looks library models up at OLLAMA_REGISTRY_URL, and hf.co models at hf.co", async () => {
    fakes.restore();
    registry = new OllamaRegistryFake("https://ollama-mirror.example.org");
    fakes = installFakes(registry);
    config = { ...config, ollamaRegistryUrl: "https://ollama-mirror.example.org" };
    await facts("llama3.2:1b");
    await facts("hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M");
    expect(registry.requests.filter((r) => r.kind === "manifest").map((r) => r.url)).toEqual([
      "https://ollama-mirror.example.org/v2/library/llama3.2/manifests/1b",
      "https://hf.co/v2/bartowski/Llama-3.2-3B-Instruct-GGUF/manifests/Q4_K_M",
    ]);
  });
});

describe("model facts when the registry says no or cannot answer", () => {
  it("an unknown model or tag is ModelNotFoundError, and nothing is cached", async () => {
    for (const name of ["qwen2.5:99b", "no-such-model"]) {
      const error = await failure(name);
      expect(error).toBeInstanceOf(ModelNotFoundError);
      expect(error.message).toBe(`model ${ref(name).canonical} not found in the registry (registry.ollama.ai)`);
    }
    expect(await failure("qwen2.5:99b")).toBeInstanceOf(ModelNotFoundError);
    expect(registry.count("manifest")).toBe(3);
    expect((await cached()).results).toEqual([]);
  });

  it("a safetensors-only model is ModelNotFoundError: a GPU lease cannot serve it", async () => {
    const error = await failure("mlx-only");
    expect(error).toBeInstanceOf(ModelNotFoundError);
    expect(error.message).toContain("is a safetensors model");
    expect(registry.count("blob")).toBe(0);
  });

  it.each([
    ["5xx", "the model registry (registry.ollama.ai) answered HTTP 503", 2],
    ["network", "the model registry (registry.ollama.ai) could not be reached", 2],
    ["hang", "the model registry (registry.ollama.ai) did not answer within 10 s", 1],
  ] as const)("a registry that is down (%s) is RegistryUnavailableError", async (down, message, tries) => {
    registry.down = down;
    const error = await failure("llama3.2:1b");
    expect(error).toBeInstanceOf(RegistryUnavailableError);
    expect(error.message).toBe(message);
    expect(registry.count("manifest")).toBe(tries);
  });

  it("one 5xx is tried again, and a slow registry is waited for", async () => {
    registry.slowMs = 30;
    const original = registry.handle.bind(registry);
    let first = true;
    registry.handle = async (request) => {
      if (first) {
        first = false;
        return new Response("Bad Gateway", { status: 502 });
      }
      return original(request);
    };
    expect((await facts("llama3.2:1b")).weights_bytes).toBe(1_321_082_688);
  });

  it("a stale row is not served when the registry cannot be asked (the tag may have moved)", async () => {
    await facts("llama3.2:1b");
    now += 24 * HOUR;
    registry.down = "5xx";
    expect(await failure("llama3.2:1b")).toBeInstanceOf(RegistryUnavailableError);
  });

  it("a blob the CDN refuses is RegistryUnavailableError, without the signed URL or the body", async () => {
    registry.cdnStatus = 403;
    const error = await failure("llama3.2:1b");
    expect(error).toBeInstanceOf(RegistryUnavailableError);
    expect(error.message).toBe("the model registry (registry.ollama.ai) answered HTTP 403 for the model blob");
    expect(error.message).not.toMatch(/Signature|AccessDenied|cdn/);
  });

  it("a manifest that is not a model manifest is RegistryUnavailableError", async () => {
    registry.handle = async () => new Response("<html>maintenance</html>", { status: 200 });
    const error = await failure("llama3.2:1b");
    expect(error).toBeInstanceOf(RegistryUnavailableError);
    expect(error.message).toBe(
      "the model registry (registry.ollama.ai) sent a manifest for llama3.2:1b that is not a model manifest",
    );
  });
});
