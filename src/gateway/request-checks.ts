import { ApiError } from "../errors";

/**
 * What a gateway caller may not ask of a model lease's server (docs/architecture.md, "LLM
 * gateway"): a context above the one the lease was sized for (`options.num_ctx` reloads the runner
 * at that context, and the sizing no longer holds: it may spill to the CPU), and a `keep_alive`
 * that unloads the model (the machine runs with OLLAMA_KEEP_ALIVE=-1: the lease keeps it loaded).
 * Ollama reads keep_alive as seconds (a number) or a Go duration; negative means forever
 * (ollama/ollama `api/types.go` Duration.UnmarshalJSON). Everything else passes to the server.
 */

/** The Ollama routes whose bodies carry `options` and `keep_alive`. */
const CHECKED = new Set(["api/generate", "api/chat", "api/embed", "api/embeddings"]);

/** pure: why this body cannot go to the lease's server, or null. */
export function refusalOf(route: string, body: unknown, sizedContext: number | null): string | null {
  if (!CHECKED.has(route) || typeof body !== "object" || body === null || Array.isArray(body)) return null;
  const { options, keep_alive } = body as Record<string, unknown>;
  const numCtx =
    typeof options === "object" && options !== null ? (options as Record<string, unknown>).num_ctx : undefined;
  if (sizedContext !== null && typeof numCtx === "number" && numCtx > sizedContext)
    return `options.num_ctx ${numCtx} is above the ${sizedContext} tokens this lease was sized for: the model could spill out of GPU memory; rent a lease with a larger context_length`;
  const unloadsAfter = finiteKeepAlive(keep_alive);
  if (unloadsAfter !== null)
    return `keep_alive ${JSON.stringify(keep_alive)} would unload the model from the lease's GPU${unloadsAfter === 0 ? "" : ` after ${unloadsAfter} s`}; leave it out (the lease keeps the model loaded) or send -1`;
  return null;
}

/** Seconds until the model would unload, or null for none (absent, negative: forever, or not a duration). */
function finiteKeepAlive(value: unknown): number | null {
  if (typeof value === "number") return Number.isFinite(value) && value >= 0 ? value : null;
  if (typeof value !== "string") return null;
  const ms = goDurationMs(value.trim());
  return ms !== null && ms >= 0 ? ms / 1000 : null;
}

const UNIT_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Go's time.ParseDuration ("0", "0s", "1h30m", "-1m"), or null when it would refuse the text. */
function goDurationMs(text: string): number | null {
  if (text === "0" || text === "+0" || text === "-0") return 0;
  const match = /^([+-]?)((?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+$/.exec(text);
  if (!match) return null;
  let total = 0;
  for (const [, amount, unit] of text.matchAll(/(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/g))
    total += Number(amount) * UNIT_MS[unit!]!;
  return match[1] === "-" ? -total : total;
}

/**
 * The request with its body checked: read once (a JSON body of an Ollama route that carries
 * options), refused with a 400 when it asks what the lease cannot give, else sent on as read.
 */
export async function checkedRequest(request: Request, route: string, sizedContext: number | null): Promise<Request> {
  if (request.method !== "POST" || !CHECKED.has(route) || !request.body) return request;
  const text = await request.text();
  let body: unknown = null;
  try {
    body = JSON.parse(text);
  } catch {
    // Not JSON: the server answers that itself.
  }
  const refusal = refusalOf(route, body, sizedContext);
  if (refusal) throw new ApiError("invalid_request", refusal);
  const headers = new Headers(request.headers);
  headers.delete("content-length");
  return new Request(request.url, { method: request.method, headers, body: text, signal: request.signal });
}
