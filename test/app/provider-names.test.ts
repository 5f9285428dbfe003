import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { parseSync } from "oxc-parser";
import { describe, expect, it } from "vitest";
import { providerCatalogue, providerNames, providerSecretNames } from "../../src/providers/catalogue";

// Provider knowledge lives in src/providers/: the rest of the worker asks the one list
// (src/providers/catalogue.ts) or the Provider interface, and never names a cloud itself. This
// reads every source file's code (comments are prose and free to name clouds) and fails on a
// provider's name, label or secret written anywhere else. Stated exemptions:
//   - src/providers/**: the adapters and the one list;
//   - src/sim/**: the simulated cloud itself (the Durable Object and routes behind the sim adapter);
//   - src/config.ts: each provider's own settings (base URLs, RunPod's transport and proxy
//     template) are named for their cloud, with their documented defaults; a provider's SECRET
//     is still only written in the one list there;
//   - the docs (README.md, docs/), tests and the CLI, which speak to people.
const ROOT = join(import.meta.dirname, "../..");
const SRC = join(ROOT, "src");

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return /\.tsx?$/.test(entry.name) ? [path] : [];
  });
}

/**
 * The identifiers, string literals (types' included), template text and JSX text of a file, each
 * with its line: the code, without its comments.
 */
function codeWords(path: string): { line: () => number; text: string }[] {
  const code = readFileSync(path, "utf8");
  const parsed = parseSync(path, code);
  if (parsed.errors.length > 0) throw new Error(`${path}: ${parsed.errors[0]?.message}`);
  const lineOf = (offset: number) => code.slice(0, offset).split("\n").length;
  const words: { line: () => number; text: string }[] = [];
  const visit = (node: unknown): void => {
    if (Array.isArray(node)) {
      for (const item of node) visit(item);
      return;
    }
    if (typeof node !== "object" || node === null) return;
    const n = node as Record<string, unknown> & { type?: string; start?: number };
    const text =
      n.type === "Identifier" || n.type === "JSXIdentifier" || n.type === "PrivateIdentifier"
        ? n.name
        : n.type === "Literal" && typeof n.value === "string"
          ? n.value
          : n.type === "TemplateElement"
            ? (n.value as { cooked?: string; raw: string }).raw
            : n.type === "JSXText"
              ? n.value
              : undefined;
    if (typeof text === "string") words.push({ line: () => lineOf(n.start ?? 0), text });
    for (const [key, value] of Object.entries(n)) if (key !== "parent") visit(value);
  };
  visit(parsed.program);
  return words;
}

const literal = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const secretPattern = new RegExp(providerSecretNames.map(literal).join("|"));
/** A cloud's name or label inside any word (`runpodUrl`, "Vast.ai"); the sim's name as a whole literal or an offer id. */
const namePatterns = providerNames.flatMap((name) => {
  const label = providerCatalogue[name].label;
  if (name === "sim") return [/^sim(:|$)/, new RegExp(`^${literal(label)}$`, "i")];
  return [new RegExp(literal(name), "i"), new RegExp(literal(label), "i")];
});

/** Any text that may hold a name: the sim's as a quoted literal, the others anywhere. */
const mayName = new RegExp(
  [
    ...providerSecretNames.map(literal),
    ...providerNames.flatMap((name) =>
      name === "sim"
        ? [`["'\`]sim[:"'\`]`, literal(providerCatalogue[name].label)]
        : [literal(name), literal(providerCatalogue[name].label)],
    ),
  ].join("|"),
  "i",
);

function violations(): string[] {
  const found: string[] = [];
  for (const path of sourceFiles(SRC)) {
    const file = relative(ROOT, path);
    if (file.startsWith("src/providers/") || file.startsWith("src/sim/")) continue;
    const settingsOnly = file === "src/config.ts";
    // Only a file whose text holds a name at all is parsed (the scan then tells code from comments).
    const text = readFileSync(path, "utf8");
    if (!mayName.test(text)) continue;
    for (const { line, text } of codeWords(path)) {
      const bad = secretPattern.test(text) || (!settingsOnly && namePatterns.some((p) => p.test(text)));
      if (bad) found.push(`${file}:${line()}: ${JSON.stringify(text.slice(0, 80))}`);
    }
  }
  return found;
}

describe("provider knowledge only in src/providers/", () => {
  it("no provider name, label or secret is written outside src/providers/ (exemptions above)", () => {
    expect(violations()).toEqual([]);
  });

  it("the scan sees code: a planted name in a string, an identifier and JSX is caught, a comment is not", () => {
    const probe = join(import.meta.dirname, "provider-names.fixture.tsx");
    const words = codeWords(probe).map((w) => w.text);
    const caught = words.filter((text) => secretPattern.test(text) || namePatterns.some((p) => p.test(text)));
    expect(caught).toEqual(["vastHost", "runpod", "VRAMFARM_TOKEN", "sim", "sim:4090:1", "Vast.ai"]);
  });
});
