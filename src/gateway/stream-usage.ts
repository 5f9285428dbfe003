/**
 * OpenAI streams state their token counts only when asked (`stream_options.include_usage`): the
 * gateway asks for every stream, and hands the extra chunk (`"choices": []` with `usage`) only to
 * clients that asked themselves, since a client reading `choices[0]` of every chunk would break.
 */
export function withStreamUsage(text: string): { body: string; injected: boolean } {
  try {
    const parsed = JSON.parse(text) as Record<string, unknown>;
    if (parsed && typeof parsed === "object" && parsed.stream === true) {
      const options = (parsed.stream_options as Record<string, unknown> | undefined) ?? {};
      if (options.include_usage === true) return { body: text, injected: false };
      return {
        body: JSON.stringify({ ...parsed, stream_options: { ...options, include_usage: true } }),
        injected: true,
      };
    }
  } catch {
    // Not JSON: the server answers it as it would.
  }
  return { body: text, injected: false };
}

const encoder = new TextEncoder();

/**
 * The longest SSE event held to be looked at: a usage chunk is a few hundred characters. A
 * longer event is no usage chunk; it is passed on as it comes (InjectedUsageFilter.overlong).
 */
export const MAX_EVENT_CHARS = 256 * 1024;

/**
 * Passes SSE events on as each completes, dropping the usage-only chunk the gateway asked for.
 * Only an event's unfinished tail is held, so nothing waits longer than its own last byte, and
 * never more than MAX_EVENT_CHARS of it.
 */
export class InjectedUsageFilter {
  /** the unfinished event, never above MAX_EVENT_CHARS */
  private pending = "";
  /** the current event went past MAX_EVENT_CHARS: passed on as it comes, up to its end */
  private passing = false;
  /** the last character seen, for an event end split across two chunks */
  private last = "";
  // A BOM is the machine's byte like any other: kept, so what goes on is what came.
  private readonly decoder = new TextDecoder("utf-8", { ignoreBOM: true, fatal: false });
  /** events longer than MAX_EVENT_CHARS, passed on unparsed */
  overlong = 0;

  push(chunk: Uint8Array): Uint8Array | null {
    const out = this.take(this.decoder.decode(chunk, { stream: true }));
    return out ? encoder.encode(out) : null;
  }

  end(): Uint8Array | null {
    let out = this.take(this.decoder.decode());
    if (!this.passing && this.pending) out += this.filterText(this.pending);
    this.pending = "";
    this.passing = false;
    return out ? encoder.encode(out) : null;
  }

  /** What of `text` can go on now. Only the new text (and one seen character) is searched. */
  private take(text: string): string {
    if (text === "") return "";
    const seam = this.last;
    this.last = text.slice(-1);
    if (this.passing) {
      const at = (seam + text).indexOf("\n\n");
      if (at === -1) return text;
      const cut = at - seam.length + 2;
      this.passing = false;
      this.last = "";
      return text.slice(0, cut) + this.take(text.slice(cut));
    }
    const at = (seam + text).lastIndexOf("\n\n");
    if (at === -1) {
      if (this.pending.length + text.length <= MAX_EVENT_CHARS) {
        this.pending += text;
        return "";
      }
      const out = this.pending + text;
      this.pending = "";
      this.passing = true;
      this.overlong++;
      return out;
    }
    const cut = at - seam.length + 2;
    const complete = this.filterText(this.pending + text.slice(0, cut));
    this.pending = "";
    this.last = "";
    return complete + this.take(text.slice(cut));
  }

  private filterText(text: string): string {
    return text
      .split(/(?<=\n\n)/)
      .filter((event) => !isUsageOnly(event))
      .join("");
  }
}

function isUsageOnly(event: string): boolean {
  const data = event
    .split("\n")
    .filter((line) => line.startsWith("data:"))
    .map((line) => line.slice(5).trimStart())
    .join("\n");
  if (!data || data === "[DONE]") return false;
  try {
    const parsed = JSON.parse(data) as { choices?: unknown; usage?: unknown };
    return Array.isArray(parsed.choices) && parsed.choices.length === 0 && !!parsed.usage;
  } catch {
    return false;
  }
}
