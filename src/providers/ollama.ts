import { z } from "zod";
import { USER_AGENT } from "../version";

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
