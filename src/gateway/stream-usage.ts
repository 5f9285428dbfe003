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
 * Passes SSE events on as each completes, dropping the usage-only chunk the gateway asked for.
 * Only an event's unfinished tail is held, so nothing waits longer than its own last byte.
 */
export class InjectedUsageFilter {
  private pending = "";
  private readonly decoder = new TextDecoder();

  push(chunk: Uint8Array): Uint8Array | null {
    this.pending += this.decoder.decode(chunk, { stream: true });
    const cut = this.pending.lastIndexOf("\n\n");
    if (cut === -1) return null;
    const complete = this.pending.slice(0, cut + 2);
    this.pending = this.pending.slice(cut + 2);
    return this.emit(complete);
  }

  end(): Uint8Array | null {
    const rest = this.pending + this.decoder.decode();
    this.pending = "";
    return rest ? this.emit(rest) : null;
  }

  private emit(text: string): Uint8Array | null {
    const kept = text
      .split(/(?<=\n\n)/)
      .filter((event) => !isUsageOnly(event))
      .join("");
    return kept ? encoder.encode(kept) : null;
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
