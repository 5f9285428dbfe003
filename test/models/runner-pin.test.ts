import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { RUNNER_LLAMA_CPP_VERSION, RUNNER_OLLAMA_VERSION } from "../../src/models/runner";

/**
 * The sizing rule is the rule of one Ollama release: OLLAMA_IMAGE and the rule move together.
 * Moving the image to another tag without rewriting the rule (and its version) fails here.
 */
const root = join(__dirname, "..", "..");
const tagOf = (image: string) => image.slice(image.lastIndexOf(":") + 1);

describe("OLLAMA_IMAGE and the sizing rule move together", () => {
  it("the default OLLAMA_IMAGE is the release the rule is written from", () => {
    const config = readFileSync(join(root, "src", "config.ts"), "utf8");
    const image = /OLLAMA_IMAGE: z[\s\S]*?\.default\("([^"]+)"\)/.exec(config)?.[1];
    expect(image && tagOf(image)).toBe(RUNNER_OLLAMA_VERSION);
  });

  it("wrangler.toml pins the same release", () => {
    const toml = readFileSync(join(root, "wrangler.toml"), "utf8");
    const image = /^OLLAMA_IMAGE\s*=\s*"([^"]+)"/m.exec(toml)?.[1];
    expect(image && tagOf(image)).toBe(RUNNER_OLLAMA_VERSION);
  });

  it("docs/models.md says which release and llama.cpp build the rule is for", () => {
    const doc = readFileSync(join(root, "docs", "models.md"), "utf8");
    expect(doc).toContain(`ollama/ollama:${RUNNER_OLLAMA_VERSION}`);
    expect(doc).toContain(`llama.cpp \`${RUNNER_LLAMA_CPP_VERSION}\``);
  });
});
