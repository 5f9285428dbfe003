import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { MAX_EVENT_CHARS } from "../../src/gateway/stream-usage";
import { MAX_LINE_CHARS } from "../../src/gateway/usage";
import type { Lease } from "../../src/leases/schema";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { OllamaRegistryFake } from "../fakes/ollama-registry";
import { RunpodFake } from "../fakes/runpod";
import { api } from "../helpers";
import { TestClock } from "../support/clock";
import { HostileMachine, runningRunpodModel, throughGateway } from "../support/hostile-machine";
import { driveTo, fireNext, readLease } from "../support/keeper";

// A line or SSE event from the machine longer than the gateway's bound goes on to the client
// unparsed (test/gateway/bounds.test.ts); the operator sees how many in the lease's usage and in
// one log line per answer, which names no content (docs/architecture.md, "LLM gateway").

const clock = new TestClock(Date.parse("2035-05-01T00:00:00Z"));
const MODEL = "llama3.2:1b";
const MARKER = "q".repeat(16);
let fakes: InstalledFakes;
let machine: HostileMachine;

beforeEach(() => {
  clock.install();
  clock.advance(3_600_000);
  machine = new HostileMachine();
  fakes = installFakes(new OllamaRegistryFake(), machine, new RunpodFake({ quirks: { bootMs: 12_000, lingerMs: 0 } }));
});

afterEach(async () => {
  machine.answer = null;
  const leases = ((await (await api("/v1/leases?limit=50")).json()) as { leases: Lease[] }).leases;
  for (const lease of leases) {
    if (lease.status === "stopped") continue;
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await driveTo(lease.id, "stopped", { clock, maxAlarms: 400 });
  }
  fakes.restore();
});

const usageLine = (prompt: number, completion: number) =>
  JSON.stringify({
    id: "c",
    object: "chat.completion.chunk",
    choices: [],
    usage: { prompt_tokens: prompt, completion_tokens: completion },
  });

describe("overlong lines and events: passed on, counted in the lease's usage, logged without content", () => {
  it("an SSE stream with an overlong event and an NDJSON answer with an overlong line: unparsed_lines 2, the counts after them still read", async () => {
    const lease = await runningRunpodModel(clock, MODEL);
    const warnings: string[] = [];
    const spy = vi.spyOn(console, "warn").mockImplementation((...args: unknown[]) => {
      warnings.push(args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" "));
    });
    try {
      const long = MARKER.repeat(Math.ceil((MAX_EVENT_CHARS + 10) / MARKER.length));
      machine.answer = (request) => {
        if (new URL(request.url).pathname === "/v1/chat/completions") {
          // One event over both bounds: the reader's line and the filter's event.
          const sse = `data: {"choices":[{"delta":{"content":"${long}"}}]}\n\ndata: ${usageLine(11, 7)}\n\ndata: [DONE]\n\n`;
          return new Response(sse, { headers: { "Content-Type": "text/event-stream" } });
        }
        const ndjson = `{"response":"${long.slice(0, MAX_LINE_CHARS + 5)}"}\n${JSON.stringify({ done: true, prompt_eval_count: 5, eval_count: 3, eval_duration: 1_000_000_000 })}\n`;
        return new Response(ndjson, { headers: { "Content-Type": "application/x-ndjson" } });
      };
      const chat = await throughGateway(lease.id, lease.key, "v1/chat/completions", {
        model: MODEL,
        messages: [{ role: "user", content: "hi" }],
        stream: true,
      });
      expect(chat.res.status).toBe(200);
      // Passed on whole; the usage chunk the gateway asked for is not.
      const chatText = new TextDecoder().decode(chat.bytes!);
      expect(chatText).toContain(long);
      expect(chatText).not.toContain('"usage"');
      const generate = await throughGateway(lease.id, lease.key, "api/generate", { model: MODEL, prompt: "hi" });
      expect(generate.res.status).toBe(200);
      expect(generate.bytes!.length).toBeGreaterThan(MAX_LINE_CHARS);

      clock.advance(6_000);
      await fireNext(clock, lease.id);
      const usage = (await readLease(lease.id)).usage;
      expect(usage).toMatchObject({
        requests: 2,
        prompt_tokens: 11 + 5,
        completion_tokens: 7 + 3,
        // the SSE event once (the reader's line and the filter's event are the same text), the NDJSON line once
        unparsed_lines: 2,
        dropped_answers: 0,
      });
      const logged = warnings.filter((line) => line.includes("usage_lines_unparsed"));
      expect(logged).toHaveLength(2);
      expect(logged.join("\n")).toContain(lease.id);
      expect(warnings.join("\n")).not.toContain(MARKER);
    } finally {
      spy.mockRestore();
    }
  });

  it("counts that are not whole, negative or absurd are dropped and counted in dropped_answers, never added", async () => {
    const lease = await runningRunpodModel(clock, MODEL);
    const bad = [
      { prompt_tokens: 1.5, completion_tokens: 2 },
      { prompt_tokens: -3, completion_tokens: 2 },
      { prompt_tokens: 2, completion_tokens: 1e308 },
      { prompt_tokens: 2, completion_tokens: Number.MAX_SAFE_INTEGER },
    ];
    let next = 0;
    machine.answer = () => {
      const usage = bad[next++] ?? { prompt_tokens: 4, completion_tokens: 6 };
      return Response.json({ id: "c", object: "chat.completion", choices: [], usage });
    };
    for (let i = 0; i <= bad.length; i++) {
      const { res } = await throughGateway(lease.id, lease.key, "v1/chat/completions", {
        model: MODEL,
        messages: [{ role: "user", content: "hi" }],
      });
      expect(res.status).toBe(200);
    }
    clock.advance(6_000);
    await fireNext(clock, lease.id);
    expect((await readLease(lease.id)).usage).toMatchObject({
      requests: 1,
      prompt_tokens: 4,
      completion_tokens: 6,
      dropped_answers: bad.length,
      unparsed_lines: 0,
    });
  });
});
