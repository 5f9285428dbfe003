import type { ModelProfile } from "./library";

/**
 * The first bytes of a library model's GGUF file, written from its profile as ggml lays a v3
 * header out (ollama/ollama `fs/ggml/gguf.go`): the magic, the version, the tensor and KV counts,
 * the KVs the runner's rule reads (src/models/gguf.ts), then the tensor list's embedding and
 * output tensors. No tokenizer: the reader counts `vocab_size` instead.
 */

const TYPE_U32 = 4;
const TYPE_STRING = 8;
/** ggml types an embedding is stored in, and their [elements, bytes] per block (ggml `type_traits`) */
const TENSOR_TYPES: [type: number, block: number, bytes: number][] = [
  [12, 256, 144], // Q4_K
  [14, 256, 210], // Q6_K
  [8, 32, 34], // Q8_0
  [1, 1, 2], // F16
];

class Writer {
  private readonly parts: Uint8Array[] = [];
  private readonly encoder = new TextEncoder();

  u32(value: number): void {
    const part = new Uint8Array(4);
    new DataView(part.buffer).setUint32(0, value, true);
    this.parts.push(part);
  }

  u64(value: number): void {
    const part = new Uint8Array(8);
    new DataView(part.buffer).setBigUint64(0, BigInt(value), true);
    this.parts.push(part);
  }

  string(value: string): void {
    const bytes = this.encoder.encode(value);
    this.u64(bytes.length);
    this.parts.push(bytes);
  }

  bytes(): Uint8Array {
    const out = new Uint8Array(this.parts.reduce((sum, p) => sum + p.length, 0));
    let at = 0;
    for (const part of this.parts) {
      out.set(part, at);
      at += part.length;
    }
    return out;
  }
}

/** The ggml type whose blocks make `bytes` of an [embedding × vocab] tensor. */
function tensorType(profile: ModelProfile, bytes: number): number {
  const elements = profile.embedding_length * profile.vocab_size;
  const found = TENSOR_TYPES.find(([, block, size]) => (elements / block) * size === bytes);
  if (!found) throw new Error(`sim library: no ggml type stores ${bytes} bytes of ${elements} elements`);
  return found[0];
}

export function ggufHeaderOf(profile: ModelProfile): Uint8Array {
  const arch = profile.family;
  const counts: [string, number][] = [
    ["block_count", profile.block_count],
    ["context_length", profile.context_length],
    ["embedding_length", profile.embedding_length],
    ["attention.head_count", profile.head_count],
    ["attention.head_count_kv", profile.head_count_kv],
    ["attention.key_length", profile.head_dim],
    ["attention.value_length", profile.head_dim],
    ["vocab_size", profile.vocab_size],
  ];
  const dims = [profile.embedding_length, profile.vocab_size];
  const tensors: [string, number][] = profile.untied
    ? [
        ["token_embd.weight", tensorType(profile, profile.untied.token_embd_bytes)],
        ["output.weight", tensorType(profile, profile.untied.output_bytes)],
      ]
    : [];
  const w = new Writer();
  w.u32(0x46554747); // "GGUF"
  w.u32(3);
  w.u64(tensors.length);
  w.u64(counts.length + 1);
  w.string("general.architecture");
  w.u32(TYPE_STRING);
  w.string(arch);
  for (const [key, value] of counts) {
    w.string(`${arch}.${key}`);
    w.u32(TYPE_U32);
    w.u32(value);
  }
  let offset = 0;
  for (const [name, type] of tensors) {
    w.string(name);
    w.u32(dims.length);
    for (const d of dims) w.u64(d);
    w.u32(type);
    w.u64(offset);
    offset += 32;
  }
  return w.bytes();
}
