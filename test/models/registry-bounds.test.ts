import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type Config, loadSettings } from "../../src/config";
import { modelFacts, RegistryUnavailableError } from "../../src/models/need";
import { type ModelRef, parseModelRef } from "../../src/models/reference";
import { issueToken } from "../auth/tokens-helper";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { FAKE_MODELS, OllamaRegistryFake } from "../fakes/ollama-registry";
import { api, errorBody } from "../helpers";

/*
 * What a caller naming a registry, and a registry answering, can make the worker fetch
 * (docs/models.md#registries): only hosts of OLLAMA_REGISTRIES, over https, redirects only to
 * their blob stores, every body and every range count bounded, the cache keyed by registry.
 */

const MIB = 1024 * 1024;
let registry: OllamaRegistryFake;
let fakes: InstalledFakes;
let config: Config;
const now = Date.parse("2033-01-01T00:00:00Z");

const ref = (text: string): ModelRef => {
  const parsed = parseModelRef(text);
  if (!parsed.ok) throw new Error(parsed.reason);
  return parsed.ref;
};
const facts = (text: string, fetchImpl?: typeof fetch) =>
  modelFacts({ db: env.DB, config, clock: () => now }, ref(text), fetchImpl);
const failure = (text: string, fetchImpl?: typeof fetch) =>
  facts(text, fetchImpl).then(
    (got) => {
      throw new Error(`expected ${text} to fail, got ${JSON.stringify(got)}`);
    },
    (error: Error) => error,
  );
/** Every host the worker asked through the fakes or a hostile fetch, in order. */
let asked: string[] = [];
const hostsAsked = () => [...asked, ...fakes.requests.map((r) => new URL(r.url).host)];
/**
 * A registry that answers `answer` first (null: as the fakes do). A request that lets the
 * runtime follow redirects (no `redirect: "manual"`) is counted as reaching the Location.
 */
function hostile(answer: (request: Request, url: URL) => Promise<Response | null> | Response | null): typeof fetch {
  return async (input, init) => {
    const request = new Request(input, init);
    const url = new URL(request.url);
    if (!registry.handles(url)) asked.push(url.host);
    const response = (await answer(request, url)) ?? (await fetch(request));
    const location = response.headers.get("Location");
    if (location && request.redirect !== "manual") {
      asked.push(new URL(location, url).host);
      return new Response("followed", { status: 200 });
    }
    return response;
  };
}

beforeEach(async () => {
  await env.DB.exec("DELETE FROM model_manifests");
  config = loadSettings(env).config;
  asked = [];
  registry = new OllamaRegistryFake();
  fakes = installFakes(registry);
});

afterEach(() => fakes.restore());

describe("registries by allow-list (OLLAMA_REGISTRIES)", () => {
  it.each([
    "169.254.169.254/x/y",
    "127.0.0.1:8787/x/y",
    "localhost:11434/library/llama3.2:1b",
    "10.0.0.1/a/b",
    "gpulease.test/a/b",
    "evil.example.com/a/b",
  ])(
    "a read token's GET /v1/offers?model=%s is a 400 naming OLLAMA_REGISTRIES, and nothing is fetched",
    async (model) => {
      const reader = await issueToken(["read"]);
      const res = await api(`/v1/offers?model=${encodeURIComponent(model)}`, { token: reader.token });
      expect(res.status).toBe(400);
      const body = await errorBody(res);
      expect(body.error).toContain("OLLAMA_REGISTRIES");
      expect(hostsAsked()).toEqual([]);
    },
  );

  it("the default list holds the Ollama registry and Hugging Face (hf.co and huggingface.co)", async () => {
    await facts("llama3.2:1b");
    await facts("hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M");
    expect(config.ollamaRegistries).toEqual(["registry.ollama.ai", "hf.co", "huggingface.co"]);
  });

  it("a blob redirect to plain http is refused and not followed", async () => {
    const answer = hostile((_, url) =>
      url.pathname.includes("/blobs/")
        ? new Response(null, { status: 307, headers: { Location: "http://169.254.169.254/latest/meta-data" } })
        : null,
    );
    const error = await failure("llama3.2:1b", answer);
    expect(error).toBeInstanceOf(RegistryUnavailableError);
    expect(hostsAsked()).not.toContain("169.254.169.254");
  });

  it("a blob redirect to an https host that is not the registry's blob store is refused", async () => {
    const answer = hostile((_, url) =>
      url.host === "registry.ollama.ai" && url.pathname.includes("/blobs/")
        ? new Response(null, { status: 307, headers: { Location: "https://evil.example.com/x" } })
        : null,
    );
    const error = await failure("llama3.2:1b", answer);
    expect(error).toBeInstanceOf(RegistryUnavailableError);
    expect(error.message).toContain("redirected");
    expect(hostsAsked()).not.toContain("evil.example.com");
  });

  it("a manifest redirect is followed by hand, and only to an allowed host", async () => {
    const answer = hostile((_, url) =>
      url.pathname.includes("/manifests/")
        ? new Response(null, { status: 302, headers: { Location: "http://localhost:11434/api/tags" } })
        : null,
    );
    const error = await failure("llama3.2:1b", answer);
    expect(error).toBeInstanceOf(RegistryUnavailableError);
    expect(hostsAsked()).not.toContain("localhost:11434");
  });
});

describe("registry answers are bounded", () => {
  it("a 64 MiB manifest is not read whole: reading stops past 1 MiB", async () => {
    let pulled = 0;
    const hostile: typeof fetch = async (input, init) => {
      const request = new Request(input, init);
      if (!request.url.includes("/manifests/")) return fetch(input, init);
      const chunk = new Uint8Array(64 * 1024).fill(0x20);
      let sent = 0;
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (sent >= 64 * MIB) return controller.close();
          sent += chunk.length;
          pulled += chunk.length;
          controller.enqueue(chunk);
        },
      });
      return new Response(body, { status: 200 });
    };
    const error = await failure("llama3.2:1b", hostile);
    expect(error).toBeInstanceOf(RegistryUnavailableError);
    expect(error.message).toContain("larger than 1 MiB");
    expect(pulled).toBeLessThanOrEqual(2 * MIB);
  });

  it("a CDN answering every range with 1 byte hits a cap on subrequests", async () => {
    let cdnRequests = 0;
    const hostile: typeof fetch = async (input, init) => {
      const request = new Request(input, init);
      const url = new URL(request.url);
      if (!registry.handles(url) || url.host === "registry.ollama.ai") return fetch(input, init);
      cdnRequests++;
      const first = Number(/^bytes=(\d+)-/.exec(request.headers.get("Range") ?? "")?.[1] ?? 0);
      const head = FAKE_MODELS.llama32_1b.layers[0]!.head!();
      return new Response(head.subarray(first, first + 1), {
        status: 206,
        headers: { "Content-Range": `bytes ${first}-${first}/${FAKE_MODELS.llama32_1b.layers[0]!.size}` },
      });
    };
    const error = await failure("llama3.2:1b", hostile);
    expect(error).toBeInstanceOf(RegistryUnavailableError);
    expect(cdnRequests).toBeLessThanOrEqual(32);
  });

  it("a layer size past any real model is refused, not summed", async () => {
    const hostile: typeof fetch = async (input, init) => {
      const request = new Request(input, init);
      if (!request.url.includes("/manifests/")) return fetch(input, init);
      const real = JSON.parse(registry.manifestBody(FAKE_MODELS.llama32_1b)) as { layers: { size: number }[] };
      for (const layer of real.layers) layer.size = Number.MAX_SAFE_INTEGER;
      return new Response(JSON.stringify(real), { status: 200 });
    };
    expect(await failure("llama3.2:1b", hostile)).toBeInstanceOf(RegistryUnavailableError);
  });
});

describe("the GGUF facts cache is keyed by registry and digest", () => {
  it("a forged header served under the real manifest's bytes by another registry does not size the real model", async () => {
    // The attacker's hf.co repository serves qwen2.5:32b's manifest byte for byte, but its blob
    // answers a forged GGUF header (llama3.2:1b's), and is read first.
    const real = registry.manifestBody(FAKE_MODELS.qwen25_32b);
    const forged: typeof fetch = async (input, init) => {
      const request = new Request(input, init);
      const url = new URL(request.url);
      if (url.host === "hf.co" && url.pathname.includes("/manifests/")) return new Response(real, { status: 200 });
      if (url.host === "hf.co" && url.pathname.includes("/blobs/")) {
        const llama = JSON.parse(registry.manifestBody(FAKE_MODELS.llama32_1b)) as { layers: { digest: string }[] };
        const hop = await fetch(`https://registry.ollama.ai/v2/library/llama3.2/blobs/${llama.layers[0]!.digest}`, {
          redirect: "manual",
        });
        return fetch(hop.headers.get("Location")!, init);
      }
      return fetch(input, init);
    };
    const poisoned = await facts("hf.co/attacker/qwen:32b", forged);
    expect(poisoned.arch.block_count).toBe(16);
    const genuine = await facts("qwen2.5:32b");
    expect(genuine.digest).toBe(poisoned.digest);
    expect(genuine.arch.block_count).toBe(64);
  });
});
