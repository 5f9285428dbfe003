// A second, independent estimate of the GPU memory a model takes at a context: node-llama-cpp's
// GgufInsights (from a GGUF header alone), against the runner's rule (src/models/runner.ts), for
// headers written with a full tensor list (llama3.1:8b and qwen2.5:32b shapes, Q4_K/Q6_K):
//
//   NODE_LLAMA_CPP=/path/to/node_modules/node-llama-cpp node bench/node-llama-cpp-compare.mjs
//
// node-llama-cpp is not a dependency of gpulease (it ships prebuilt llama.cpp binaries); install
// it anywhere (`npm install node-llama-cpp@3.22.1`) and point NODE_LLAMA_CPP at it. Prints, per
// model and context, both figures for the weights on the GPU and for KV cache + compute buffer,
// and the difference. Exits non-zero when it compared nothing.
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { importBundled } from "./lib/esbuild-entry.mjs";

const rule = await importBundled("sizing-entry.ts", "sizing");
/** where the GGUF headers it writes for node-llama-cpp go (bench/out, made by importBundled) */
const outDir = join(dirname(fileURLToPath(import.meta.url)), "out");
const where = process.env.NODE_LLAMA_CPP;
const nlc = await import(where ? pathToFileURL(join(where, "dist", "index.js")).href : "node-llama-cpp");

// [elements per block, bytes per block] of the ggml types written below (F32, Q4_K, Q6_K)
const TYPES = { 0: [1, 4], 12: [256, 144], 14: [256, 210] };
const bytesOf = (dims, type) => Math.ceil(dims.reduce((a, b) => a * b, 1) / TYPES[type][0]) * TYPES[type][1];

/** A GGUF v3 header: the KVs and the whole tensor list of a llama-shaped model; no tensor data. */
function writeGguf(path, a) {
  const parts = [];
  const u32 = (v) => parts.push(Buffer.from(new Uint32Array([v]).buffer));
  const u64 = (v) => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    parts.push(b);
  };
  const str = (s) => {
    const b = Buffer.from(s);
    u64(b.length);
    parts.push(b);
  };
  const kvs = [
    ["general.architecture", 8, a.arch],
    [`${a.arch}.block_count`, 4, a.layers],
    [`${a.arch}.context_length`, 4, a.trained],
    [`${a.arch}.embedding_length`, 4, a.e],
    [`${a.arch}.feed_forward_length`, 4, a.ff],
    [`${a.arch}.attention.head_count`, 4, a.heads],
    [`${a.arch}.attention.head_count_kv`, 4, a.kvHeads],
    [`${a.arch}.rope.dimension_count`, 4, 128],
    ["tokenizer.ggml.model", 8, "gpt2"],
    ["tokenizer.ggml.tokens", 9, a.vocab],
  ];
  const kvDim = (a.e / a.heads) * a.kvHeads;
  const tensors = [["token_embd.weight", [a.e, a.vocab], 12]];
  for (let i = 0; i < a.layers; i++) {
    tensors.push(
      [`blk.${i}.attn_norm.weight`, [a.e], 0],
      [`blk.${i}.attn_q.weight`, [a.e, a.e], 12],
      [`blk.${i}.attn_k.weight`, [a.e, kvDim], 12],
      [`blk.${i}.attn_v.weight`, [a.e, kvDim], 14],
      [`blk.${i}.attn_output.weight`, [a.e, a.e], 12],
      [`blk.${i}.ffn_norm.weight`, [a.e], 0],
      [`blk.${i}.ffn_gate.weight`, [a.e, a.ff], 12],
      [`blk.${i}.ffn_up.weight`, [a.e, a.ff], 12],
      [`blk.${i}.ffn_down.weight`, [a.ff, a.e], 14],
    );
  }
  tensors.push(["output_norm.weight", [a.e], 0], ["output.weight", [a.e, a.vocab], 14]);
  u32(0x46554747);
  u32(3);
  u64(tensors.length);
  u64(kvs.length);
  for (const [key, type, value] of kvs) {
    str(key);
    u32(type);
    if (type === 8) str(value);
    else if (type === 4) u32(value);
    else {
      u32(8);
      u64(value);
      for (let i = 0; i < value; i++) str(`t${i}`);
    }
  }
  let offset = 0;
  for (const [name, dims, type] of tensors) {
    str(name);
    u32(dims.length);
    for (const d of dims) u64(d);
    u32(type);
    u64(offset);
    offset = Math.ceil((offset + bytesOf(dims, type)) / 32) * 32;
  }
  const head = Buffer.concat(parts);
  writeFileSync(path, Buffer.concat([head, Buffer.alloc(Math.ceil(head.length / 32) * 32 - head.length)]));
  return { weights: offset, tokenEmbd: bytesOf([a.e, a.vocab], 12), output: bytesOf([a.e, a.vocab], 14) };
}

const MODELS = [
  {
    name: "llama3.1:8b",
    arch: "llama",
    layers: 32,
    trained: 131_072,
    e: 4096,
    ff: 14_336,
    heads: 32,
    kvHeads: 8,
    vocab: 128_256,
  },
  {
    name: "qwen2.5:32b",
    arch: "qwen2",
    layers: 64,
    trained: 32_768,
    e: 5120,
    ff: 27_648,
    heads: 40,
    kvHeads: 8,
    vocab: 152_064,
  },
];
const llama = await nlc.getLlama({ gpu: false, build: "never" });
const MiB = 2 ** 20;
let compared = 0;
console.log(
  "| model | context | GPU weights: rule / node-llama-cpp (MiB) | KV + compute: rule / node-llama-cpp (MiB) | diff |",
);
console.log("|---|---|---|---|---|");
for (const a of MODELS) {
  const path = join(outDir, `${a.name.replace(/[:.]/g, "-")}.gguf`);
  const sizes = writeGguf(path, a);
  const facts = {
    name: a.name,
    digest: "sha256:0",
    weights_bytes: sizes.weights,
    arch: {
      architecture: a.arch,
      block_count: a.layers,
      embedding_length: a.e,
      head_count: a.heads,
      head_count_kv: a.kvHeads,
      key_length: null,
      value_length: null,
      context_length: a.trained,
      vocab_size: a.vocab,
      token_embd_bytes: sizes.tokenEmbd,
      output_bytes: sizes.output,
      output_tied: false,
    },
  };
  const info = await nlc.readGgufFileInfo(path, { sourceType: "filesystem" });
  const insights = await nlc.GgufInsights.from(info, llama);
  const theirsWeights = insights.estimateModelResourceRequirements({ gpuLayers: a.layers + 1 }).gpuVram;
  for (const context of [4096, 8192, 32_768, 131_072]) {
    if (context > a.trained) continue;
    const ours = rule.kvCacheBytes(facts, context, 512).total + rule.computeBytes(facts, context, 512, true);
    const theirs = insights.estimateContextResourceRequirements({
      contextSize: context,
      modelGpuLayers: a.layers + 1,
      batchSize: 512,
      sequences: 1,
      flashAttention: true,
    }).gpuVram;
    const diff = (100 * (ours - theirs)) / theirs;
    compared++;
    console.log(
      `| ${a.name} | ${context} | ${(rule.weightsOnGpu(facts) / MiB).toFixed(0)} / ${(theirsWeights / MiB).toFixed(0)} | ${(ours / MiB).toFixed(0)} / ${(theirs / MiB).toFixed(0)} | ${diff.toFixed(1)} % |`,
    );
  }
}
if (compared === 0) throw new Error("measured nothing: zero comparisons");
