import { ModelNotFoundError } from "../../models/errors";
import { parseModelRef } from "../../models/reference";
import { DEFAULT_REGISTRIES } from "../../models/registries";
import { fetchManifest, MEDIA_TYPE, manifestUrl, RegistryNotAllowedError } from "../../models/registry";
import type { StoredManifest } from "./library";

/** Ollama's error when the registry has no such manifest (os.ErrNotExist, ollama/ollama `server/images.go`) */
export const MANIFEST_UNKNOWN = "pull model manifest: file does not exist";

export type ManifestAnswer = ({ ok: true } & StoredManifest) | { ok: false; error: string };

/**
 * The manifest a machine's `ollama pull` fetches, from the registry the worker sizes models from
 * (OLLAMA_REGISTRY_URL; hf.co for hf.co references), with Ollama's own error texts.
 */
export async function pullManifest(
  reference: string,
  registryUrl: string,
  fetchImpl: typeof fetch,
): Promise<ManifestAnswer> {
  const parsed = parseModelRef(reference.trim());
  if (!parsed.ok) return { ok: false, error: "invalid model name" };
  const config = { ollamaRegistryUrl: registryUrl, ollamaRegistries: [...DEFAULT_REGISTRIES] };
  try {
    const manifest = await fetchManifest(parsed.ref, config, fetchImpl);
    const weights = manifest.layers.find((l) => l.mediaType === MEDIA_TYPE.model);
    if (!weights) {
      // ollama/ollama `server/images.go`: a safetensors model needs the MLX runtime, which a CUDA image lacks.
      return { ok: false, error: "this model requires MLX support, but the MLX runtime is not available" };
    }
    return {
      ok: true,
      digest: manifest.digest.replace(/^sha256:/, ""),
      model: { digest: weights.digest, size: weights.size },
      small: manifest.layers.filter((l) => l !== weights).map((l) => ({ digest: l.digest, size: l.size })),
    };
  } catch (cause) {
    if (cause instanceof ModelNotFoundError || cause instanceof RegistryNotAllowedError)
      return { ok: false, error: MANIFEST_UNKNOWN };
    const url = manifestUrl(parsed.ref, config);
    return { ok: false, error: `pull model manifest: Get "${url}": dial tcp: i/o timeout` };
  }
}
