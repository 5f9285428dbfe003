import { z } from "zod";

export const ModelArchSchema = z.object({
  architecture: z.string().min(1),
  block_count: z.number().int().positive(),
  embedding_length: z.number().int().positive(),
  head_count: z.number().int().positive(),
  head_count_kv: z.number().int().positive(),
  key_length: z.number().int().positive().nullable(),
  value_length: z.number().int().positive().nullable(),
  context_length: z.number().int().positive().nullable(),
  /** `<arch>.vocab_size` or the tokenizer's length; feeds the graph estimate (0 when unknown) */
  vocab_size: z.number().int().nonnegative().nullable().optional(),
  /** mixture of experts (GGUF `<arch>.expert_*`); absent in facts cached before they were read */
  feed_forward_length: z.number().int().positive().nullable().optional(),
  expert_feed_forward_length: z.number().int().positive().nullable().optional(),
  expert_count: z.number().int().positive().max(4096).nullable().optional(),
  expert_used_count: z.number().int().positive().max(4096).nullable().optional(),
});

/** what the registry says, cached */
export const ModelFactsSchema = z.object({
  /** canonical reference */
  name: z.string(),
  /** the manifest's digest ("sha256:…"): sha256 of the manifest bytes, what Ollama's /api/tags shows (without the prefix) */
  digest: z.string(),
  /** sum of the application/vnd.ollama.image.model, …projector and …adapter layers */
  weights_bytes: z.number().int().nonnegative(),
  /** from the GGUF header of the model blob (byte-range read) */
  arch: ModelArchSchema,
});
export type ModelFacts = z.infer<typeof ModelFactsSchema>;
