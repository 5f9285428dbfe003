import { z } from "zod";

/**
 * What the keeper's one-token generation (`POST /api/generate`, `stream: false`) answered, read
 * as ollama/ollama `server/routes.go` GenerateHandler writes it: `done: true` with the reason and
 * the timings of the request (ns). A load-only answer (`done_reason: "load"`, an empty prompt) or
 * an error is no generation. The server's timings say when its runner finished loading:
 * `load_duration` runs from the request's start to the loaded runner and `total_duration` to the
 * answer stamped `created_at`, so the load ended `total_duration − load_duration` before it.
 */

/** The most of the answer read: a one-token reply with its context is a few KB. */
export const ANSWER_MAX_BYTES = 64 * 1024;
/** No durations beyond an hour are taken from a server (a load never takes that long). */
const MAX_DURATION_NS = 3_600e9;

const AnswerSchema = z.object({
  done: z.literal(true),
  done_reason: z.string().optional(),
  error: z.undefined().optional(),
});
/** Timings are read apart: a server's odd figure costs the load time, not the answer. */
const duration = z.number().int().nonnegative().max(MAX_DURATION_NS);
const TimingsSchema = z.object({ created_at: z.string(), total_duration: duration, load_duration: duration });

export interface GenerationAnswer {
  /** when the server's runner was loaded, ms since the epoch; null when its answer does not say */
  loadedAt: number | null;
}

/** The answer of a generation that ran, or null (not a generation, not JSON, too large). */
export async function readGeneration(res: Response): Promise<GenerationAnswer | null> {
  const text = await boundedText(res, ANSWER_MAX_BYTES);
  if (text === null) return null;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return null;
  }
  const parsed = AnswerSchema.safeParse(body);
  if (!parsed.success) return null;
  const answer = parsed.data;
  if (answer.done_reason === "load" || answer.done_reason === "unload") return null;
  return { loadedAt: loadedAt(body) };
}

function loadedAt(body: unknown): number | null {
  const timings = TimingsSchema.safeParse(body);
  if (!timings.success) return null;
  const answer = timings.data;
  const created = Date.parse(answer.created_at);
  if (!Number.isFinite(created) || answer.load_duration > answer.total_duration) return null;
  return Math.round(created - (answer.total_duration - answer.load_duration) / 1e6);
}

/**
 * The server's time of the load as the lease keeps it: taken only within [`from`, `now`] (a
 * server's clock can be wrong; a load cannot come before the machine was rented nor after the
 * answer arrived), else the keeper's clock.
 */
export function loadedAtWithin(server: number | null | undefined, from: number, now: number): number {
  return server !== null && server !== undefined && server >= from && server <= now ? server : now;
}

async function boundedText(res: Response, maxBytes: number): Promise<string | null> {
  const reader = res.body?.getReader();
  if (!reader) return null;
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > maxBytes) return null;
      chunks.push(value);
    }
  } catch {
    return null;
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return new TextDecoder().decode(bytes);
}
