import { decodeRate } from "./decode-rate";

/**
 * What one request through the gateway came to, from the server's own numbers (never guessed):
 * Ollama's `prompt_eval_count`, `eval_count` and `eval_duration` (native API, last NDJSON line or
 * the JSON answer), or OpenAI's `usage` (the JSON answer, or the last SSE chunk when the stream
 * asked for it with `stream_options.include_usage`).
 */
export interface UsageSample {
  ok: boolean;
  prompt_tokens: number;
  completion_tokens: number;
  /** decoded tokens per second ((eval_count − 1) ÷ eval_duration: decode-rate.ts), when the server said */
  decode_tokens_per_s: number | null;
  /** from the request to the first byte of the answer's body */
  first_token_ms: number | null;
  /**
   * lines (SSE, NDJSON) and SSE events longer than their bound that went on to the client
   * unparsed (the larger of UsageReader.overlong and InjectedUsageFilter.overlong: an SSE event and its line are one); absent: none
   */
  unparsed?: number;
}

interface Counted {
  prompt_tokens: number;
  completion_tokens: number;
  decode_tokens_per_s: number | null;
}

const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : null);
/**
 * A token count as the machine sent it, or null when it sent none. Any number goes on as it is:
 * the keeper's meter drops an answer whose count is not plausible and counts it (a negative or
 * fractional count read as "none" would be added as 0 instead).
 */
const given = (v: unknown): number | null => (typeof v === "number" ? v : null);

/** The counts in one JSON object of either API, or null when it carries none. */
export function countsOf(value: unknown): Counted | null {
  if (!value || typeof value !== "object") return null;
  const o = value as Record<string, unknown>;
  const usage = o.usage as Record<string, unknown> | undefined | null;
  if (usage && typeof usage === "object") {
    const prompt = given(usage.prompt_tokens);
    const completion = given(usage.completion_tokens);
    if (prompt !== null || completion !== null)
      return { prompt_tokens: prompt ?? 0, completion_tokens: completion ?? 0, decode_tokens_per_s: null };
  }
  const evalCount = given(o.eval_count);
  const promptCount = given(o.prompt_eval_count);
  if (evalCount === null && promptCount === null) return null;
  const duration = num(o.eval_duration);
  return {
    prompt_tokens: promptCount ?? 0,
    completion_tokens: evalCount ?? 0,
    decode_tokens_per_s: decodeRate(evalCount, duration),
  };
}

/**
 * Reads a response body as it passes through, without holding it: SSE `data:` lines and NDJSON
 * lines are parsed as they complete, a JSON body at its end. The last counts seen win (a stream
 * states them once, at its end).
 */
export class UsageReader {
  /** the unfinished line (sse, ndjson) or the answer so far (json), never above its bound */
  private buffer = "";
  private truncated = false;
  /** the current line went past MAX_LINE_CHARS: the rest of it is skipped, up to its newline */
  private skipping = false;
  private counted: Counted | null = null;
  private readonly decoder = new TextDecoder("utf-8", { ignoreBOM: true, fatal: false });
  /** lines longer than MAX_LINE_CHARS: passed on to the client, never parsed */
  overlong = 0;

  constructor(private readonly kind: "sse" | "ndjson" | "json") {}

  push(chunk: Uint8Array): void {
    const text = this.decoder.decode(chunk, { stream: true });
    if (this.kind === "json") {
      this.buffer += text;
      // A JSON answer is parsed once whole; a larger one (a batch of embeddings) keeps only its
      // tail, where both APIs put their counts, and is read from that.
      if (this.buffer.length > JSON_HELD_CHARS) {
        this.buffer = this.buffer.slice(-JSON_TAIL_CHARS);
        this.truncated = true;
      }
      return;
    }
    // Only the new text is searched for newlines, so a line's cost is its own length, once.
    let from = 0;
    for (let at = text.indexOf("\n"); at !== -1; at = text.indexOf("\n", from)) {
      const piece = text.slice(from, at);
      if (!this.skipping && this.buffer.length + piece.length <= MAX_LINE_CHARS) this.line(this.buffer + piece);
      else if (!this.skipping) this.overlong++;
      this.buffer = "";
      this.skipping = false;
      from = at + 1;
    }
    this.hold(text.slice(from));
  }

  /** Keeps an unfinished line's text, up to MAX_LINE_CHARS; past it the line is skipped and counted. */
  private hold(piece: string): void {
    if (this.skipping || piece === "") return;
    if (this.buffer.length + piece.length > MAX_LINE_CHARS) {
      this.buffer = "";
      this.skipping = true;
      this.overlong++;
      return;
    }
    this.buffer += piece;
  }

  end(): Counted | null {
    if (this.kind === "json") {
      this.buffer += this.decoder.decode();
      if (this.truncated) this.counted = countsInTail(this.buffer.slice(-JSON_TAIL_CHARS));
      else this.take(this.buffer);
    } else {
      this.hold(this.decoder.decode());
      if (this.buffer && !this.skipping) this.line(this.buffer);
    }
    this.buffer = "";
    this.skipping = false;
    return this.counted;
  }

  /**
   * The answer has said its last word: an SSE stream's `[DONE]`, or an NDJSON line with
   * `"done": true` (what follows can only be whitespace).
   */
  get finished(): boolean {
    return this.said;
  }

  private said = false;

  private line(line: string): void {
    const text = this.kind === "sse" ? line.replace(/^data:\s?/, "") : line;
    if (this.kind === "sse" && text.trim() === "[DONE]") this.said = true;
    if (this.kind === "sse" && (!line.startsWith("data:") || text.trim() === "[DONE]")) return;
    this.take(text);
  }

  private take(text: string): void {
    if (!text.trim()) return;
    try {
      const parsed: unknown = JSON.parse(text);
      const counts = countsOf(parsed);
      if (counts) this.counted = counts;
      if (this.kind === "ndjson" && (parsed as { done?: unknown } | null)?.done === true) this.said = true;
    } catch {
      // Not JSON (a proxy's error page): no counts.
    }
  }
}

/**
 * The longest SSE or NDJSON line read for counts: a usage line is a few hundred characters, and
 * a machine's line past this is passed on to the client unparsed (UsageReader.overlong).
 */
export const MAX_LINE_CHARS = 256 * 1024;
/** A JSON answer up to this many characters is parsed whole. */
const JSON_HELD_CHARS = 4_000_000;
/** Of a larger one, this tail is kept: the counts are its last fields. */
const JSON_TAIL_CHARS = 4_096;

/**
 * The counts in the tail of a JSON answer too large to hold: the last `"usage": {…}` object
 * (OpenAI), else Ollama's top-level count fields.
 */
function countsInTail(tail: string): Counted | null {
  const usage = [...tail.matchAll(/"usage"\s*:\s*(\{[^{}]*\})/g)].at(-1)?.[1];
  if (usage) {
    try {
      return countsOf({ usage: JSON.parse(usage) });
    } catch {
      // Cut mid-object: try Ollama's fields below.
    }
  }
  const field = (name: string) => {
    // The whole number as written (1e308 is not 1): the meter judges it.
    const value = [...tail.matchAll(new RegExp(`"${name}"\\s*:\\s*(-?[0-9.eE+]+)`, "g"))].at(-1)?.[1];
    return value === undefined ? undefined : Number(value);
  };
  return countsOf({
    prompt_eval_count: field("prompt_eval_count"),
    eval_count: field("eval_count"),
    eval_duration: field("eval_duration"),
  });
}

/** Median of a list (0 entries: null). */
export function median(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  const value =
    sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
  return Math.round(value * 100) / 100;
}
