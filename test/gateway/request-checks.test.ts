import { describe, expect, it } from "vitest";
import { refusalOf } from "../../src/gateway/request-checks";

describe("what a gateway caller may not ask of a model lease's server (refusalOf)", () => {
  const generate = (extra: Record<string, unknown>) => refusalOf("api/generate", { model: "m", ...extra }, 4096);

  it("keep_alive as Ollama reads it: seconds or a Go duration; only negative (forever) keeps the model loaded", () => {
    for (const unloads of [0, 0.5, 300, "0", "0s", "0m0s", "1h30m", "1.5h", "300ms", ".5s", "+5m"])
      expect(generate({ keep_alive: unloads }), String(unloads)).toContain("would unload the model");
    for (const keeps of [-1, -0.5, "-1", "-1m", "-1h0m", undefined, null])
      expect(generate({ keep_alive: keeps }), String(keeps)).toBeNull();
    // Not a duration Ollama accepts: the server answers its own 400.
    for (const odd of ["5 minutes", "300", "m", "", true, {}])
      expect(generate({ keep_alive: odd }), String(odd)).toBeNull();
  });

  it("options.num_ctx above the sized context; at or below it, or sized by hand (unknown), passes", () => {
    expect(generate({ options: { num_ctx: 4097 } })).toContain("num_ctx 4097 is above the 4096 tokens");
    expect(generate({ options: { num_ctx: 4096, temperature: 1 } })).toBeNull();
    expect(generate({ options: { num_ctx: 512 } })).toBeNull();
    expect(refusalOf("api/chat", { options: { num_ctx: 1e6 } }, null)).toBeNull();
  });

  it("only the Ollama routes that carry options are read", () => {
    for (const route of ["api/generate", "api/chat", "api/embed", "api/embeddings"])
      expect(refusalOf(route, { keep_alive: 0 }, 4096), route).not.toBeNull();
    for (const route of ["api/tags", "api/show", "v1/chat/completions", "v1/embeddings"])
      expect(refusalOf(route, { keep_alive: 0, options: { num_ctx: 1e6 } }, 4096), route).toBeNull();
    expect(refusalOf("api/generate", [1, 2], 4096)).toBeNull();
    expect(refusalOf("api/generate", "text", 4096)).toBeNull();
  });
});
