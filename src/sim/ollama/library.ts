import { parseModelRef } from "../../models/reference";
import type { ModelFacts } from "../../models/schema";

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
  head_count: number;
  head_count_kv: number;
  head_dim: number;
  vocab_size: number;
  /** the token embedding's and the output tensor's bytes where the model has its own output (untied) */
  untied?: { token_embd_bytes: number; output_bytes: number };
  /** `num_ctx` in the model's params layer: it wins over OLLAMA_CONTEXT_LENGTH */
  num_ctx?: number;
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
    head_count: 32,
    head_count_kv: 8,
    head_dim: 64,
    vocab_size: 128_256,
  },
  "llama3.2:3b": {
    family: "llama",
    parameter_size: "3.2B",
    quantization_level: "Q4_K_M",
    context_length: 131_072,
    embedding_length: 3_072,
    block_count: 28,
    head_count: 24,
    head_count_kv: 8,
    head_dim: 128,
    vocab_size: 128_256,
  },
  "qwen2.5:7b": {
    family: "qwen2",
    parameter_size: "7.6B",
    quantization_level: "Q4_K_M",
    context_length: 32_768,
    embedding_length: 3_584,
    block_count: 28,
    head_count: 28,
    head_count_kv: 4,
    head_dim: 128,
    vocab_size: 152_064,
  },
  "llama3.1:8b": {
    family: "llama",
    parameter_size: "8.0B",
    quantization_level: "Q4_K_M",
    context_length: 131_072,
    embedding_length: 4_096,
    block_count: 32,
    head_count: 32,
    head_count_kv: 8,
    head_dim: 128,
    vocab_size: 128_256,
  },
  "qwen2.5:32b": {
    family: "qwen2",
    parameter_size: "32.8B",
    quantization_level: "Q4_K_M",
    context_length: 32_768,
    embedding_length: 5_120,
    block_count: 64,
    head_count: 40,
    head_count_kv: 8,
    head_dim: 128,
    vocab_size: 152_064,
    untied: { token_embd_bytes: 437_944_320, output_bytes: 638_668_800 },
  },
  "qwen2.5:72b": {
    family: "qwen2",
    parameter_size: "72.7B",
    quantization_level: "Q4_K_M",
    context_length: 32_768,
    embedding_length: 8_192,
    block_count: 80,
    head_count: 64,
    head_count_kv: 8,
    head_dim: 128,
    vocab_size: 152_064,
    untied: { token_embd_bytes: 700_710_912, output_bytes: 1_021_870_080 },
  },
};
PROFILES["llama3.2:latest"] = PROFILES["llama3.2:3b"]!;
PROFILES["hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M"] = { ...PROFILES["llama3.2:3b"]!, parameter_size: "3.2B" };

/** The profile of a model the library describes (by the name `/api/tags` lists it under). */
export function libraryProfile(name: string): ModelProfile | undefined {
  return PROFILES[name];
}

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
    head_count: 32,
    head_count_kv: 8,
    head_dim: 128,
    vocab_size: 128_256,
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
 * The model as the runner's rule reads it (src/models/runner.ts): the profile's GGUF facts, the
 * same the fake registry's headers carry (so the worker and the machine size alike).
 */
export function profileFacts(model: LibraryModel): ModelFacts {
  const p = model.profile;
  return {
    name: model.name,
    digest: `sha256:${model.digest}`,
    weights_bytes: model.model.size,
    arch: {
      architecture: p.family,
      block_count: p.block_count,
      embedding_length: p.embedding_length,
      head_count: p.head_count,
      head_count_kv: p.head_count_kv,
      key_length: p.head_dim,
      value_length: p.head_dim,
      context_length: p.context_length,
      vocab_size: p.vocab_size,
      token_embd_bytes: p.untied?.token_embd_bytes ?? null,
      output_bytes: p.untied?.output_bytes ?? null,
      output_tied: p.untied === undefined,
      sliding_window: null,
      sliding_window_pattern: null,
      expert_count: null,
      expert_used_count: null,
      params_num_ctx: p.num_ctx ?? null,
    },
  };
}

/** Tokens per second a single GPU generates at (memory-bound: fewer for larger weights). */
export function tokensPerSecond(model: LibraryModel): number {
  return Math.max(5, Math.round(180 * (1.32e9 / model.model.size) ** 0.6));
}
