import { describe, expect, it } from "vitest";
import { InjectedUsageFilter, withStreamUsage } from "../../src/gateway/stream-usage";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const event = (data: unknown) => `data: ${JSON.stringify(data)}\n\n`;
const content = (text: string) =>
  event({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: text } }] });
const usage = event({
  object: "chat.completion.chunk",
  choices: [],
  usage: { prompt_tokens: 3, completion_tokens: 2 },
});

/** Runs a stream through the filter cut into pieces at the given byte offsets. */
function filtered(stream: string, cuts: number[]): { out: string; pieces: number } {
  const bytes = encoder.encode(stream);
  const filter = new InjectedUsageFilter();
  const parts: Uint8Array[] = [];
  let from = 0;
  for (const to of [...cuts, bytes.length]) {
    const out = filter.push(bytes.slice(from, to));
    if (out) parts.push(out);
    from = to;
  }
  const tail = filter.end();
  if (tail) parts.push(tail);
  return { out: parts.map((p) => decoder.decode(p)).join(""), pieces: parts.length };
}

describe("withStreamUsage", () => {
  it("asks a stream for its usage and says it did; a client that asked is left as it is", () => {
    const asked = withStreamUsage(JSON.stringify({ model: "m", stream: true, stream_options: { other: 1 } }));
    expect(asked.injected).toBe(true);
    expect(JSON.parse(asked.body).stream_options).toEqual({ other: 1, include_usage: true });
    const own = JSON.stringify({ stream: true, stream_options: { include_usage: true } });
    expect(withStreamUsage(own)).toEqual({ body: own, injected: false });
  });

  it("leaves a request that is not a stream, or not JSON, untouched", () => {
    for (const text of [JSON.stringify({ stream: false }), "not json", "[1,2]", "null"]) {
      expect(withStreamUsage(text)).toEqual({ body: text, injected: false });
    }
  });
});

describe("InjectedUsageFilter", () => {
  const stream =
    content("Grüße ") +
    content("🙂") +
    event({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }) +
    usage +
    "data: [DONE]\n\n";
  const expected = stream.replace(usage, "");

  it("drops the usage-only chunk and keeps every other byte", () => {
    expect(filtered(stream, []).out).toBe(expected);
  });

  it("the same at every cut, a multi-byte character or an event split across pieces included", () => {
    const length = encoder.encode(stream).length;
    for (let cut = 1; cut < length; cut++) expect(filtered(stream, [cut]).out, `cut at ${cut}`).toBe(expected);
  });

  it("hands each event on as soon as it is complete: one piece in, one piece out", () => {
    const events = [content("a"), content("b"), content("c")];
    const bytes = events.map((e) => encoder.encode(e));
    const filter = new InjectedUsageFilter();
    for (const [i, piece] of bytes.entries()) expect(decoder.decode(filter.push(piece) ?? undefined)).toBe(events[i]);
  });

  it("keeps a chunk with choices, or usage null, or no JSON; and a stream with no blank line at its end", () => {
    const kept = [
      event({ choices: [{ index: 0, delta: { content: "x" } }], usage: { completion_tokens: 1 } }),
      event({ choices: [], usage: null }),
      "data: not json\n\n",
      ": a comment\n\n",
    ].join("");
    expect(filtered(kept, [7]).out).toBe(kept);
    expect(filtered(`${content("a")}data: [DONE]`, []).out).toBe(`${content("a")}data: [DONE]`);
  });
});
