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
  // Mixture of experts: a token reads only the used experts (offers/bytes-per-token.ts).
  "feed_forward_length",
  "expert_feed_forward_length",
  "expert_count",
  "expert_used_count",
] as const;
type ArchKey = (typeof ARCH_KEYS)[number];
const ARCH_KEY_SET = new Set<string>(ARCH_KEYS);
const OPTIONAL_KEYS = new Set<ArchKey>([
  "feed_forward_length",
  "expert_feed_forward_length",
  "expert_count",
  "expert_used_count",
]);

const MAX_KEY_BYTES = 65_535;
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

async function readPreamble(reader: Reader): Promise<number> {
  const magic = decoder.decode(await reader.bytes(4));
  if (magic === "GGUF") reader.littleEndian = true;
  else if (magic === "FUGG") reader.littleEndian = false;
  else throw new GgufError("the model blob is not a GGUF file");
  const version = await reader.u32();
  if (version === 1) throw new GgufError("GGUF version 1 is not supported (v2 and v3 are)");
  if (version !== 2 && version !== 3) throw new GgufError(`GGUF version ${version} is not supported (v2 and v3 are)`);
  await reader.u64(); // tensor_count
  return reader.u64(); // kv_count
}

function resolve(architecture: string | null, counts: Map<string, number>, tokens: number | null): GgufArch {
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
    feed_forward_length: get("feed_forward_length") || null,
    expert_feed_forward_length: get("expert_feed_forward_length") || null,
    expert_count: get("expert_count") || null,
    expert_used_count: get("expert_used_count") || null,
  };
}

/**
 * Reads the header's key/value pairs until every key the estimate uses has been seen, or to
 * their end (a missing optional key is only known to be missing there). Never reads past
 * `maxBytes` of the file.
 */
export async function readGgufArch(next: ChunkSource, maxBytes: number): Promise<GgufArch> {
  const reader = new Reader(next, maxBytes);
  const kvCount = await readPreamble(reader);
  let architecture: string | null = null;
  let tokens: number | null = null;
  const counts = new Map<string, number>();
  // The MoE keys are optional: a dense model has none, and reading its whole tokenizer to learn
  // that would cost megabytes. Converters write every `<arch>.` key before the tokenizer's, so
  // once a `tokenizer.` key went by, an expert key not seen is not there.
  let pastArch = false;
  const complete = () =>
    architecture !== null &&
    ARCH_KEYS.every(
      (name) =>
        counts.has(`${architecture}.${name}`) ||
        (name === "vocab_size" && tokens !== null) ||
        (pastArch && OPTIONAL_KEYS.has(name)),
    );

  for (let i = 0; i < kvCount && !complete(); i++) {
    const key = await readString(reader, MAX_KEY_BYTES, "key");
    const type = await reader.u32();
    if (key.startsWith("tokenizer.")) pastArch = true;
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
  return resolve(architecture, counts, tokens);
}
