import { describe, expect, it } from "vitest";
import { ModelRefTextSchema, parseModelRef } from "../../src/models/reference";

const ref = (text: string) => {
  const parsed = parseModelRef(text);
  if (!parsed.ok) throw new Error(`expected ${text} to parse: ${parsed.reason}`);
  return parsed.ref;
};
const reason = (text: string) => {
  const parsed = parseModelRef(text);
  if (parsed.ok) throw new Error(`expected ${text} to be refused, got ${parsed.ref.canonical}`);
  return parsed.reason;
};

const part80 = "8".repeat(80);
const part350 = "3".repeat(350);

describe("model references, as Ollama parses them (types/model/name.go)", () => {
  it("fills in the default host, namespace and tag", () => {
    expect(ref("qwen2.5:32b")).toEqual({
      host: "registry.ollama.ai",
      namespace: "library",
      name: "qwen2.5",
      tag: "32b",
      canonical: "qwen2.5:32b",
    });
    expect(ref("llama3.2")).toMatchObject({ name: "llama3.2", tag: "latest", canonical: "llama3.2:latest" });
  });

  it("reads namespace/name:tag and host/namespace/name:tag", () => {
    expect(ref("jmorgan/phi3:mini")).toMatchObject({ namespace: "jmorgan", name: "phi3", tag: "mini" });
    expect(ref("jmorgan/phi3:mini").canonical).toBe("jmorgan/phi3:mini");
    expect(ref("registry.example.com:5000/team/model:v1.2")).toEqual({
      host: "registry.example.com:5000",
      namespace: "team",
      name: "model",
      tag: "v1.2",
      canonical: "registry.example.com:5000/team/model:v1.2",
    });
    // a ":" before the last "/" is the host's port, not a tag
    expect(ref("host:port/namespace/model")).toMatchObject({ host: "host:port", tag: "latest" });
  });

  it("reads hf.co/<user>/<repo>:<quant> GGUF references", () => {
    expect(ref("hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M")).toEqual({
      host: "hf.co",
      namespace: "bartowski",
      name: "Llama-3.2-3B-Instruct-GGUF",
      tag: "Q4_K_M",
      canonical: "hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M",
    });
    expect(ref("hf.co/unsloth/gemma-3-4b-it-GGUF").tag).toBe("latest");
  });

  it("shows the shortest form, as Ollama's DisplayShortest, and keeps the case of everything but the host", () => {
    expect(ref("registry.ollama.ai/library/qwen2.5:32b").canonical).toBe("qwen2.5:32b");
    expect(ref("Registry.Ollama.AI/Library/Qwen2.5:32B").canonical).toBe("Qwen2.5:32B");
    expect(ref("registry.ollama.ai/someone/model:7b").canonical).toBe("someone/model:7b");
    expect(ref("HF.co/User/Repo:IQ3_M").canonical).toBe("hf.co/User/Repo:IQ3_M");
    expect(ref("host/library/model:tag").canonical).toBe("host/library/model:tag");
  });

  it("accepts the part lengths and characters Ollama accepts", () => {
    expect(ref("_why/_the/_lucky:_stiff").host).toBe("_why");
    expect(ref("h/nn/mm:t").canonical).toBe("h/nn/mm:t");
    expect(ref(`${part80}/${part80}/${part80}:${part80}`).tag).toBe(part80);
    expect(ref(`${part350}/${part80}/${part80}:${part80}`).host).toBe(part350);
    expect(ref("host:https/namespace/model:tag").host).toBe("host:https");
    expect(ref("dolphin-mistral:7b-v2.6-dpo-laser-q6_K").tag).toBe("7b-v2.6-dpo-laser-q6_K");
    expect(ref("  qwen2.5:7b  ").canonical).toBe("qwen2.5:7b");
  });

  it("strips Ollama's :local source suffix", () => {
    expect(ref("qwen2.5:32b:local").canonical).toBe("qwen2.5:32b");
    expect(ref("qwen2.5:LOCAL").canonical).toBe("qwen2.5:latest");
  });

  it.each([
    ["", "the model reference is empty"],
    ["   ", "the model reference is empty"],
    ["mm:", "the tag is empty"],
    ["n/m:", "the tag is empty"],
    ["/nn/mm", "the host is empty"],
    ["//", "the host is empty"],
    ["//mm", "the host is empty"],
    ["hh//", "the namespace is empty"],
    ["^", "the name must start with a letter, a digit or '_'"],
    ["-hh/nn/mm:tt", "the host must start with a letter, a digit or '_'"],
    ["hh/-nn/mm:tt", "the namespace must start with a letter, a digit or '_'"],
    ["hh/nn/-mm:tt", "the name must start with a letter, a digit or '_'"],
    ["hh/nn/mm:-tt", "the tag must start with a letter, a digit or '_'"],
    ["host/name:space/model:tag", "the namespace may hold only letters, digits, '_' and '-'"],
    ["host/name.space/model:tag", "the namespace may hold only letters, digits, '_' and '-'"],
    ["a/b/c/d:tag", "the host may hold only letters, digits, '_', '-', '.' and ':'"],
    ["qwen 2.5:32b", "the name may hold only letters, digits, '_', '-' and '.'"],
    ["qwen2.5:32b instruct", "the tag may hold only letters, digits, '_', '-' and '.'"],
    [`${part80}8:latest`, "the name is longer than 80 characters"],
    [`qwen:${part80}8`, "the tag is longer than 80 characters"],
    [`${part350}3/${part80}/${part80}:${part80}`, "the host is longer than 350 characters"],
    ["m@sha256:abc", "a digest (@sha256:…) is not accepted: give a tag"],
    [
      "https://registry.ollama.ai/library/qwen2.5:32b",
      "give the model without a scheme: [host/][namespace/]name[:tag]",
    ],
    ["gpt-oss:120b-cloud", "a cloud model runs on ollama.com, not on a rented GPU"],
    ["qwen3-coder:480b:cloud", "a cloud model runs on ollama.com, not on a rented GPU"],
    ["x".repeat(601), "the model reference is longer than 600 characters"],
  ])("refuses %j: %s", (text, expected) => {
    expect(reason(text)).toBe(expected);
  });

  it("validates request bodies with the reason as the message", () => {
    expect(ModelRefTextSchema.safeParse("qwen2.5:32b")).toEqual({ success: true, data: "qwen2.5:32b" });
    const refused = ModelRefTextSchema.safeParse("hh/nn/mm:-tt");
    expect(refused.success).toBe(false);
    expect(refused.error?.issues[0]?.message).toBe("the tag must start with a letter, a digit or '_'");
    expect(ModelRefTextSchema.safeParse(42).success).toBe(false);
  });
});
