import { describe, expect, it } from "vitest";
import { countsOf, median, UsageReader, type UsageSample } from "../../src/gateway/usage";
import { addSample, emptyMeter } from "../../src/keeper/meter";

const bytes = (text: string) => new TextEncoder().encode(text);

/** Feeds `text` to a reader cut into `size`-byte chunks (so lines and even characters split). */
function readAll(kind: "sse" | "ndjson" | "json", text: string, size = Number.POSITIVE_INFINITY) {
  const reader = new UsageReader(kind);
  const all = bytes(text);
  const step = Math.min(size, all.length || 1);
  for (let at = 0; at < all.length; at += step) reader.push(all.slice(at, at + step));
  return reader.end();
}

// What Ollama answers to /api/generate with stream on (docs/api.md): pieces, then one line with the counts.
const ollamaStream = [
  { model: "llama3.2:1b", created_at: "2035-01-01T00:00:00Z", response: "Hel", done: false },
  { model: "llama3.2:1b", created_at: "2035-01-01T00:00:00Z", response: "lo ✓", done: false },
  {
    model: "llama3.2:1b",
    created_at: "2035-01-01T00:00:01Z",
    response: "",
    done: true,
    done_reason: "stop",
    total_duration: 912_000_000,
    load_duration: 4_571_000,
    prompt_eval_count: 26,
    prompt_eval_duration: 130_000_000,
    eval_count: 12,
    eval_duration: 480_000_000,
  },
]
  .map((line) => `${JSON.stringify(line)}\n`)
  .join("");

// An OpenAI chat stream asked with stream_options.include_usage: chunks with `usage: null`, then
// one chunk with no choices and the usage, then [DONE].
const chunk = (content: string) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  choices: [{ index: 0, delta: { content }, finish_reason: null }],
  usage: null,
});
const openaiStream = [
  `data: ${JSON.stringify(chunk("Hel"))}\n\n`,
  `data: ${JSON.stringify(chunk("lo ✓"))}\n\n`,
  `data: ${JSON.stringify({ id: "chatcmpl-1", object: "chat.completion.chunk", choices: [], usage: { prompt_tokens: 31, completion_tokens: 9, total_tokens: 40 } })}\n\n`,
  "data: [DONE]\n\n",
].join("");

describe("UsageReader: the server's own counts, read as the body passes", () => {
  it("Ollama NDJSON: the last line's prompt_eval_count and eval_count, decode tokens/s from eval_duration (ns)", () => {
    // 12 tokens, 11 of them in the 0.48 s timed from the first one: 22.92 tokens/s.
    expect(readAll("ndjson", ollamaStream)).toEqual({
      prompt_tokens: 26,
      completion_tokens: 12,
      decode_tokens_per_s: 22.92,
    });
  });

  it("OpenAI SSE: the usage chunk, the [DONE] line skipped", () => {
    expect(readAll("sse", openaiStream)).toEqual({
      prompt_tokens: 31,
      completion_tokens: 9,
      decode_tokens_per_s: null,
    });
  });

  it("the same counts whatever the chunking: split mid-line and mid-character (1, 3 and 7 bytes)", () => {
    for (const size of [1, 3, 7]) {
      expect(readAll("ndjson", ollamaStream, size)).toEqual({
        prompt_tokens: 26,
        completion_tokens: 12,
        decode_tokens_per_s: 22.92,
      });
      expect(readAll("sse", openaiStream, size)).toEqual({
        prompt_tokens: 31,
        completion_tokens: 9,
        decode_tokens_per_s: null,
      });
    }
  });

  it("a last line without its newline still counts (the stream ended on it)", () => {
    expect(readAll("ndjson", ollamaStream.trimEnd(), 5)).toMatchObject({ prompt_tokens: 26, completion_tokens: 12 });
    const sse = `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 4, completion_tokens: 2 } })}`;
    expect(readAll("sse", sse, 4)).toMatchObject({ prompt_tokens: 4, completion_tokens: 2 });
  });

  it("a stream that states running totals on every chunk (vLLM's continuous_usage_stats): the last wins", () => {
    const running = [1, 2, 3].map(
      (n) => `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 8, completion_tokens: n } })}\n\n`,
    );
    expect(readAll("sse", `${running.join("")}data: [DONE]\n\n`, 9)).toMatchObject({ completion_tokens: 3 });
  });

  it("SSE with CRLF line ends, `data:` without a space, and comment lines", () => {
    const text = `: keep-alive\r\ndata:${JSON.stringify({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 3 } })}\r\n\r\ndata: [DONE]\r\n\r\n`;
    expect(readAll("sse", text, 6)).toEqual({ prompt_tokens: 5, completion_tokens: 3, decode_tokens_per_s: null });
  });

  it("a JSON answer of each API: OpenAI `usage`, Ollama's counts; read whole at its end", () => {
    const openai = JSON.stringify({
      object: "chat.completion",
      choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }],
      usage: { prompt_tokens: 17, completion_tokens: 8, total_tokens: 25 },
    });
    expect(readAll("json", openai, 10)).toEqual({ prompt_tokens: 17, completion_tokens: 8, decode_tokens_per_s: null });
    const ollama = JSON.stringify({
      model: "llama3.2:1b",
      message: { role: "assistant", content: "hi" },
      done: true,
      prompt_eval_count: 20,
      eval_count: 50,
      eval_duration: 2_000_000_000,
    });
    expect(readAll("json", ollama, 10)).toEqual({
      prompt_tokens: 20,
      completion_tokens: 50,
      decode_tokens_per_s: 24.5,
    });
    // Embeddings: prompt tokens only (OpenAI has no completion_tokens there; Ollama /api/embed only prompt_eval_count).
    expect(
      readAll("json", JSON.stringify({ object: "list", data: [], usage: { prompt_tokens: 6, total_tokens: 6 } })),
    ).toEqual({ prompt_tokens: 6, completion_tokens: 0, decode_tokens_per_s: null });
    expect(readAll("json", JSON.stringify({ model: "m", embeddings: [[0.1]], prompt_eval_count: 3 }))).toEqual({
      prompt_tokens: 3,
      completion_tokens: 0,
      decode_tokens_per_s: null,
    });
  });

  it("no counts: a non-JSON body (a proxy's error page), an empty body, a stream without a counts line", () => {
    expect(readAll("json", "<html><body>502 Bad Gateway</body></html>")).toBeNull();
    expect(readAll("ndjson", "404 page not found")).toBeNull();
    expect(readAll("sse", "data: not json\n\n")).toBeNull();
    expect(readAll("json", "")).toBeNull();
    expect(readAll("sse", `data: ${JSON.stringify(chunk("x"))}\n\ndata: [DONE]\n\n`)).toBeNull();
    // An Ollama error line mid-stream (the pieces before it have no counts).
    expect(
      readAll("ndjson", `${JSON.stringify({ response: "a", done: false })}\n{"error":"out of memory"}\n`),
    ).toBeNull();
  });
});

describe("UsageReader: a JSON answer too large to hold whole (a batch of embeddings)", () => {
  const vectors = Array.from({ length: 700 }, (_, i) => Array.from({ length: 768 }, (_, j) => ((i * j) % 997) / 997));

  it("OpenAI /v1/embeddings over 4 MB: the usage from its tail", () => {
    const body = JSON.stringify({
      object: "list",
      data: vectors.map((embedding, index) => ({ object: "embedding", index, embedding })),
      model: "nomic-embed-text",
      usage: { prompt_tokens: 5_600, total_tokens: 5_600 },
    });
    expect(body.length).toBeGreaterThan(4_000_000);
    expect(readAll("json", body, 65_536)).toEqual({
      prompt_tokens: 5_600,
      completion_tokens: 0,
      decode_tokens_per_s: null,
    });
  });

  it("Ollama /api/embed over 4 MB: prompt_eval_count from its tail; a quoted field in a string is not one", () => {
    const body = JSON.stringify({
      model: "nomic-embed-text",
      embeddings: vectors,
      note: 'text with "eval_count": 999 in it',
      total_duration: 14_143_917,
      load_duration: 1_019_500,
      prompt_eval_count: 8_400,
    });
    expect(body.length).toBeGreaterThan(4_000_000);
    expect(readAll("json", body, 65_536)).toEqual({
      prompt_tokens: 8_400,
      completion_tokens: 0,
      decode_tokens_per_s: null,
    });
  });

  it("no counts in the tail: none", () => {
    const body = JSON.stringify({ embeddings: vectors });
    expect(readAll("json", body, 65_536)).toBeNull();
  });
});

describe("countsOf", () => {
  it("takes nothing that is not a number; passes any number on for the meter to judge; no tokens/s without a duration", () => {
    expect(countsOf(null)).toBeNull();
    expect(countsOf("usage")).toBeNull();
    expect(countsOf({ usage: { prompt_tokens: "1", completion_tokens: "3" } })).toBeNull();
    // Not read as "none" (0 tokens, counted): the keeper's meter drops the answer and counts it.
    expect(countsOf({ usage: { prompt_tokens: -1, completion_tokens: "3" } })).toEqual({
      prompt_tokens: -1,
      completion_tokens: 0,
      decode_tokens_per_s: null,
    });
    expect(countsOf({ eval_count: 2.5, prompt_eval_count: 1e308 })).toMatchObject({
      prompt_tokens: 1e308,
      completion_tokens: 2.5,
    });
    expect(countsOf({ eval_count: 10 })).toEqual({
      prompt_tokens: 0,
      completion_tokens: 10,
      decode_tokens_per_s: null,
    });
    expect(countsOf({ eval_count: 10, eval_duration: 0 })).toMatchObject({ decode_tokens_per_s: null });
    // Rounded to two places: 8 tokens, 7 timed in 0.3 s.
    expect(countsOf({ eval_count: 8, eval_duration: 300_000_000 })?.decode_tokens_per_s).toBe(23.33);
  });

  it("decoding is timed from the first sampled token: eval_duration covers eval_count − 1, short answers give no rate", () => {
    // The runner's clock starts at the first token: a one-token answer's duration is ~0, not a rate.
    expect(countsOf({ eval_count: 1, eval_duration: 1_000 })?.decode_tokens_per_s).toBeNull();
    // Two tokens in 40 ms is one token in 40 ms: 25/s, not 50/s; still too short to count.
    expect(countsOf({ eval_count: 2, eval_duration: 40_000_000 })?.decode_tokens_per_s).toBeNull();
    expect(countsOf({ eval_count: 4, eval_duration: 120_000_000 })?.decode_tokens_per_s).toBeNull();
    // Five tokens: four timed in 160 ms, 25/s.
    expect(countsOf({ eval_count: 5, eval_duration: 160_000_000 })?.decode_tokens_per_s).toBe(25);
    expect(countsOf({ eval_count: 5.5, eval_duration: 160_000_000 })?.decode_tokens_per_s).toBeNull();
  });
});

describe("the meter: addSample and median", () => {
  const sample = (over: Partial<UsageSample> = {}): UsageSample => ({
    ok: true,
    prompt_tokens: 10,
    completion_tokens: 5,
    decode_tokens_per_s: 40,
    first_token_ms: 100,
    ...over,
  });

  it("adds requests, errors and tokens; keeps the samples that were measured; marks the meter dirty", () => {
    let meter = addSample(emptyMeter, sample());
    meter = addSample(meter, sample({ ok: false, prompt_tokens: 0, completion_tokens: 0, decode_tokens_per_s: null }));
    meter = addSample(
      meter,
      sample({ prompt_tokens: 3, completion_tokens: 7, decode_tokens_per_s: 60, first_token_ms: null }),
    );
    expect(meter).toEqual({
      requests: 3,
      errors: 1,
      prompt_tokens: 13,
      completion_tokens: 12,
      decode: [40, 60],
      first: [100, 100],
      dropped: 0,
      unparsed: 0,
      droppedReported: 0,
      flushedAt: 0,
      dirty: true,
    });
    // Pure: the empty meter is untouched.
    expect(emptyMeter).toMatchObject({ requests: 0, decode: [], first: [], dirty: false });
  });

  it("adds the gateway's overlong lines, also when the machine's numbers are dropped; a count that is not one drops the sample", () => {
    let meter = addSample(emptyMeter, sample({ unparsed: 2 }));
    meter = addSample(meter, sample({ prompt_tokens: -4, unparsed: 1 }));
    expect(meter).toMatchObject({ requests: 1, dropped: 1, unparsed: 3, prompt_tokens: 10 });
    for (const unparsed of [-1, 1.5, Number.POSITIVE_INFINITY, 2_000_000]) {
      const next = addSample(meter, sample({ unparsed }));
      expect(next, String(unparsed)).toMatchObject({ requests: 1, dropped: 2, unparsed: 3 });
    }
    // A meter stored before the field existed reads as none so far.
    const { unparsed: _, ...old } = meter;
    expect(addSample(old as typeof meter, sample({ unparsed: 1 })).unparsed).toBe(1);
  });

  it("keeps only the most recent 101 samples for the medians, but counts every request", () => {
    let meter = emptyMeter;
    for (let i = 1; i <= 300; i++)
      meter = addSample(meter, sample({ decode_tokens_per_s: i, first_token_ms: 1000 + i }));
    expect(meter.requests).toBe(300);
    expect(meter.prompt_tokens).toBe(3000);
    expect(meter.decode).toHaveLength(101);
    expect(meter.decode[0]).toBe(200);
    expect(meter.decode.at(-1)).toBe(300);
    expect(median(meter.decode)).toBe(250);
    expect(median(meter.first)).toBe(1250);
  });

  it("median: none for no samples, the middle of an odd list, the mean of the two middles, unsorted input", () => {
    expect(median([])).toBeNull();
    expect(median([7])).toBe(7);
    expect(median([9, 1, 5])).toBe(5);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([10, 1, 1000, 2])).toBe(6);
    expect(median([1, 2.3333, 2.6667, 9])).toBe(2.5);
    const input = [3, 1, 2];
    median(input);
    expect(input).toEqual([3, 1, 2]);
  });
});

describe("UsageReader.finished: the answer's last word, before its stream closes", () => {
  it("an SSE stream once its [DONE] has come, not before", () => {
    const reader = new UsageReader("sse");
    reader.push(bytes('data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'));
    expect(reader.finished).toBe(false);
    reader.push(bytes('data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\ndata: [DONE]\n\n'));
    expect(reader.finished).toBe(true);
    expect(reader.end()).toMatchObject({ prompt_tokens: 3, completion_tokens: 2 });
  });

  it("Ollama's NDJSON once a line says done, not a line that only mentions it", () => {
    const reader = new UsageReader("ndjson");
    reader.push(bytes('{"response":"\\"done\\": true","done":false}\n'));
    expect(reader.finished).toBe(false);
    reader.push(bytes('{"done":true,"prompt_eval_count":4,"eval_count":6}\n'));
    expect(reader.finished).toBe(true);
    expect(reader.end()).toMatchObject({ prompt_tokens: 4, completion_tokens: 6 });
  });

  it("never for a JSON answer (its length tells)", () => {
    const reader = new UsageReader("json");
    reader.push(bytes('{"done":true,"eval_count":1}'));
    expect(reader.finished).toBe(false);
  });
});
