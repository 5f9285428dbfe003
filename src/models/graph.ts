/**
 * The compute graph's size, per architecture, as Ollama's `GraphSize` computes it
 * (ollama/ollama fs/ggml/ggml.go; docs/models.md#the-compute-graph cites the lines). Integer
 * divisions are Go's (floor), so the figures match Ollama's to the byte.
 */

export interface GraphShape {
  architecture: string;
  /** embedding_length */
  e: number;
  /** attention.head_count */
  h: number;
  /** attention.head_count_kv */
  hkv: number;
  /** embedding / head_count (Ollama's EmbeddingHeadCountMax) */
  headDim: number;
  /** attention.key_length, else embedding / head_count (EmbeddingHeadCountK) */
  headDimK: number;
  /** vocabulary size */
  v: number;
  /** the context Ollama runs with */
  c: number;
  /** min(context, num_batch) */
  b: number;
  /** the KV cache of all layers, bytes (the fallback's input) */
  kvTotal: number;
}

export interface GraphSize {
  /** the graph when every layer is on the GPU */
  full: number;
  /** the graph when layers are split (Ollama uses it on every card of a multi-GPU load) */
  partial: number;
}

const div = (a: number, b: number) => Math.floor(a / b);
const max = Math.max;

/** `embedding*vocab*105/128`: what Ollama adds for the output layer when the load is split */
const outputShare = ({ e, v }: GraphShape) => div(e * v * 105, 128);

type Formula = (s: GraphShape) => GraphSize;

// ollama/ollama `fs/ggml/ggml.go` lines 712-723 (the Mixtral branches need tensor shapes the header's keys do not carry).
const llama: Formula = (s) => {
  const { e, h, hkv, headDim, v, c, b } = s;
  return {
    full: max(4 * b * (1 + 4 * e + c * (1 + h)), 4 * b * (e + v)),
    partial:
      4 * b * e +
      max(
        4 * b * (1 + e + max(c, e)) + div(e * e * 9, 16) + 4 * c * (b * h + headDim * hkv),
        4 * b * (e + v) + outputShare(s),
      ),
  };
};

// ggml.go lines 774-790 (gemma3's sliding-window KV saving is left out: the estimate stays above).
const gemma: Formula = (s) => {
  const { e, h, headDimK: k, v, c, b } = s;
  const scale = s.architecture === "gemma3n" ? 4 : 1;
  return {
    full: scale * max(4 * b * (e + v), 4 * b * (2 + c + c * h + 2 * e + 2 * k * h)),
    partial:
      scale *
      max(
        4 * e * b + outputShare(s) + 4 * v * b,
        4 * b * (2 * e + 1 + 2 * k * h + c + c * h) + 4 * k * c * 8 + div(e * k * h * 9, 16),
      ),
  };
};

// ggml.go lines 805-814
const commandR: Formula = (s) => {
  const { e, h, v, c, b } = s;
  return {
    full: max(4 * b * (e + v), 4 * b * (2 + 4 * e + c * (1 + h))),
    partial: max(4 * b * (e + v) + outputShare(s), 4 * b * (1 + 2 * e + c * (1 + h)) + 4 * e * c + div(e * e * 9, 16)),
  };
};

// ggml.go lines 815-824
const qwen2: Formula = (s) => {
  const { e, h, v, c, b } = s;
  return {
    full: max(4 * b * (e + v), 4 * b * (1 + 2 * e + c + c * h)),
    partial: max(4 * b * (e + v) + outputShare(s), 4 * (b * (1 + 2 * e + c * (1 + h)) + e * (1 + c))),
  };
};

// ggml.go lines 825-834
const phi2: Formula = (s) => {
  const { e, h, v, c, b } = s;
  return {
    full: max(4 * b * (e + v), 4 * b * (1 + 4 * e + c + c * h)),
    partial: max(4 * b * (2 * e + v) + outputShare(s), 4 * b * (2 + 3 * e + c + c * h)),
  };
};

// ggml.go lines 835-840
const stablelm: Formula = ({ e, h, v, c, b }) => {
  const full = 4 * b * (c * (1 + h) + 3 * e + 2);
  return { full, partial: max(4 * b * (v + 2 * e), full) };
};

// ggml.go lines 841-850
const deepseek2: Formula = (s) => {
  const { e, hkv, headDimK: k, v, c, b } = s;
  return {
    full: max(4 * b * (3 * e + v), 4 * b * (3 * e + 2 + c * (1 + hkv) + 2 * k * hkv)),
    partial: max(
      4 * b * (3 * e + v) + outputShare(s),
      4 * b * (2 * e + 1 + 2 * k * hkv + c + c * hkv) + 4 * k * c * hkv + div(e * k * hkv * 9, 16),
    ),
  };
};

// ggml.go lines 851-853 (the qkv-bias branch needs a tensor shape)
const chatglm: Formula = (s) => {
  const full = 4 * s.b * (s.e + s.v);
  return { full, partial: full + outputShare(s) };
};

const FORMULAS: Record<string, Formula> = {
  llama,
  llama4: llama,
  gemma,
  gemma2: gemma,
  gemma3: gemma,
  gemma3n: gemma,
  "command-r": commandR,
  qwen2,
  phi2,
  stablelm,
  deepseek2,
  chatglm,
};

/**
 * An architecture GraphSize has no case for: Ollama's own fallback, `gqa × kv / 6` for both
 * (ollama/ollama `llm/memory.go` lines 238-248), gqa = head_count / head_count_kv in whole numbers.
 */
const fallback: Formula = ({ h, hkv, kvTotal }) => {
  const partial = div(div(h, max(hkv, 1)) * kvTotal, 6);
  return { full: partial, partial };
};

export function graphSize(shape: GraphShape): GraphSize {
  const formula = FORMULAS[shape.architecture];
  const size = formula ? formula(shape) : { full: 0, partial: 0 };
  // ollama/ollama `llm/memory.go` lines 238-248: a zero from GraphSize falls back, and a zero full graph takes the partial one.
  if (size.partial === 0) return fallback(shape);
  return { full: size.full || size.partial, partial: size.partial };
}
