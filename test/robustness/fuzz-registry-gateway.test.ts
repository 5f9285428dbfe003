import { env } from "cloudflare:workers";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { loadSettings } from "../../src/config";
import { InjectedUsageFilter, MAX_EVENT_CHARS } from "../../src/gateway/stream-usage";
import { MAX_LINE_CHARS, UsageReader } from "../../src/gateway/usage";
import { MAX_TOKENS_PER_ANSWER } from "../../src/keeper/meter";
import { ModelNotFoundError, modelFacts, RegistryUnavailableError } from "../../src/models/need";
import { parseModelRef } from "../../src/models/reference";
import { MAX_BLOB_REQUESTS, RegistryNotAllowedError } from "../../src/models/registry";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { FAKE_MODELS, OllamaRegistryFake } from "../fakes/ollama-registry";
import { RunpodFake } from "../fakes/runpod";
import { api } from "../helpers";
import { TestClock } from "../support/clock";
import { HostileMachine, meterOf, runningRunpodModel, throughGateway } from "../support/hostile-machine";
import { driveTo } from "../support/keeper";

/*
 * Hostile registries and hostile machines. A registry case is a whole model lookup below the HTTP
 * layer (without D1, so thousands run in a few seconds): a model reference naming any host, and a registry that answers
 * each request with a random status, redirect (any scheme, host, port, loop), manifest (sizes,
 * layers, junk, up to 2 MiB) or blob range (short, long, shifted, whole, garbage). Promises: the
 * lookup ends in facts or one of the three errors the rent path turns into a 4xx or a 502 (never
 * a 500); no request goes to a host outside OLLAMA_REGISTRIES and their blob stores, or over
 * plain http; a manifest is read no further than its bound; a blob read makes at most
 * MAX_BLOB_REQUESTS requests. A machine case: one request through the gateway's whole route
 * (`/llm/{lease_id}/…`: OpenAI's chat streamed and not, Ollama's generate and chat) to a running
 * RunPod model lease whose machine answers an SSE, NDJSON or JSON body (whatever was asked) with
 * random numbers, line lengths (up to past the bound), encodings (invalid UTF-8, CRLF, NUL), cuts,
 * its own status, a connection that fails mid-answer or never answers. Promises: no 5xx but the
 * machine's own and the gateway's 502 (in the caller's API's error shape); nothing held above its
 * bound; the keeper's meter counts each request once and adds only counts the machine offered
 * as plausible whole numbers; bytes the usage filter does not look at go on unchanged.
 * FUZZ_RUNS cases in all (5,000 by default): a tenth machine, the rest registry. A machine case
 * is a whole request through the worker and the keeper (about 40 ms), a registry case a few
 * hundred microseconds: `FUZZ_RUNS=20000` runs 2,000 machine cases.
 */

const RUNS = Number(env.FUZZ_RUNS);
const MACHINE_RUNS = Math.ceil(RUNS / 10);
const REGISTRY_RUNS = RUNS - MACHINE_RUNS;
const SEED = 0x5eed30;
const MIB = 1024 * 1024;

const config = loadSettings(env).config;
/** Hosts a request may reach: the registries, and the blob stores docs/models.md names. */
const reachable = (url: URL) =>
  url.protocol === "https:" &&
  url.port === "" &&
  (config.ollamaRegistries.includes(url.host) ||
    /(^|\.)r2\.cloudflarestorage\.com$/.test(url.hostname) ||
    /(^|\.)(hf\.co|huggingface\.co)$/.test(url.hostname));

/** A D1 that remembers nothing: every lookup goes to the (fuzzed) registry. */
const noCache = {
  prepare: () => ({ bind: () => ({ first: async () => null, run: async () => ({}) }) }),
} as unknown as D1Database;

const HOSTS = [
  "registry.ollama.ai",
  "REGISTRY.OLLAMA.AI",
  "hf.co",
  "huggingface.co",
  "169.254.169.254",
  "127.0.0.1:8787",
  "localhost:11434",
  "10.0.0.1",
  "[::1]",
  "evil.example.com",
  "registry.ollama.ai:8443",
  "hf.co.evil.example",
  "gpulease.test",
];
const REDIRECT_TARGETS = [
  "http://169.254.169.254/latest/meta-data",
  "https://evil.example.com/x",
  "https://dd20bb891979d25aebc8bec07b2b3bbc.r2.cloudflarestorage.com/blob",
  "https://cas-bridge.xethub.hf.co/x?X-Amz-Signature=s",
  "https://r2.cloudflarestorage.com.evil.example/x",
  "https://user:pw@hf.co/x",
  "https://hf.co:8443/x",
  "//evil.example.com/x",
  "/v2/library/x/blobs/y",
  "http://registry.ollama.ai/v2/x",
  "file:///etc/passwd",
  "https://[::1]/x",
  "::not a url::",
];

const refArb = fc
  .tuple(
    fc.option(fc.constantFrom(...HOSTS), { nil: undefined }),
    fc.option(fc.stringMatching(/^[a-z0-9_][a-z0-9_-]{0,12}$/), { nil: undefined }),
    // qwen2.5's real header is megabytes of tokenizer: one case of it is in test/models, not thousands.
    fc.constantFrom("llama3.2", "llama3.2", "x"),
    fc.constantFrom("1b", "32b", "latest", "q4_k_m"),
  )
  .map(([host, ns, name, tag]) => {
    const path = host ? `${host}/${ns ?? "library"}/${name}` : ns ? `${ns}/${name}` : name;
    return `${path}:${tag}`;
  });

/** One answer of the hostile registry; `real` passes the request on to the registry fake. */
type Answer =
  | { kind: "real" }
  | { kind: "status"; status: number }
  | { kind: "redirect"; status: number; to: string }
  | { kind: "manifest"; sizes: number[]; padding: number }
  | { kind: "junk"; bytes: number }
  | { kind: "range"; shift: number; length: number; total: string }
  | { kind: "whole"; bytes: number };

const answerArb: fc.Arbitrary<Answer> = fc.oneof(
  { weight: 4, arbitrary: fc.constant({ kind: "real" as const }) },
  fc.record({
    kind: fc.constant("status" as const),
    status: fc.constantFrom(200, 206, 301, 401, 404, 416, 429, 500, 503),
  }),
  fc.record({
    kind: fc.constant("redirect" as const),
    status: fc.constantFrom(301, 302, 303, 307, 308),
    to: fc.constantFrom(...REDIRECT_TARGETS),
  }),
  fc.record({
    kind: fc.constant("manifest" as const),
    sizes: fc.array(fc.oneof(fc.nat(), fc.constantFrom(-1, 0.5, 2 ** 53, Number.MAX_SAFE_INTEGER, 5 * 1024 ** 4)), {
      maxLength: 4,
    }),
    padding: fc.constantFrom(0, 0, 0, 100, 100, MIB - 10, 2 * MIB),
  }),
  fc.record({ kind: fc.constant("junk" as const), bytes: fc.constantFrom(0, 1, 7, 4096) }),
  fc.record({
    kind: fc.constant("range" as const),
    shift: fc.constantFrom(0, 0, 0, 1, -1),
    length: fc.constantFrom(1, 2, 64, 4096),
    total: fc.constantFrom("*", "1321082688", "0", "x"),
  }),
  fc.record({ kind: fc.constant("whole" as const), bytes: fc.constantFrom(0, 10, 100_000) }),
);

/** A stream of `total` bytes of `byte`, counting what was pulled. */
function counted(total: number, byte: number, pulled: { bytes: number }): ReadableStream<Uint8Array> {
  let sent = 0;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent >= total) return controller.close();
      const n = Math.min(64 * 1024, total - sent);
      sent += n;
      pulled.bytes += n;
      controller.enqueue(new Uint8Array(n).fill(byte));
    },
  });
}

function answer(a: Answer, request: Request, registry: OllamaRegistryFake, pulled: { bytes: number }) {
  switch (a.kind) {
    case "real":
      return registry.handles(new URL(request.url)) ? registry.handle(request) : new Response(null, { status: 404 });
    case "status":
      return new Response(null, { status: a.status });
    case "redirect":
      return new Response(null, { status: a.status, headers: { Location: a.to } });
    case "manifest": {
      const layers = a.sizes.map((size, i) => ({
        mediaType: i === 0 ? "application/vnd.ollama.image.model" : "application/vnd.ollama.image.projector",
        digest: `sha256:${String(i).repeat(64)}`,
        size,
      }));
      const text = JSON.stringify({ schemaVersion: 2, layers, pad: " ".repeat(a.padding) });
      const bytes = new TextEncoder().encode(text);
      pulled.bytes += bytes.length;
      return new Response(bytes, { status: 200 });
    }
    case "junk":
      return new Response(counted(a.bytes, 0x7b, pulled), { status: 200 });
    case "range": {
      const first = Number(/^bytes=(\d+)-/.exec(request.headers.get("Range") ?? "")?.[1] ?? 0) + a.shift;
      const head = FAKE_MODELS.llama32_1b.layers[0]!.head!();
      const body = head.subarray(Math.max(0, first), Math.max(0, first) + a.length);
      return new Response(body, {
        status: 206,
        headers: { "Content-Range": `bytes ${first}-${first + a.length - 1}/${a.total}` },
      });
    }
    case "whole":
      return new Response(counted(a.bytes, 0x47, pulled), { status: 200 });
  }
}

describe(`hostile registries (${REGISTRY_RUNS} cases)`, () => {
  it("never an unexpected error, never a host outside the allow-list, every read bounded", async () => {
    const registry = new OllamaRegistryFake();
    let outside = 0;
    await fc.assert(
      fc.asyncProperty(refArb, fc.array(answerArb, { minLength: 1, maxLength: 24 }), async (reference, answers) => {
        const parsed = parseModelRef(reference);
        if (!parsed.ok) return;
        const pulled = { bytes: 0 };
        const asked: URL[] = [];
        let manifestBytes = 0;
        const hostile: typeof fetch = async (input, init) => {
          const request = new Request(input, init);
          const url = new URL(request.url);
          asked.push(url);
          if (!reachable(url) || request.redirect !== "manual") outside++;
          const before = pulled.bytes;
          const a = answers[(asked.length - 1) % answers.length]!;
          const response = await answer(a, request, registry, pulled);
          if (url.pathname.includes("/manifests/")) manifestBytes = Math.max(manifestBytes, pulled.bytes - before);
          return response;
        };
        try {
          const facts = await modelFacts({ db: noCache, config, clock: () => 0 }, parsed.ref, hostile);
          expect(facts.weights_bytes).toBeGreaterThanOrEqual(0);
          expect(Number.isSafeInteger(facts.weights_bytes)).toBe(true);
        } catch (error) {
          const known =
            error instanceof ModelNotFoundError ||
            error instanceof RegistryUnavailableError ||
            error instanceof RegistryNotAllowedError;
          if (!known) throw error;
          if (error instanceof RegistryNotAllowedError) expect(asked).toEqual([]);
        }
        expect(outside).toBe(0);
        // Manifest: two tries of up to 6 hops; blob: its cap.
        expect(asked.length).toBeLessThanOrEqual(2 * 6 + MAX_BLOB_REQUESTS);
        // A streamed manifest is dropped one chunk past 1 MiB (a whole Response body counts whole).
        expect(manifestBytes).toBeLessThanOrEqual(2 * MIB + 1024);
      }),
      { numRuns: REGISTRY_RUNS, seed: SEED },
    );
  }, 120_000);
});

/** One machine answer: its lines, how each is spelled, and where the bytes are cut. */
const numberArb = fc.oneof(
  fc.nat(),
  fc.double(),
  fc.constantFrom(-1, 1e308, Number.MAX_SAFE_INTEGER, MAX_TOKENS_PER_ANSWER + 1, "12", null, true, "NaN"),
);
const lineArb = fc.oneof(
  {
    weight: 6,
    arbitrary: fc
      .record({ prompt_tokens: numberArb, completion_tokens: numberArb })
      .map((usage) => JSON.stringify({ choices: [], usage })),
  },
  {
    weight: 6,
    arbitrary: fc
      .record({ prompt_eval_count: numberArb, eval_count: numberArb, eval_duration: numberArb })
      .map((o) => JSON.stringify({ done: true, ...o })),
  },
  {
    weight: 6,
    arbitrary: fc.string({ maxLength: 200 }).map((s) => JSON.stringify({ choices: [{ delta: { content: s } }] })),
  },
  { weight: 4, arbitrary: fc.constantFrom("[DONE]", "", "{", "\u0000", "\uFEFF{}", "data: data:") },
  // Past the bounds: rare, since each costs a few hundred KiB.
  {
    weight: 1,
    arbitrary: fc.constantFrom(MAX_LINE_CHARS + 1, 300_000, 2 * MAX_EVENT_CHARS).map((n) => "x".repeat(n)),
  },
);
/** The gateway's routes a client calls: OpenAI's chat (streamed: the usage chunk is asked for), Ollama's. */
const ROUTES = [
  { path: "v1/chat/completions", stream: true },
  { path: "v1/chat/completions", stream: false },
  { path: "api/generate", stream: true },
  { path: "api/chat", stream: false },
] as const;
const CONTENT_TYPES = { sse: "text/event-stream", ndjson: "application/x-ndjson", json: "application/json" } as const;
const machineArb = fc.record({
  route: fc.constantFrom(...ROUTES),
  // What the machine says it sends, whatever was asked.
  kind: fc.constantFrom("sse" as const, "ndjson" as const, "json" as const),
  status: fc.constantFrom(200, 200, 200, 200, 200, 400, 404, 500, 503),
  lines: fc.array(lineArb, { maxLength: 8 }),
  crlf: fc.boolean(),
  garbage: fc.option(fc.uint8Array({ maxLength: 64 }), { nil: undefined }),
  cuts: fc.array(fc.nat(), { maxLength: 12 }),
  /** the connection fails before an answer (the gateway's 502), or after this many chunks */
  fails: fc.option(fc.oneof(fc.constant("refused" as const), fc.nat({ max: 12 })), { freq: 8, nil: undefined }),
});

/** The token counts a line offers, when they are plausible (what the meter may add). */
function plausibleCounts(lines: readonly string[]): { prompt: Set<number>; completion: Set<number> } {
  const prompt = new Set([0]);
  const completion = new Set([0]);
  const ok = (v: unknown) => typeof v === "number" && Number.isSafeInteger(v) && v >= 0 && v <= MAX_TOKENS_PER_ANSWER;
  for (const line of lines) {
    try {
      const o = JSON.parse(line) as Record<string, unknown> & { usage?: Record<string, unknown> };
      for (const v of [o.usage?.prompt_tokens, o.prompt_eval_count]) if (ok(v)) prompt.add(v as number);
      for (const v of [o.usage?.completion_tokens, o.eval_count]) if (ok(v)) completion.add(v as number);
    } catch {
      // not JSON: offers no counts
    }
  }
  return { prompt, completion };
}

/** The lengths the readers hold after each chunk: watched on every instance the gateway makes. */
function watchBounds(): { most: { line: number; event: number }; restore(): void } {
  const most = { line: 0, event: 0 };
  const readerPush = UsageReader.prototype.push;
  const filterPush = InjectedUsageFilter.prototype.push;
  const reader = vi.spyOn(UsageReader.prototype, "push").mockImplementation(function (this: UsageReader, chunk) {
    readerPush.call(this, chunk);
    const self = this as unknown as { kind: string; buffer: string };
    if (self.kind !== "json") most.line = Math.max(most.line, self.buffer.length);
  });
  const filter = vi.spyOn(InjectedUsageFilter.prototype, "push").mockImplementation(function (
    this: InjectedUsageFilter,
    chunk,
  ) {
    const out = filterPush.call(this, chunk);
    most.event = Math.max(most.event, (this as unknown as { pending: string }).pending.length);
    return out;
  });
  return {
    most,
    restore: () => {
      reader.mockRestore();
      filter.mockRestore();
    },
  };
}

describe(`hostile machines through the gateway's route /llm/{lease_id}/… (${MACHINE_RUNS} cases)`, () => {
  const clock = new TestClock(Date.parse("2035-06-01T00:00:00Z"));
  let fakes: InstalledFakes;
  const machine = new HostileMachine();

  beforeAll(() => {
    clock.install();
    fakes = installFakes(
      new OllamaRegistryFake(),
      machine,
      new RunpodFake({ quirks: { bootMs: 12_000, lingerMs: 0 } }),
    );
  });
  afterAll(() => {
    fakes.restore();
    vi.useRealTimers();
  });

  it("no 5xx but the machine's own and the 502 for one that fails, errors in the API's shape, no buffer above its bound, the meter adds only plausible counts, each request once", async () => {
    const lease = await runningRunpodModel(clock, "llama3.2:1b");
    const bounds = watchBounds();
    const encoder = new TextEncoder();
    try {
      await fc.assert(
        fc.asyncProperty(machineArb, async ({ route, kind, status, lines, crlf, garbage, cuts, fails }) => {
          const nl = crlf ? "\r\n" : "\n";
          const text =
            kind === "sse"
              ? lines.map((l) => `data: ${l}${nl}${nl}`).join("")
              : kind === "ndjson"
                ? lines.map((l) => `${l}${nl}`).join("")
                : lines.join("");
          const textBytes = encoder.encode(text);
          const bytes = new Uint8Array(textBytes.length + (garbage?.length ?? 0));
          bytes.set(textBytes);
          if (garbage) bytes.set(garbage, textBytes.length);
          const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
          const chunks: Uint8Array[] = [];
          let from = 0;
          for (const to of [...points, bytes.length]) {
            chunks.push(bytes.subarray(from, to));
            from = to;
          }
          const failsAt = typeof fails === "number" && fails < chunks.length ? fails : null;
          machine.answer = () => {
            if (fails === "refused") throw new TypeError("Network connection lost.");
            let at = 0;
            const body = new ReadableStream<Uint8Array>({
              pull(controller) {
                if (at === failsAt) return controller.error(new Error("connection reset"));
                const chunk = chunks[at++];
                if (chunk === undefined) return controller.close();
                controller.enqueue(chunk);
              },
            });
            return new Response(body, { status, headers: { "Content-Type": CONTENT_TYPES[kind] } });
          };
          const before = (await meterOf(lease.id)) ?? {
            requests: 0,
            dropped: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
          };
          const json =
            route.path === "api/generate"
              ? { model: "llama3.2:1b", prompt: "hi", stream: route.stream }
              : { model: "llama3.2:1b", messages: [{ role: "user", content: "hi" }], stream: route.stream };
          const { res, bytes: got, readError } = await throughGateway(lease.id, lease.key, route.path, json);

          if (fails === "refused") {
            // The gateway's one 5xx of its own: the machine did not answer, in the caller's API's shape.
            expect(res.status).toBe(502);
            const body = JSON.parse(new TextDecoder().decode(got ?? new Uint8Array()));
            if (route.path.startsWith("v1/"))
              expect(body.error).toMatchObject({ code: "provider_error", type: "api_error" });
            else expect(body).toEqual({ error: expect.any(String) });
          } else {
            // Whatever the machine said, passed on as it said it: no 5xx of the worker's own.
            expect(res.status).toBe(status);
            expect(readError !== null).toBe(failsAt !== null);
            // Bytes the usage filter does not look at go on unchanged (it looks only at an SSE
            // answer to a stream it asked the usage of, and drops only that usage chunk).
            const filtered = kind === "sse" && route.path === "v1/chat/completions" && route.stream;
            if (
              failsAt === null &&
              (!filtered || (!garbage && !lines.some((l) => l.startsWith('{"choices":[],"usage"'))))
            )
              expect(got).toEqual(bytes);
          }
          expect(bounds.most.line).toBeLessThanOrEqual(MAX_LINE_CHARS);
          expect(bounds.most.event).toBeLessThanOrEqual(MAX_EVENT_CHARS);

          const after = (await meterOf(lease.id)) as NonNullable<Awaited<ReturnType<typeof meterOf>>>;
          // Each request is counted once: as a request, or as an answer whose numbers were dropped.
          expect(after.requests + after.dropped).toBe(before.requests + before.dropped + 1);
          for (const total of [after.prompt_tokens, after.completion_tokens])
            expect(Number.isSafeInteger(total)).toBe(true);
          const offered = plausibleCounts(lines);
          expect(offered.prompt.has(after.prompt_tokens - before.prompt_tokens)).toBe(true);
          expect(offered.completion.has(after.completion_tokens - before.completion_tokens)).toBe(true);
        }),
        { numRuns: MACHINE_RUNS, seed: SEED },
      );
    } finally {
      bounds.restore();
      machine.answer = null;
      await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
      await driveTo(lease.id, "stopped", { clock, maxAlarms: 400 });
    }
  }, 300_000);
});
