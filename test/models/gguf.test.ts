import { describe, expect, it } from "vitest";
import { type ChunkSource, readGgufArch } from "../../src/models/gguf";
import { FAKE_MODELS, type GgufKv, ggufHeader, tokenizerKvs } from "../fakes/ollama-registry";

const MIB = 1024 * 1024;

/** Serves `bytes` in chunks of `size` and counts what it handed out. */
function chunks(bytes: Uint8Array, size: number): ChunkSource & { served: () => number } {
  let at = 0;
  const next = async () => {
    if (at >= bytes.length) return null;
    const chunk = bytes.slice(at, at + size);
    at += chunk.length;
    return chunk;
  };
  return Object.assign(next, { served: () => at });
}

const headOf = (model: { layers: readonly { head?: () => Uint8Array }[] }) => model.layers[0]!.head!();

const u32 = (value: number) => ({ type: "u32", value }) as const;
const minimal = (extra: GgufKv[] = []): GgufKv[] => [
  ["general.architecture", { type: "string", value: "llama" }],
  ["llama.block_count", u32(16)],
  ["llama.embedding_length", u32(2048)],
  ["llama.attention.head_count", u32(32)],
  ...extra,
];

describe("GGUF header reader", () => {
  it("reads llama3.2:1b's keys, then its tensor list past the tokenizer: the embedding is shared with the output", async () => {
    const head = headOf(FAKE_MODELS.llama32_1b);
    const source = chunks(head, 64 * 1024);
    expect(await readGgufArch(source, 32 * MIB)).toEqual({
      architecture: "llama",
      block_count: 16,
      embedding_length: 2048,
      head_count: 32,
      head_count_kv: 8,
      key_length: 64,
      value_length: 64,
      context_length: 131_072,
      vocab_size: 128_256,
      token_embd_bytes: 279_085_056, // 2048 × 128256 in Q8_0 (34 bytes per 32)
      output_bytes: null,
      output_tied: true,
      sliding_window: null,
      sliding_window_pattern: null,
      feed_forward_length: 8192,
      expert_feed_forward_length: null,
      expert_count: null,
      expert_used_count: null,
    });
    expect(head.length).toBeGreaterThan(4 * MIB); // the tokenizer arrays
    expect(source.served()).toBe(head.length); // the tensor list comes after them
  });

  it("goes through qwen2.5:32b's whole tokenizer (MBs) to its tensor list", async () => {
    const head = headOf(FAKE_MODELS.qwen25_32b);
    for (const size of [4093, 1 * MIB]) {
      const source = chunks(head, size);
      expect(await readGgufArch(source, 32 * MIB)).toEqual({
        architecture: "qwen2",
        block_count: 64,
        embedding_length: 5120,
        head_count: 40,
        head_count_kv: 8,
        key_length: null,
        value_length: null,
        context_length: 32_768,
        vocab_size: 152_064, // the tokenizer's length: there is no qwen2.vocab_size
        token_embd_bytes: 437_944_320, // 5120 × 152064 in Q4_K (144 bytes per 256)
        output_bytes: 638_668_800, // Q6_K (210 bytes per 256)
        output_tied: false,
        sliding_window: null,
        sliding_window_pattern: null,
        feed_forward_length: 27_648,
        expert_feed_forward_length: null,
        expert_count: null,
        expert_used_count: null,
      });
      expect(source.served()).toBe(head.length);
    }
  });

  it("reads a mixture of experts' counts (qwen3moe), and null counts for a dense model without them", async () => {
    const moe = [
      ["general.architecture", { type: "string", value: "qwen3moe" }],
      ["qwen3moe.block_count", u32(48)],
      ["qwen3moe.embedding_length", u32(2048)],
      ["qwen3moe.attention.head_count", u32(32)],
      ["qwen3moe.attention.head_count_kv", u32(4)],
      ["qwen3moe.attention.key_length", u32(128)],
      ["qwen3moe.attention.value_length", u32(128)],
      ["qwen3moe.context_length", u32(40_960)],
      ["qwen3moe.vocab_size", u32(151_936)],
      ["qwen3moe.feed_forward_length", u32(6144)],
      ["qwen3moe.expert_feed_forward_length", u32(768)],
      ["qwen3moe.expert_count", u32(128)],
      ["qwen3moe.expert_used_count", u32(8)],
      ...tokenizerKvs(1000, 1000, "qwen2"),
    ] as GgufKv[];
    expect(await readGgufArch(chunks(ggufHeader({ kvs: moe }), 97), MIB)).toMatchObject({
      architecture: "qwen3moe",
      expert_feed_forward_length: 768,
      expert_count: 128,
      expert_used_count: 8,
    });
    const dense = minimal([
      ["llama.context_length", u32(8192)],
      ["llama.vocab_size", u32(32_000)],
      ["llama.attention.head_count_kv", u32(8)],
      ["llama.attention.key_length", u32(64)],
      ["llama.attention.value_length", u32(64)],
      ["tokenizer.ggml.model", { type: "string", value: "llama" }],
      ...tokenizerKvs(50_000, 50_000, "llama-bpe"),
    ]);
    const source = chunks(ggufHeader({ kvs: dense }), 1024);
    expect(await readGgufArch(source, 32 * MIB)).toMatchObject({
      feed_forward_length: null,
      expert_count: null,
      expert_used_count: null,
    });
  });

  it("reads across any chunk boundary: 7-byte chunks split every length and string", async () => {
    const kvs = minimal([...tokenizerKvs(5000, 5000, "llama-bpe"), ["llama.context_length", u32(8192)]]);
    const head = ggufHeader({ kvs });
    for (const size of [1, 7, 8, 9]) {
      expect(await readGgufArch(chunks(head, size), MIB)).toMatchObject({ vocab_size: 5000, context_length: 8192 });
    }
  });

  it("reads a big-endian file the same", async () => {
    const kvs = minimal([["llama.attention.head_count_kv", u32(4)], ...tokenizerKvs(1000, 1000, "llama-bpe")]);
    const le = await readGgufArch(chunks(ggufHeader({ kvs }), 100), MIB);
    const be = await readGgufArch(chunks(ggufHeader({ kvs, bigEndian: true }), 100), MIB);
    expect(be).toEqual(le);
    expect(be).toMatchObject({ head_count_kv: 4, vocab_size: 1000 });
  });

  it("takes the largest of per-layer head counts, and head_count when head_count_kv is absent", async () => {
    const perLayer = await readGgufArch(
      chunks(
        ggufHeader({
          kvs: [
            ["general.architecture", { type: "string", value: "openelm" }],
            ["openelm.block_count", u32(3)],
            ["openelm.embedding_length", u32(1280)],
            ["openelm.attention.head_count", { type: "array", of: "i32", count: 3, at: (i) => [12, 16, 20][i]! }],
            ["openelm.attention.head_count_kv", { type: "array", of: "u32", count: 3, at: (i) => [3, 4, 5][i]! }],
          ],
        }),
        5,
      ),
      MIB,
    );
    expect(perLayer).toMatchObject({ head_count: 20, head_count_kv: 5, context_length: null, vocab_size: null });
    expect(await readGgufArch(chunks(ggufHeader({ kvs: minimal() }), 9), MIB)).toMatchObject({ head_count_kv: 32 });
  });

  it("accepts the integer types converters write (u64, i32, u16)", async () => {
    const arch = await readGgufArch(
      chunks(
        ggufHeader({
          version: 2,
          kvs: [
            ["general.architecture", { type: "string", value: "qwen2" }],
            ["qwen2.block_count", { type: "u64", value: 28 }],
            ["qwen2.embedding_length", { type: "i32", value: 3584 }],
            ["qwen2.attention.head_count", { type: "u16", value: 28 }],
            ["qwen2.context_length", { type: "u64", value: 32_768 }],
          ],
        }),
        3,
      ),
      MIB,
    );
    expect(arch).toMatchObject({ block_count: 28, embedding_length: 3584, head_count: 28, context_length: 32_768 });
  });

  it("stops at the byte bound with a clear error", async () => {
    const head = headOf(FAKE_MODELS.qwen25_32b);
    await expect(readGgufArch(chunks(head, 64 * 1024), 2 * MIB)).rejects.toThrow(
      "the GGUF header is larger than 2 MiB",
    );
  });

  it.each([
    ["not GGUF", new TextEncoder().encode("PK\u0003\u0004 a zip file"), "the model blob is not a GGUF file"],
    ["version 1", ggufHeader({ kvs: minimal(), version: 1 }), "GGUF version 1 is not supported (v2 and v3 are)"],
    ["version 4", ggufHeader({ kvs: minimal(), version: 4 }), "GGUF version 4 is not supported (v2 and v3 are)"],
    [
      "no architecture",
      ggufHeader({ kvs: [["llama.block_count", u32(16)]] }),
      "the GGUF header has no general.architecture",
    ],
    [
      "no embedding_length",
      ggufHeader({ kvs: minimal().filter(([key]) => key !== "llama.embedding_length") }),
      "the GGUF header has no llama.embedding_length",
    ],
    ["cut short", ggufHeader({ kvs: minimal() }).slice(0, 60), "the GGUF file ended at byte 56, inside its header"],
  ])("refuses a header that is %s", async (_, bytes, message) => {
    await expect(readGgufArch(chunks(bytes, 16), MIB)).rejects.toThrow(message);
  });

  it("refuses a value type GGUF does not have", async () => {
    const bytes = ggufHeader({ kvs: minimal([["odd", u32(1)]]) });
    // the last KV's type id (u32 = 4) sits 8 bytes from the end: make it 13
    new DataView(bytes.buffer).setUint32(bytes.length - 8, 13, true);
    await expect(readGgufArch(chunks(bytes, 16), MIB)).rejects.toThrow(
      "the GGUF header holds a value of unknown type 13",
    );
  });
});
