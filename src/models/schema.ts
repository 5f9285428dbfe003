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
  /**
   * The runner's facts (docs/models.md#the-runners-rule), from the header's tensor list and its
   * sliding-window and expert keys. A row cached before they were read lacks them and is read again.
   */
  token_embd_bytes: z.number().int().nonnegative().nullable().optional(),
  /** the output tensor's bytes (null: none, or a type the reader does not know) */
  output_bytes: z.number().int().nonnegative().nullable().optional(),
  /** no `output.weight`: the output layer shares the token embedding (so it is on the GPU too) */
  output_tied: z.boolean().nullable().optional(),
  /** `<arch>.attention.sliding_window` */
  sliding_window: z.number().int().nonnegative().nullable().optional(),
  /** `<arch>.attention.sliding_window_pattern` when it is a number */
  sliding_window_pattern: z.number().int().nonnegative().nullable().optional(),
  /** `<arch>.expert_count` and `<arch>.expert_used_count` (mixture of experts) */
  expert_count: z.number().int().nonnegative().max(4096).nullable().optional(),
  expert_used_count: z.number().int().nonnegative().max(4096).nullable().optional(),
  /** `num_ctx` from the manifest's params layer: it overrides OLLAMA_CONTEXT_LENGTH (ollama `server/routes.go` line 141) */
  params_num_ctx: z.number().int().positive().nullable().optional(),
  /** dense and expert FFN lengths (GGUF `<arch>.feed_forward_length`, `<arch>.expert_feed_forward_length`) */
  feed_forward_length: z.number().int().positive().nullable().optional(),
  expert_feed_forward_length: z.number().int().positive().nullable().optional(),
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
