import { parseModelRef } from "../../models/reference";

/**
 * What a simulated Ollama server knows about a model it pulled: the manifest from the registry
 * (its digest, the weights layer and the small ones) and, by name, what `/api/tags` details and
 * the GGUF header say. The profiles below are those real servers list for these tags; a model
 * without one gets a profile worked out from the size of its weights.
 */

export interface LibraryLayer {
  digest: string;
  size: number;
}

/** A manifest as the server stored it: the hex sha256 of its bytes, as `/api/tags` shows it. */
export interface StoredManifest {
  digest: string;
  model: LibraryLayer;
  small: LibraryLayer[];
}

export interface ModelProfile {
  family: string;
  parameter_size: string;
  quantization_level: string;
  /** the model's own maximum context */
  context_length: number;
  embedding_length: number;
  /** from the GGUF header: what the KV cache per token takes */
  block_count: number;
  head_count_kv: number;
  head_dim: number;
}

export interface LibraryModel extends StoredManifest {
  /** the name `/api/tags` lists it under (`llama3.2:1b`, `ns/name:tag`, `hf.co/user/repo:tag`) */
  name: string;
  profile: ModelProfile;
}

const PROFILES: Record<string, ModelProfile> = {
  "llama3.2:1b": {
    family: "llama",
    parameter_size: "1.2B",
    quantization_level: "Q8_0",
    context_length: 131_072,
    embedding_length: 2_048,
    block_count: 16,
    head_count_kv: 8,
    head_dim: 64,
  },
  "llama3.2:3b": {
    family: "llama",
    parameter_size: "3.2B",
    quantization_level: "Q4_K_M",
    context_length: 131_072,
    embedding_length: 3_072,
    block_count: 28,
    head_count_kv: 8,
    head_dim: 128,
  },
  "qwen2.5:7b": {
    family: "qwen2",
    parameter_size: "7.6B",
    quantization_level: "Q4_K_M",
    context_length: 32_768,
    embedding_length: 3_584,
    block_count: 28,
    head_count_kv: 4,
    head_dim: 128,
  },
  "llama3.1:8b": {
    family: "llama",
    parameter_size: "8.0B",
    quantization_level: "Q4_K_M",
    context_length: 131_072,
    embedding_length: 4_096,
    block_count: 32,
    head_count_kv: 8,
    head_dim: 128,
  },
  "qwen2.5:32b": {
    family: "qwen2",
    parameter_size: "32.8B",
    quantization_level: "Q4_K_M",
    context_length: 32_768,
    embedding_length: 5_120,
    block_count: 64,
    head_count_kv: 8,
    head_dim: 128,
  },
};
PROFILES["llama3.2:latest"] = PROFILES["llama3.2:3b"]!;
PROFILES["hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M"] = { ...PROFILES["llama3.2:3b"]!, parameter_size: "3.2B" };

/** A model nobody described: a llama-like shape that grows with its weights (about 4.8 bits a weight). */
function guessedProfile(weightsBytes: number): ModelProfile {
  const gb = weightsBytes / 1e9;
  return {
    family: "llama",
    parameter_size: `${(gb / 0.6).toFixed(1)}B`,
    quantization_level: "Q4_K_M",
    context_length: 131_072,
    embedding_length: 4_096,
    block_count: Math.min(128, Math.round(16 + 2.5 * gb)),
    head_count_kv: 8,
    head_dim: 128,
  };
}

/**
 * The name Ollama shows for a reference (model.ParseName(...).DisplayShortest(): the default
 * registry and `library/` dropped, `latest` when no tag), the same as the lease's canonical name.
 * Null when it is not a model name at all.
 */
export function displayName(reference: string): string | null {
  const parsed = parseModelRef(reference.trim());
  return parsed.ok ? parsed.ref.canonical : null;
}

export function libraryModel(name: string, manifest: StoredManifest): LibraryModel {
  return { ...manifest, name, profile: PROFILES[name] ?? guessedProfile(manifest.model.size) };
}

/** What `/api/tags` lists as the model's size: every blob of the manifest. */
export function manifestSize(model: StoredManifest): number {
  return model.model.size + model.small.reduce((sum, l) => sum + l.size, 0);
}

/**
 * What the loaded model takes (`/api/ps` `size`): the weights, an f16 KV cache for `contextLength`
 * tokens and the compute graph. For llama3.2:1b at 4,096 tokens this gives 1.514 GB, where Ollama
 * reports 1,514,584,145 bytes.
 */
export function loadedSize(model: LibraryModel, contextLength: number): number {
  const { block_count, head_count_kv, head_dim, embedding_length } = model.profile;
  const kv = 2 * block_count * head_count_kv * head_dim * 2 * contextLength;
  const graph = 7 * contextLength * embedding_length;
  return model.model.size + kv + graph;
}

/** Tokens per second a single GPU generates at (memory-bound: fewer for larger weights). */
export function tokensPerSecond(model: LibraryModel): number {
  return Math.max(5, Math.round(180 * (1.32e9 / model.model.size) ** 0.6));
}
