import { z } from "zod";

/**
 * Ollama model references, parsed as Ollama's own parser does (docs/models.md#references):
 * `[host/][namespace/]name[:tag]`, defaults `registry.ollama.ai`, `library`, `latest`.
 */
export interface ModelRef {
  /** registry host, e.g. "registry.ollama.ai" or "hf.co" */
  host: string;
  /** "library" for "qwen2.5:32b" */
  namespace: string;
  /** "qwen2.5" */
  name: string;
  /** "32b" (default "latest") */
  tag: string;
  /** how users and the lease show it: "qwen2.5:32b", "ns/name:tag", "hf.co/user/repo:q4_k_m" */
  canonical: string;
}

export const DEFAULT_REGISTRY_HOST = "registry.ollama.ai";
const DEFAULT_NAMESPACE = "library";
const DEFAULT_TAG = "latest";

type Part = "host" | "namespace" | "name" | "tag";

const MAX_LENGTH: Record<Part, number> = { host: 350, namespace: 80, name: 80, tag: 80 };

const startsWell = (c: string) => /^[A-Za-z0-9_]$/.test(c);

/** Which characters a part may hold after its first (alphanumeric or "_"); "-" and "_" always. */
const ALLOWED: Record<Part, { pattern: RegExp; text: string }> = {
  host: { pattern: /^[A-Za-z0-9_.:-]*$/, text: "letters, digits, '_', '-', '.' and ':'" },
  namespace: { pattern: /^[A-Za-z0-9_-]*$/, text: "letters, digits, '_' and '-'" },
  name: { pattern: /^[A-Za-z0-9_.-]*$/, text: "letters, digits, '_', '-' and '.'" },
  tag: { pattern: /^[A-Za-z0-9_.-]*$/, text: "letters, digits, '_', '-' and '.'" },
};

function partProblem(part: Part, value: string | null): string | null {
  if (value === null || value === "") return `the ${part} is empty`;
  if (value.length > MAX_LENGTH[part]) return `the ${part} is longer than ${MAX_LENGTH[part]} characters`;
  if (!startsWell(value[0] ?? "")) return `the ${part} must start with a letter, a digit or '_'`;
  if (!ALLOWED[part].pattern.test(value.slice(1))) return `the ${part} may hold only ${ALLOWED[part].text}`;
  return null;
}

/** Cuts at the last `sep`; an empty side is null (a part the separator promised but that is missing). */
function cutLast(text: string, sep: string): [string | null, string | null] | null {
  const at = text.lastIndexOf(sep);
  if (at < 0) return null;
  return [text.slice(0, at) || null, text.slice(at + 1) || null];
}

/** Ollama's `:cloud` / `-cloud` source suffix names a model served by ollama.com, and `:local` is stripped. */
function sourceSuffix(text: string): { base: string; cloud: boolean } {
  const at = text.lastIndexOf(":");
  if (at < 0) return { base: text, cloud: false };
  const suffix = text.slice(at + 1).toLowerCase();
  if (suffix === "cloud") return { base: text.slice(0, at), cloud: true };
  if (suffix === "local") return { base: text.slice(0, at), cloud: false };
  if (!suffix.includes("/") && suffix.endsWith("-cloud")) return { base: text, cloud: true };
  return { base: text, cloud: false };
}

function canonicalOf(host: string, namespace: string, name: string, tag: string): string {
  if (host !== DEFAULT_REGISTRY_HOST) return `${host}/${namespace}/${name}:${tag}`;
  if (namespace.toLowerCase() !== DEFAULT_NAMESPACE) return `${namespace}/${name}:${tag}`;
  return `${name}:${tag}`;
}

/** null + reason when malformed */
export function parseModelRef(text: string): { ok: true; ref: ModelRef } | { ok: false; reason: string } {
  const fail = (reason: string) => ({ ok: false as const, reason });
  const trimmed = text.trim();
  if (trimmed === "") return fail("the model reference is empty");
  if (trimmed.length > 600) return fail("the model reference is longer than 600 characters");
  if (trimmed.includes("://")) return fail("give the model without a scheme: [host/][namespace/]name[:tag]");
  if (trimmed.includes("@")) return fail("a digest (@sha256:…) is not accepted: give a tag");
  const { base, cloud } = sourceSuffix(trimmed);
  if (cloud) return fail("a cloud model runs on ollama.com, not on a rented GPU");

  let rest: string | null = base;
  let tag: string | null = DEFAULT_TAG;
  // "/" cannot be in a tag, so a ":" after the last "/" starts the tag ("host:port/ns/name" has none).
  if (base.lastIndexOf(":") > base.lastIndexOf("/")) [rest, tag] = cutLast(base, ":") ?? [base, null];
  let namespace: string | null = DEFAULT_NAMESPACE;
  let host: string | null = DEFAULT_REGISTRY_HOST;
  let name: string | null = rest;
  const byName = rest === null ? null : cutLast(rest, "/");
  if (byName) {
    [namespace, name] = byName;
    const byNamespace = namespace === null ? null : cutLast(namespace, "/");
    if (byNamespace) [host, namespace] = byNamespace;
  }

  for (const [part, value] of [
    ["host", host],
    ["namespace", namespace],
    ["name", name],
    ["tag", tag],
  ] as const) {
    const problem = partProblem(part, value);
    if (problem) return fail(problem);
  }
  // Host names compare without case (Ollama compares every part with EqualFold); the rest is sent as given.
  const ref = { host: host!.toLowerCase(), namespace: namespace!, name: name!, tag: tag! };
  return { ok: true, ref: { ...ref, canonical: canonicalOf(ref.host, ref.namespace, ref.name, ref.tag) } };
}

/** zod string schema for request bodies: refine with parseModelRef, message = reason */
export const ModelRefTextSchema: z.ZodType<string, string> = z.string().superRefine((text, ctx) => {
  const parsed = parseModelRef(text);
  if (!parsed.ok) ctx.addIssue({ code: "custom", message: parsed.reason });
});
