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
  /** decoded tokens per second (Ollama's eval_count ÷ eval_duration), when the server said */
  decode_tokens_per_s: number | null;
  /** from the request to the first byte of the answer's body */
  first_token_ms: number | null;
}

interface Counted {
  prompt_tokens: number;
  completion_tokens: number;
  decode_tokens_per_s: number | null;
}

const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : null);

/** The counts in one JSON object of either API, or null when it carries none. */
export function countsOf(value: unknown): Counted | null {
  if (!value || typeof value !== "object") return null;
  const o = value as Record<string, unknown>;
  const usage = o.usage as Record<string, unknown> | undefined | null;
  if (usage && typeof usage === "object") {
    const prompt = num(usage.prompt_tokens);
    const completion = num(usage.completion_tokens);
    if (prompt !== null || completion !== null)
      return { prompt_tokens: prompt ?? 0, completion_tokens: completion ?? 0, decode_tokens_per_s: null };
  }
  const evalCount = num(o.eval_count);
  const promptCount = num(o.prompt_eval_count);
  if (evalCount === null && promptCount === null) return null;
  const duration = num(o.eval_duration);
  return {
    prompt_tokens: promptCount ?? 0,
    completion_tokens: evalCount ?? 0,
    // eval_duration is in nanoseconds.
    decode_tokens_per_s: evalCount && duration ? Math.round((evalCount / (duration / 1e9)) * 100) / 100 : null,
  };
}

/**
 * Reads a response body as it passes through, without holding it: SSE `data:` lines and NDJSON
 * lines are parsed as they complete, a JSON body at its end. The last counts seen win (a stream
 * states them once, at its end).
 */
export class UsageReader {
  private buffer = "";
  private truncated = false;
  private counted: Counted | null = null;
  private readonly decoder = new TextDecoder();

  constructor(private readonly kind: "sse" | "ndjson" | "json") {}

  push(chunk: Uint8Array): void {
    this.buffer += this.decoder.decode(chunk, { stream: true });
    if (this.kind === "json") {
      // A JSON answer is parsed once whole; a larger one (a batch of embeddings) keeps only its
      // tail, where both APIs put their counts, and is read from that.
      if (this.buffer.length > JSON_HELD_CHARS) {
        this.buffer = this.buffer.slice(-JSON_TAIL_CHARS);
        this.truncated = true;
      }
      return;
    }
    const lines = this.buffer.split("\n");
    this.buffer = lines.pop() ?? "";
    for (const line of lines) this.line(line);
  }

  end(): Counted | null {
    this.buffer += this.decoder.decode();
    if (this.kind === "json") {
      if (this.truncated) this.counted = countsInTail(this.buffer);
      else this.take(this.buffer);
    } else if (this.buffer) this.line(this.buffer);
    this.buffer = "";
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
    const value = [...tail.matchAll(new RegExp(`"${name}"\\s*:\\s*(\\d+)`, "g"))].at(-1)?.[1];
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

/** A lease's usage as the keeper keeps it between flushes. */
export interface MeterState {
  requests: number;
  errors: number;
  prompt_tokens: number;
  completion_tokens: number;
  /** the most recent samples, for the medians */
  decode: number[];
  first: number[];
  flushedAt: number;
  dirty: boolean;
}

export const emptyMeter: MeterState = {
  requests: 0,
  errors: 0,
  prompt_tokens: 0,
  completion_tokens: 0,
  decode: [],
  first: [],
  flushedAt: 0,
  dirty: false,
};

const KEEP_SAMPLES = 101;

/** One request added to the meter (pure). */
export function addSample(state: MeterState, sample: UsageSample): MeterState {
  const keep = (list: number[], value: number | null) =>
    value === null ? list : [...list, value].slice(-KEEP_SAMPLES);
  return {
    ...state,
    requests: state.requests + 1,
    errors: state.errors + (sample.ok ? 0 : 1),
    prompt_tokens: state.prompt_tokens + sample.prompt_tokens,
    completion_tokens: state.completion_tokens + sample.completion_tokens,
    decode: keep(state.decode, sample.decode_tokens_per_s),
    first: keep(state.first, sample.first_token_ms),
    dirty: true,
  };
}

/** At most one D1 write per lease this often, whatever the request rate. */
export const FLUSH_EVERY_MS = 5_000;
