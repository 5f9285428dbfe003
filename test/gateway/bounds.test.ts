import { describe, expect, it } from "vitest";
import { InjectedUsageFilter } from "../../src/gateway/stream-usage";
import { UsageReader } from "../../src/gateway/usage";

// A rented machine is a stranger's computer: a line or an SSE event that never ends must not be
// held (memory) nor scanned again on every chunk (CPU). Over the bound it is passed on unparsed
// and counted (docs/architecture.md, "LLM gateway").

const MIB = 1024 * 1024;
const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** 4 MiB of one unfinished line, in 16 KiB chunks. */
const endless = (byte = "x") => {
  const chunk = encoder.encode(byte.repeat(16 * 1024));
  return Array.from({ length: 256 }, () => chunk);
};
const held = (o: object, field: string) => ((o as Record<string, unknown>)[field] as string).length;

describe("the usage reader's line bound", () => {
  it.each(["sse", "ndjson"] as const)("%s: a 4 MiB line is never held, and later lines are still read", (kind) => {
    const reader = new UsageReader(kind);
    const started = performance.now();
    let most = 0;
    for (const chunk of endless()) {
      reader.push(chunk);
      most = Math.max(most, held(reader, "buffer"));
    }
    const prefix = kind === "sse" ? "data: " : "";
    reader.push(
      encoder.encode(`\n${prefix}${JSON.stringify({ usage: { prompt_tokens: 7, completion_tokens: 5 } })}\n`),
    );
    expect(reader.end()).toMatchObject({ prompt_tokens: 7, completion_tokens: 5 });
    expect(most).toBeLessThanOrEqual(MIB);
    expect(reader.overlong).toBe(1);
    expect(performance.now() - started).toBeLessThan(2_000);
  });
});

describe("the stream filter's event bound", () => {
  it("a 4 MiB event is passed through as it comes, unchanged, and never held whole", () => {
    const filter = new InjectedUsageFilter();
    const out: Uint8Array[] = [];
    let most = 0;
    const input = [encoder.encode("data: "), ...endless(), encoder.encode("\n\n")];
    for (const chunk of input) {
      const piece = filter.push(chunk);
      if (piece) out.push(piece);
      most = Math.max(most, held(filter, "pending"));
    }
    const tail = filter.end();
    if (tail) out.push(tail);
    expect(most).toBeLessThanOrEqual(MIB);
    expect(filter.overlong).toBe(1);
    const sent = out.reduce((n, p) => n + p.length, 0);
    expect(sent).toBe(input.reduce((n, p) => n + p.length, 0));
    expect(decoder.decode(out.at(-1)!).endsWith("\n\n")).toBe(true);
  });
});
