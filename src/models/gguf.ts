/**
 * Reads what the memory estimate needs from the key/value section at the start of a GGUF file
 * (v2/v3, the layout of ollama/ollama fs/ggml/gguf.go), from a stream of chunks. Values it does
 * not need are skipped as they stream by: a tokenizer array of megabytes is never held whole.
 */

/** What docs/models.md#the-estimate takes from a model's GGUF header. */
export interface GgufArch {
  architecture: string;
  block_count: number;
  embedding_length: number;
  head_count: number;
  /** absent in the file: head_count, as llama.cpp loads it */
  head_count_kv: number;
  key_length: number | null;
  value_length: number | null;
  context_length: number | null;
  /** `<arch>.vocab_size`, else the length of `tokenizer.ggml.tokens`; null when neither is there */
  vocab_size: number | null;
  /** bytes of `token_embd.weight` (null: not in the tensor list, or of a type not in GGML_TYPES) */
  token_embd_bytes: number | null;
  /** bytes of `output.weight`, null when it is absent or of an unknown type */
  output_bytes: number | null;
  /** the tensor list has no `output.weight`: the output layer shares the token embedding */
  output_tied: boolean;
  sliding_window: number | null;
  sliding_window_pattern: number | null;
  /** null where the file has none (dense FFN length; absent in MoE files that give only the expert's) */
  feed_forward_length: number | null;
  expert_feed_forward_length: number | null;
  /** experts per layer and the ones each token uses; null for a dense model */
  expert_count: number | null;
  expert_used_count: number | null;
}

/** The next chunk of the file, null at its end. */
export type ChunkSource = () => Promise<Uint8Array | null>;

/** The header is not a GGUF header we can read (or not within the byte bound). */
export class GgufError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "GgufError";
  }
}

const TYPE = {
  uint8: 0,
  int8: 1,
  uint16: 2,
  int16: 3,
  uint32: 4,
  int32: 5,
  float32: 6,
  bool: 7,
  string: 8,
  array: 9,
  uint64: 10,
  int64: 11,
  float64: 12,
} as const;

const FIXED_SIZE: Record<number, number> = {
  [TYPE.uint8]: 1,
  [TYPE.int8]: 1,
  [TYPE.uint16]: 2,
  [TYPE.int16]: 2,
  [TYPE.uint32]: 4,
  [TYPE.int32]: 4,
  [TYPE.float32]: 4,
  [TYPE.bool]: 1,
  [TYPE.uint64]: 8,
  [TYPE.int64]: 8,
  [TYPE.float64]: 8,
};

const INTEGER_TYPES = new Set<number>([
  TYPE.uint8,
  TYPE.int8,
  TYPE.uint16,
  TYPE.int16,
  TYPE.uint32,
  TYPE.int32,
  TYPE.uint64,
  TYPE.int64,
]);

/** The `<arch>.` keys the estimate reads; head counts may be per-layer arrays (the largest counts). */
const ARCH_KEYS = [
  "block_count",
  "embedding_length",
  "context_length",
  "vocab_size",
  "attention.head_count",
  "attention.head_count_kv",
  "attention.key_length",
  "attention.value_length",
  "attention.sliding_window",
  "attention.sliding_window_pattern",
  // Mixture of experts: a token reads only the used experts (offers/bytes-per-token.ts).
  "feed_forward_length",
  "expert_feed_forward_length",
  "expert_count",
  "expert_used_count",
] as const;
type ArchKey = (typeof ARCH_KEYS)[number];
const ARCH_KEY_SET = new Set<string>(ARCH_KEYS);

const MAX_KEY_BYTES = 65_535;
const MAX_TENSOR_DIMS = 8;

/**
 * [elements per block, bytes per block] of each ggml type (ggml `ggml/src/ggml.c` `type_traits`,
 * as ollama `fs/ggml/type.go` lists them): a tensor takes elements / block × bytes.
 */
const GGML_TYPES: Record<number, [number, number]> = {
  0: [1, 4], // F32
  1: [1, 2], // F16
  2: [32, 18], // Q4_0
  3: [32, 20], // Q4_1
  6: [32, 22], // Q5_0
  7: [32, 24], // Q5_1
  8: [32, 34], // Q8_0
  9: [32, 36], // Q8_1
  10: [256, 84], // Q2_K
  11: [256, 110], // Q3_K
  12: [256, 144], // Q4_K
  13: [256, 176], // Q5_K
  14: [256, 210], // Q6_K
  15: [256, 292], // Q8_K
  16: [256, 66], // IQ2_XXS
  17: [256, 74], // IQ2_XS
  18: [256, 98], // IQ3_XXS
  19: [256, 50], // IQ1_S
  20: [32, 18], // IQ4_NL
  21: [256, 110], // IQ3_S
  22: [256, 82], // IQ2_S
  23: [256, 136], // IQ4_XS
  24: [1, 1], // I8
  25: [1, 2], // I16
  26: [1, 4], // I32
  27: [1, 8], // I64
  28: [1, 8], // F64
  29: [256, 56], // IQ1_M
  30: [1, 2], // BF16
  34: [256, 54], // TQ1_0
  35: [256, 66], // TQ2_0
  39: [32, 17], // MXFP4
};

function tensorBytes(dims: number[], type: number): number | null {
  const traits = GGML_TYPES[type];
  if (!traits) return null;
  const elements = dims.reduce((product, d) => product * d, 1);
  return Math.ceil(elements / traits[0]) * traits[1];
}
const MAX_PER_LAYER_ARRAY = 65_536;

/** A forward-only reader over the chunks, holding only what it has not consumed yet. */
class Reader {
  private buf = new Uint8Array(0);
  private view = new DataView(this.buf.buffer);
  private pos = 0;
  /** file offset of buf[0] */
  private base = 0;
  littleEndian = true;

  constructor(
    private readonly next: ChunkSource,
    private readonly maxBytes: number,
  ) {}

  get offset(): number {
    return this.base + this.pos;
  }

  private get available(): number {
    return this.buf.length - this.pos;
  }

  private checkBound(upTo: number): void {
    if (upTo > this.maxBytes) {
      throw new GgufError(`the GGUF header is larger than ${Math.round(this.maxBytes / 1024 / 1024)} MiB`);
    }
  }

  private async pull(): Promise<void> {
    const chunk = await this.next();
    if (chunk === null) throw new GgufError(`the GGUF file ended at byte ${this.offset}, inside its header`);
    const rest = this.buf.subarray(this.pos);
    const joined = new Uint8Array(rest.length + chunk.length);
    joined.set(rest);
    joined.set(chunk, rest.length);
    this.base += this.pos;
    this.buf = joined;
    this.view = new DataView(joined.buffer);
    this.pos = 0;
  }

  /** Makes `n` bytes readable (hot paths check `canRead` first and skip the await). */
  async ensure(n: number): Promise<void> {
    this.checkBound(this.offset + n);
    while (this.available < n) await this.pull();
  }

  async skip(n: number): Promise<void> {
    this.checkBound(this.offset + n);
    let left = n;
    while (left > this.available) {
      left -= this.available;
      this.pos = this.buf.length;
      await this.pull();
    }
    this.pos += left;
  }

  async u32(): Promise<number> {
    if (!this.canRead(4)) await this.ensure(4);
    const value = this.view.getUint32(this.pos, this.littleEndian);
    this.pos += 4;
    return value;
  }

  /** A uint64 as a number; counts and lengths past 2^53 are not a header we can read. */
  async u64(): Promise<number> {
    if (!this.canRead(8)) await this.ensure(8);
    return this.u64Now();
  }

  /** u64 when 8 bytes are known to be available (the skip loops). */
  u64Now(): number {
    const lo = this.view.getUint32(this.pos + (this.littleEndian ? 0 : 4), this.littleEndian);
    const hi = this.view.getUint32(this.pos + (this.littleEndian ? 4 : 0), this.littleEndian);
    this.pos += 8;
    if (hi > 0x1fffff) throw new GgufError("the GGUF header holds a count past 2^53");
    return hi * 2 ** 32 + lo;
  }

  canRead(n: number): boolean {
    return this.available >= n && this.offset + n <= this.maxBytes;
  }

  skipNow(n: number): void {
    this.pos += n;
  }

  async bytes(n: number): Promise<Uint8Array> {
    await this.ensure(n);
    const out = this.buf.slice(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  /** A signed or unsigned integer of GGUF type `type` (the caller checked it is one). */
  async integer(type: number): Promise<number> {
    const size = FIXED_SIZE[type]!;
    // A negative int64 reads as a huge uint64, which u64() refuses: no count is negative.
    if (size === 8) return this.u64();
    await this.ensure(size);
    const le = this.littleEndian;
    const at = this.pos;
    this.pos += size;
    switch (type) {
      case TYPE.uint8:
        return this.view.getUint8(at);
      case TYPE.int8:
        return this.view.getInt8(at);
      case TYPE.uint16:
        return this.view.getUint16(at, le);
      case TYPE.int16:
        return this.view.getInt16(at, le);
      case TYPE.uint32:
        return this.view.getUint32(at, le);
      default:
        return this.view.getInt32(at, le);
    }
  }
}

const decoder = new TextDecoder();

async function readString(reader: Reader, maxBytes: number, what: string): Promise<string> {
  const length = await reader.u64();
  if (length > maxBytes) throw new GgufError(`the GGUF ${what} is ${length} bytes long`);
  return decoder.decode(await reader.bytes(length));
}

async function skipValue(reader: Reader, type: number): Promise<void> {
  if (type === TYPE.string) return reader.skip(await reader.u64());
  if (type === TYPE.array) {
    const elementType = await reader.u32();
    return skipArray(reader, elementType, await reader.u64());
  }
  const size = FIXED_SIZE[type];
  if (size === undefined) throw new GgufError(`the GGUF header holds a value of unknown type ${type}`);
  return reader.skip(size);
}

async function skipArray(reader: Reader, elementType: number, count: number): Promise<void> {
  const size = FIXED_SIZE[elementType];
  if (size !== undefined) return reader.skip(size * count);
  if (elementType === TYPE.string) {
    // Hot loop (a tokenizer has 100,000s of strings): no await while the bytes are already here.
    for (let i = 0; i < count; i++) {
      const length = reader.canRead(8) ? reader.u64Now() : await reader.u64();
      if (reader.canRead(length)) reader.skipNow(length);
      else await reader.skip(length);
    }
    return;
  }
  for (let i = 0; i < count; i++) await skipValue(reader, elementType);
}

/** An integer value, or the largest of an integer array (per-layer head counts). */
async function readCount(reader: Reader, type: number, key: string): Promise<number | null> {
  if (INTEGER_TYPES.has(type)) return reader.integer(type);
  if (type !== TYPE.array) {
    await skipValue(reader, type);
    return null;
  }
  const elementType = await reader.u32();
  const count = await reader.u64();
  if (!INTEGER_TYPES.has(elementType) || count > MAX_PER_LAYER_ARRAY) {
    await skipArray(reader, elementType, count);
    return null;
  }
  let largest: number | null = null;
  for (let i = 0; i < count; i++) {
    const value = await reader.integer(elementType);
    largest = largest === null ? value : Math.max(largest, value);
  }
  if (largest !== null && largest < 0) throw new GgufError(`the GGUF key ${key} is negative`);
  return largest;
}

function archKeyOf(key: string): { arch: string; name: ArchKey } | null {
  const dot = key.indexOf(".");
  if (dot <= 0) return null;
  const name = key.slice(dot + 1);
  return ARCH_KEY_SET.has(name) ? { arch: key.slice(0, dot), name: name as ArchKey } : null;
}

async function readPreamble(reader: Reader): Promise<{ tensorCount: number; kvCount: number }> {
  const magic = decoder.decode(await reader.bytes(4));
  if (magic === "GGUF") reader.littleEndian = true;
  else if (magic === "FUGG") reader.littleEndian = false;
  else throw new GgufError("the model blob is not a GGUF file");
  const version = await reader.u32();
  if (version === 1) throw new GgufError("GGUF version 1 is not supported (v2 and v3 are)");
  if (version !== 2 && version !== 3) throw new GgufError(`GGUF version ${version} is not supported (v2 and v3 are)`);
  const tensorCount = await reader.u64();
  return { tensorCount, kvCount: await reader.u64() };
}

interface Tensors {
  token_embd_bytes: number | null;
  output_bytes: number | null;
  output_tied: boolean;
}

/** The tensor list after the KVs: name, dims, type, offset each; only the two embedding tensors are kept. */
async function readTensors(reader: Reader, count: number): Promise<Tensors> {
  let tokenEmbd: number | null = null;
  let output: number | null = null;
  let hasOutput = false;
  for (let i = 0; i < count; i++) {
    const name = await readString(reader, MAX_KEY_BYTES, "tensor name");
    const nDims = await reader.u32();
    if (nDims > MAX_TENSOR_DIMS) throw new GgufError(`the GGUF tensor ${name} has ${nDims} dimensions`);
    const dims: number[] = [];
    for (let d = 0; d < nDims; d++) dims.push(await reader.u64());
    const type = await reader.u32();
    await reader.u64(); // offset
    if (name === "token_embd.weight") tokenEmbd = tensorBytes(dims, type);
    if (name === "output.weight") {
      hasOutput = true;
      output = tensorBytes(dims, type);
    }
  }
  return { token_embd_bytes: tokenEmbd, output_bytes: output, output_tied: !hasOutput };
}

function resolve(
  architecture: string | null,
  counts: Map<string, number>,
  tokens: number | null,
  tensors: Tensors,
): GgufArch {
  if (architecture === null) throw new GgufError("the GGUF header has no general.architecture");
  const get = (name: ArchKey) => counts.get(`${architecture}.${name}`) ?? null;
  const required = (name: ArchKey) => {
    const value = get(name);
    if (value === null || value <= 0) throw new GgufError(`the GGUF header has no ${architecture}.${name}`);
    return value;
  };
  const headCount = required("attention.head_count");
  return {
    architecture,
    block_count: required("block_count"),
    embedding_length: required("embedding_length"),
    head_count: headCount,
    head_count_kv: get("attention.head_count_kv") || headCount,
    key_length: get("attention.key_length") || null,
    value_length: get("attention.value_length") || null,
    context_length: get("context_length") || null,
    vocab_size: get("vocab_size") || tokens,
    ...tensors,
    sliding_window: get("attention.sliding_window") || null,
    sliding_window_pattern: get("attention.sliding_window_pattern") || null,
    feed_forward_length: get("feed_forward_length") || null,
    expert_feed_forward_length: get("expert_feed_forward_length") || null,
    expert_count: get("expert_count") || null,
    expert_used_count: get("expert_used_count") || null,
  };
}

/**
 * Reads the header's key/value pairs and then its tensor list (the sizes of the embedding and
 * output tensors decide what goes to the GPU). Never reads past `maxBytes` of the file.
 */
export async function readGgufArch(next: ChunkSource, maxBytes: number): Promise<GgufArch> {
  const reader = new Reader(next, maxBytes);
  const { tensorCount, kvCount } = await readPreamble(reader);
  let architecture: string | null = null;
  let tokens: number | null = null;
  const counts = new Map<string, number>();

  for (let i = 0; i < kvCount; i++) {
    const key = await readString(reader, MAX_KEY_BYTES, "key");
    const type = await reader.u32();
    if (key === "general.architecture" && type === TYPE.string) {
      architecture = await readString(reader, 1024, "architecture");
      continue;
    }
    if (key === "tokenizer.ggml.tokens" && type === TYPE.array) {
      const elementType = await reader.u32();
      tokens = await reader.u64();
      await skipArray(reader, elementType, tokens);
      continue;
    }
    const archKey = archKeyOf(key);
    if (!archKey) {
      await skipValue(reader, type);
      continue;
    }
    const value = await readCount(reader, type, key);
    if (value !== null) counts.set(key, value);
  }
  return resolve(architecture, counts, tokens, await readTensors(reader, tensorCount));
}
