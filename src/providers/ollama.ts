import { z } from "zod";
import { USER_AGENT } from "../version";
import { readGeneration } from "./ollama-answer";
import type { OllamaProbe } from "./types";

/** The port an Ollama server listens on in every template that runs one. */
export const OLLAMA_PORT = 11434;

const VersionSchema = z.object({ version: z.string() });

/**
 * True when an Ollama server answers `GET {baseUrl}/api/version` with its version. A proxy that
 * answers before the server listens (RunPod's proxy: 502, or 524 after 100 s) is "not yet".
 */
export async function ollamaAnswers(
  baseUrl: string,
  fetchImpl: typeof fetch = (i, init) => fetch(i, init),
  timeoutMs = 5_000,
): Promise<boolean> {
  try {
    const res = await fetchImpl(`${baseUrl.replace(/\/+$/, "")}/api/version`, {
      headers: { "User-Agent": USER_AGENT, Accept: "application/json" },
      signal: AbortSignal.timeout(timeoutMs),
    });
    if (res.status !== 200) {
      await res.body?.cancel();
      return false;
    }
    return VersionSchema.safeParse(await res.json()).success;
  } catch {
    return false;
  }
}

const TagsSchema = z.object({
  models: z.array(z.object({ name: z.string(), model: z.string().optional(), digest: z.string() })).nullable(),
});
const PsSchema = z.object({
  models: z
    .array(
      z.object({
        name: z.string(),
        model: z.string().optional(),
        digest: z.string(),
        size: z.number(),
        size_vram: z.number(),
      }),
    )
    .nullable(),
});
const PullLineSchema = z.object({
  status: z.string().optional(),
  error: z.string().optional(),
  total: z.number().optional(),
  completed: z.number().optional(),
});

/** The names Ollama lists a model under: `llama3.2:1b` is also `library/llama3.2:1b`, `…:latest` the bare name. */
export function sameModel(listed: string, wanted: string): boolean {
  const norm = (name: string) => {
    const withTag = /:[^/]+$/.test(name) ? name : `${name}:latest`;
    return withTag.replace(/^(registry\.ollama\.ai\/)?(library\/)?/, "");
  };
  return norm(listed) === norm(wanted);
}

export interface ProbeOptions {
  /** how long a pull stream is read before letting go (the download goes on in the server) */
  pullWindowMs?: number;
  /** how long the one-token generation (which loads the model first) may take */
  generateTimeoutMs?: number;
  timeoutMs?: number;
}

/**
 * How far the Ollama server at `baseUrl` is with `model`. The machine's own start command pulls
 * the model (ollama-start.ts); a model not yet in `/api/tags` gets a pull request here too, read
 * for `pullWindowMs` and let go: it joins the download the container waits on (same digest, same
 * download in ollama/ollama `server/download.go`) and gives its progress, or Ollama's error at once for a model
 * that cannot be had. Letting go cancels nothing while the container's pull still waits. A
 * pulled model is loaded and checked with a one-token generation; `/api/ps` then says whether it
 * all sits on the GPUs.
 */
export async function probeOllama(
  baseUrl: string,
  model: string | null,
  fetchImpl: typeof fetch = (i, init) => fetch(i, init),
  options: ProbeOptions = {},
): Promise<OllamaProbe> {
  const base = baseUrl.replace(/\/+$/, "");
  const timeoutMs = options.timeoutMs ?? 5_000;
  const call = (path: string, init: RequestInit = {}, ms = timeoutMs) =>
    fetchImpl(`${base}${path}`, {
      ...init,
      headers: { "User-Agent": USER_AGENT, Accept: "application/json", "Content-Type": "application/json" },
      signal: AbortSignal.timeout(ms),
    });
  if (model === null)
    return (await ollamaAnswers(base, fetchImpl, timeoutMs)) ? { phase: "ready", digest: "" } : { phase: "down" };
  let tags: z.infer<typeof TagsSchema>;
  try {
    const res = await call("/api/tags");
    if (res.status !== 200) {
      await res.body?.cancel();
      return { phase: "down" };
    }
    const parsed = TagsSchema.safeParse(await res.json());
    if (!parsed.success) return { phase: "down" };
    tags = parsed.data;
  } catch {
    return { phase: "down" };
  }
  const pulled = (tags.models ?? []).find((m) => sameModel(m.name, model) || sameModel(m.model ?? "", model));
  if (!pulled) return pull(call, model, options.pullWindowMs ?? 3_000);

  const generated = await call(
    "/api/generate",
    {
      method: "POST",
      body: JSON.stringify({ model, prompt: "hi", stream: false, keep_alive: -1, options: { num_predict: 1 } }),
    },
    options.generateTimeoutMs ?? 20_000,
  ).catch(() => null);
  if (!generated) return { phase: "loading", digest: pulled.digest };
  if (generated.status !== 200) {
    const error = await errorOf(generated);
    // A model the server cannot load (too large for host and GPU, a broken blob) says so here.
    return generated.status >= 500 && error ? { phase: "failed", error } : { phase: "loading", digest: pulled.digest };
  }
  // Running means a generation of the model answered: a 200 that is not one (a load-only
  // answer, an error line, a body cut off) is still loading.
  const answer = await readGeneration(generated);
  if (!answer) return { phase: "loading", digest: pulled.digest };
  try {
    const res = await call("/api/ps");
    const loaded = PsSchema.safeParse(res.status === 200 ? await res.json() : null);
    const entry = loaded.success ? (loaded.data.models ?? []).find((m) => sameModel(m.name, model)) : undefined;
    if (!entry) return { phase: "loading", digest: pulled.digest };
    if (entry.size_vram < entry.size)
      return { phase: "spilled", digest: pulled.digest, size: entry.size, size_vram: entry.size_vram };
    return { phase: "ready", digest: pulled.digest, loaded_at: answer.loadedAt };
  } catch {
    return { phase: "loading", digest: pulled.digest };
  }
}

/** Reads a pull's NDJSON progress for `windowMs`: an error line is final, the rest is progress. */
async function pull(
  call: (path: string, init?: RequestInit, ms?: number) => Promise<Response>,
  model: string,
  windowMs: number,
): Promise<OllamaProbe> {
  let res: Response;
  try {
    res = await call("/api/pull", { method: "POST", body: JSON.stringify({ model, stream: true }) }, windowMs + 5_000);
  } catch {
    return { phase: "pulling", completed: null, total: null };
  }
  if (res.status !== 200) {
    const error = await errorOf(res);
    return error ? { phase: "failed", error } : { phase: "pulling", completed: null, total: null };
  }
  const reader = res.body?.pipeThrough(new TextDecoderStream()).getReader();
  const progress: { completed: number | null; total: number | null } = { completed: null, total: null };
  if (!reader) return { phase: "pulling", ...progress };
  const until = Date.now() + windowMs;
  let buffer = "";
  try {
    while (Date.now() < until) {
      const next = await Promise.race([
        reader.read(),
        new Promise<null>((resolve) => setTimeout(() => resolve(null), Math.max(1, until - Date.now()))),
      ]);
      if (next === null || next.done) break;
      buffer += next.value;
      const lines = buffer.split("\n");
      buffer = lines.pop() ?? "";
      for (const line of lines) {
        const parsed = PullLineSchema.safeParse(safeJson(line));
        if (!parsed.success) continue;
        if (parsed.data.error) return { phase: "failed", error: parsed.data.error };
        // A download that ended inside this read was still a download: it shows as pulling (100 %),
        // and the next look loads the model with a generation.
        if (parsed.data.status === "success")
          return progress.total
            ? { phase: "pulling", completed: progress.total, total: progress.total }
            : { phase: "loading", digest: "" };
        if (parsed.data.total) {
          progress.total = parsed.data.total;
          progress.completed = parsed.data.completed ?? 0;
        }
      }
    }
  } finally {
    // Letting go of the stream ends this pull request only; the download goes on in the server.
    await reader.cancel().catch(() => undefined);
  }
  return { phase: "pulling", ...progress };
}

async function errorOf(res: Response): Promise<string | null> {
  try {
    const body = (await res.json()) as { error?: unknown };
    return typeof body.error === "string" ? body.error.slice(0, 500) : null;
  } catch {
    return null;
  }
}

function safeJson(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return null;
  }
}
