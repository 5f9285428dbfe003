import { describe, expect, it } from "vitest";
import { probeOllama } from "../../src/providers/ollama";
import { ANSWER_MAX_BYTES, loadedAtWithin, readGeneration } from "../../src/providers/ollama-answer";

const json = (body: unknown, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

// ollama/ollama server/routes.go GenerateHandler: the final answer of `stream: false`.
const ANSWER = {
  model: "llama3.2:1b",
  created_at: "2035-01-01T00:00:10.000Z",
  response: "Hello",
  done: true,
  done_reason: "length",
  total_duration: 2_500_000_000,
  load_duration: 2_000_000_000,
  prompt_eval_count: 26,
  eval_count: 1,
};

describe("the keeper's generation answer (readGeneration)", () => {
  it("a generation that ran: the load ended total − load before the answer", async () => {
    expect(await readGeneration(json(ANSWER))).toEqual({ loadedAt: Date.parse("2035-01-01T00:00:09.500Z") });
  });

  it("a load-only or unload answer, an error, a body not done or not JSON is no generation", async () => {
    expect(await readGeneration(json({ ...ANSWER, response: "", done_reason: "load" }))).toBeNull();
    expect(await readGeneration(json({ ...ANSWER, done_reason: "unload" }))).toBeNull();
    expect(await readGeneration(json({ error: "model requires more system memory" }))).toBeNull();
    expect(await readGeneration(json({ ...ANSWER, done: false }))).toBeNull();
    expect(await readGeneration(new Response("<html>proxy</html>"))).toBeNull();
    expect(await readGeneration(new Response(`{"done":true,"response":"${"x".repeat(ANSWER_MAX_BYTES)}"}`))).toBeNull();
  });

  it("timings a server cannot mean are not taken: no load time, the answer still counts", async () => {
    for (const bad of [
      { load_duration: 3_000_000_000 },
      { total_duration: -1 },
      { total_duration: 1e30 },
      { created_at: "yesterday" },
      { load_duration: undefined },
    ])
      expect(await readGeneration(json({ ...ANSWER, ...bad }))).toEqual({ loadedAt: null });
  });

  it("a server's load time is taken only between the rent and now", () => {
    expect(loadedAtWithin(500, 100, 1_000)).toBe(500);
    expect(loadedAtWithin(50, 100, 1_000)).toBe(1_000);
    expect(loadedAtWithin(2_000, 100, 1_000)).toBe(1_000);
    expect(loadedAtWithin(null, 100, 1_000)).toBe(1_000);
    expect(loadedAtWithin(500, Number.NaN, 1_000)).toBe(1_000);
  });
});

describe("probeOllama: a pull that ends inside the read, a 200 that is not a generation", () => {
  const server = (generate: () => Response, pullLines: unknown[], pulled: { value: boolean }) =>
    (async (input: RequestInfo | URL) => {
      const path = new URL(String(input instanceof Request ? input.url : input)).pathname;
      if (path === "/api/tags")
        return json({ models: pulled.value ? [{ name: "llama3.2:1b", model: "llama3.2:1b", digest: "abc" }] : [] });
      if (path === "/api/pull") {
        pulled.value = true;
        return new Response(pullLines.map((l) => `${JSON.stringify(l)}\n`).join(""), {
          headers: { "Content-Type": "application/x-ndjson" },
        });
      }
      if (path === "/api/generate") return generate();
      if (path === "/api/ps")
        return json({
          models: [{ name: "llama3.2:1b", model: "llama3.2:1b", digest: "abc", size: 10, size_vram: 10 }],
        });
      return new Response("404 page not found", { status: 404 });
    }) as typeof fetch;

  it("a download seen to its end is pulling (100 %), not loading: the next look generates", async () => {
    const pulled = { value: false };
    const lines = [
      { status: "pulling manifest" },
      { status: "pulling 74701a8c35f6", digest: "sha256:74701a8c35f6", total: 1_321_082_688, completed: 1_000 },
      { status: "pulling 74701a8c35f6", digest: "sha256:74701a8c35f6", total: 1_321_082_688, completed: 1_321_082_688 },
      { status: "verifying sha256 digest" },
      { status: "writing manifest" },
      { status: "success" },
    ];
    const fetchImpl = server(() => json(ANSWER), lines, pulled);
    expect(await probeOllama("http://o", "llama3.2:1b", fetchImpl, { pullWindowMs: 50 })).toEqual({
      phase: "pulling",
      completed: 1_321_082_688,
      total: 1_321_082_688,
    });
    expect(await probeOllama("http://o", "llama3.2:1b", fetchImpl, { pullWindowMs: 50 })).toEqual({
      phase: "ready",
      digest: "abc",
      loaded_at: Date.parse("2035-01-01T00:00:09.500Z"),
    });
  });

  it("a generation answered 200 without generating (load-only, cut off) is still loading", async () => {
    const pulled = { value: true };
    for (const answer of [json({ ...ANSWER, done_reason: "load" }), new Response('{"done":tr')]) {
      const fetchImpl = server(() => answer, [], pulled);
      expect(await probeOllama("http://o", "llama3.2:1b", fetchImpl)).toEqual({ phase: "loading", digest: "abc" });
    }
  });
});
