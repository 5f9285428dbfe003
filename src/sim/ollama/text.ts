import { type LibraryModel, tokensPerSecond } from "./library";

/** Roughly how a BPE tokenizer cuts English: words with their leading space, punctuation alone. */
export function tokenize(text: string): string[] {
  return text.match(/\s*[\p{L}\p{N}'’]+|\s*[^\p{L}\p{N}\s]|\s+$/gu) ?? [];
}

/** What the chat template adds around the messages (header tokens, the default system prompt). */
const TEMPLATE_TOKENS = 20;
const TOKENS_PER_MESSAGE = 5;

export function promptTokens(messages: { content: string }[]): number {
  if (messages.length === 0) return 0;
  return (
    TEMPLATE_TOKENS +
    messages.reduce((sum, m) => sum + TOKENS_PER_MESSAGE + tokenize(m.content).length, 0) -
    TOKENS_PER_MESSAGE
  );
}

/** The reply of a simulated model: short, deterministic, and naming what it was asked. */
export function replyText(model: string, prompt: string): string {
  const asked = prompt.replace(/\s+/g, " ").trim();
  const quoted = asked.length > 60 ? `${asked.slice(0, 57)}...` : asked;
  return `Hello from ${model} on a simulated GPU. You said: "${quoted}".`;
}

export interface Generation {
  /** the tokens produced, in order */
  tokens: string[];
  done_reason: "stop" | "length";
  prompt_eval_count: number;
  eval_count: number;
  /** ns */
  prompt_eval_duration: number;
  eval_duration: number;
  load_duration: number;
  total_duration: number;
}

/**
 * One generation: the reply's tokens up to `numPredict`, with the timings a GPU of this model's
 * speed would report (durations in ns, as Ollama gives them). `slowdown` > 1 when part of the model
 * runs on the CPU.
 */
export function generate(
  model: LibraryModel,
  name: string,
  messages: { content: string }[],
  numPredict: number | null,
  loadMs: number,
  slowdown = 1,
): Generation {
  const last = messages.at(-1)?.content ?? "";
  const all = tokenize(replyText(name, last));
  const limit = numPredict !== null && numPredict >= 0 ? numPredict : all.length;
  const tokens = all.slice(0, limit);
  const tps = tokensPerSecond(model) / slowdown;
  const prompt = promptTokens(messages);
  const prompt_eval_duration = Math.round((prompt / (tps * 10)) * 1e9);
  // The runner's decode clock starts at the first sampled token: n tokens, n − 1 timed.
  // One token is timed as a microsecond, the clock's grain.
  const eval_duration = tokens.length > 1 ? Math.round(((tokens.length - 1) / tps) * 1e9) : tokens.length * 1_000;
  const load_duration = loadMs > 0 ? loadMs * 1e6 : 4_571_000;
  return {
    tokens,
    done_reason: tokens.length < all.length ? "length" : "stop",
    prompt_eval_count: prompt,
    eval_count: tokens.length,
    prompt_eval_duration,
    eval_duration,
    load_duration,
    total_duration: load_duration + prompt_eval_duration + eval_duration + 1_203_000,
  };
}

/** A small deterministic number from text (ids, context tokens). */
export function hashOf(text: string): number {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return h >>> 0;
}
