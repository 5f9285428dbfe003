import type { FakeService } from "./install";
import { json, text } from "./respond";

/*
 * The model registries Ollama pulls from, at the wire: registry.ollama.ai (or whatever
 * OLLAMA_REGISTRY_URL points at) and hf.co. Manifests as Docker-v2 JSON (ollama/ollama
 * server/images.go, manifest/manifest.go); an unknown model or tag is a 404 with the
 * registry's `{"errors":[{"code":"MANIFEST_UNKNOWN",…}]}`; a blob is a redirect to a CDN
 * (307 from registry.ollama.ai, 302 from hf.co) with a signed URL, and the CDN serves byte
 * ranges (206 + Content-Range, 416 past the end, 200 without Range). Each model blob starts
 * with a real GGUF header written below, followed by zeros up to the size the manifest gives.
 */

// ---------------------------------------------------------------------------------------------
// A small GGUF writer (the layout of ggml's gguf.c / ollama fs/ggml/gguf.go, version 3).

type Scalar = "u8" | "i8" | "u16" | "i16" | "u32" | "i32" | "f32" | "bool" | "u64" | "i64" | "f64";

export type GgufValue =
  | { type: Scalar; value: number }
  | { type: "string"; value: string }
  /** `at` undefined: only the array's type and count are written (the file's zeros follow) */
  | { type: "array"; of: Scalar | "string"; count: number; at?: (i: number) => number | string };

export type GgufKv = [key: string, value: GgufValue];

const TYPE_ID: Record<Scalar | "string" | "array", number> = {
  u8: 0,
  i8: 1,
  u16: 2,
  i16: 3,
  u32: 4,
  i32: 5,
  f32: 6,
  bool: 7,
  string: 8,
  array: 9,
  u64: 10,
  i64: 11,
  f64: 12,
};
const SIZE: Record<Scalar, number> = {
  u8: 1,
  i8: 1,
  u16: 2,
  i16: 2,
  u32: 4,
  i32: 4,
  f32: 4,
  bool: 1,
  u64: 8,
  i64: 8,
  f64: 8,
};

class ByteWriter {
  private buf = new Uint8Array(1 << 16);
  private view = new DataView(this.buf.buffer);
  length = 0;
  private readonly encoder = new TextEncoder();

  constructor(private readonly le: boolean) {}

  private room(n: number): number {
    if (this.length + n > this.buf.length) {
      let size = this.buf.length * 2;
      while (size < this.length + n) size *= 2;
      const grown = new Uint8Array(size);
      grown.set(this.buf.subarray(0, this.length));
      this.buf = grown;
      this.view = new DataView(grown.buffer);
    }
    const at = this.length;
    this.length += n;
    return at;
  }

  scalar(type: Scalar, value: number): void {
    const at = this.room(SIZE[type]);
    const v = this.view;
    switch (type) {
      case "u8":
      case "bool":
        v.setUint8(at, value);
        break;
      case "i8":
        v.setInt8(at, value);
        break;
      case "u16":
        v.setUint16(at, value, this.le);
        break;
      case "i16":
        v.setInt16(at, value, this.le);
        break;
      case "u32":
        v.setUint32(at, value, this.le);
        break;
      case "i32":
        v.setInt32(at, value, this.le);
        break;
      case "f32":
        v.setFloat32(at, value, this.le);
        break;
      case "f64":
        v.setFloat64(at, value, this.le);
        break;
      default:
        v.setBigUint64(at, BigInt.asUintN(64, BigInt(value)), this.le);
    }
  }

  string(value: string): void {
    const bytes = this.encoder.encode(value);
    this.scalar("u64", bytes.length);
    const at = this.room(bytes.length);
    this.buf.set(bytes, at);
  }

  bytes(): Uint8Array {
    return this.buf.slice(0, this.length);
  }
}

/** One entry of the tensor list after the KVs: its name, shape (ne0 first) and ggml type id. */
export interface GgufTensor {
  name: string;
  dims: number[];
  /** ggml type: 0 F32, 1 F16, 2 Q4_0, 8 Q8_0, 12 Q4_K, 14 Q6_K, ... */
  type: number;
}

export interface GgufHeaderOptions {
  kvs: GgufKv[];
  /** the tensor list written after the KVs (the count is its length) */
  tensors?: GgufTensor[];
  version?: number;
  bigEndian?: boolean;
}

/** The bytes a GGUF file starts with: magic, version, tensor and KV counts, then the KV pairs. */
export function ggufHeader({ kvs, tensors = [], version = 3, bigEndian = false }: GgufHeaderOptions): Uint8Array {
  const w = new ByteWriter(!bigEndian);
  w.scalar("u32", 0x46554747); // "GGUF" little-endian, "FUGG" when the file is big-endian
  w.scalar("u32", version);
  w.scalar("u64", tensors.length);
  w.scalar("u64", kvs.length);
  for (const [key, value] of kvs) {
    w.string(key);
    w.scalar("u32", TYPE_ID[value.type]);
    if (value.type === "string") w.string(value.value);
    else if (value.type === "array") {
      w.scalar("u32", TYPE_ID[value.of]);
      w.scalar("u64", value.count);
      if (!value.at) continue;
      for (let i = 0; i < value.count; i++) {
        const item = value.at(i);
        if (value.of === "string") w.string(String(item));
        else w.scalar(value.of, Number(item));
      }
    } else w.scalar(value.type, value.value);
  }
  let offset = 0;
  for (const tensor of tensors) {
    w.string(tensor.name);
    w.scalar("u32", tensor.dims.length);
    for (const d of tensor.dims) w.scalar("u64", d);
    w.scalar("u32", tensor.type);
    w.scalar("u64", offset);
    offset += 32;
  }
  return w.bytes();
}

const u32 = (value: number): GgufValue => ({ type: "u32", value });
const f32 = (value: number): GgufValue => ({ type: "f32", value });
const str = (value: string): GgufValue => ({ type: "string", value });
const strings = (count: number, at: (i: number) => string): GgufValue => ({ type: "array", of: "string", count, at });

/** A BPE tokenizer's arrays, as large as the real ones (they are what a header reader must skip). */
export function tokenizerKvs(vocab: number, merges: number, pre: string): GgufKv[] {
  return [
    ["tokenizer.ggml.model", str("gpt2")],
    ["tokenizer.ggml.pre", str(pre)],
    ["tokenizer.ggml.tokens", strings(vocab, (i) => `tok${i.toString(36)}`)],
    ["tokenizer.ggml.token_type", { type: "array", of: "i32", count: vocab, at: (i) => (i < vocab - 256 ? 1 : 3) }],
    ["tokenizer.ggml.merges", strings(merges, (i) => `m${(i % 4096).toString(36)} ${(i >> 12).toString(36)}`)],
    ["tokenizer.ggml.bos_token_id", u32(1)],
    ["tokenizer.ggml.eos_token_id", u32(2)],
    ["tokenizer.chat_template", str("{% for message in messages %}{{ message['content'] }}{% endfor %}")],
  ];
}

// ---------------------------------------------------------------------------------------------
// The catalogue.

export interface FakeLayer {
  mediaType: string;
  size: number;
  /** the blob's first bytes (the rest are zeros up to `size`) */
  head?: () => Uint8Array;
}

export interface FakeModel {
  /** the registry host the reference names: "registry.ollama.ai" or "hf.co" */
  host: string;
  namespace: string;
  name: string;
  tag: string;
  layers: FakeLayer[];
  /** names that share a build share its manifest bytes (qwen2.5:32b and qwen2.5:32b-instruct) */
  build?: string;
}

const cached = <T>(make: () => T): (() => T) => {
  let value: T | undefined;
  return () => {
    value ??= make();
    return value;
  };
};

const small = (mediaType: string, size: number): FakeLayer => ({ mediaType, size });

/** A params layer as Ollama writes it: the Modelfile's PARAMETERs as JSON, padded with spaces to `size`. */
export const paramsLayer = (params: Record<string, unknown>, size?: number): FakeLayer => {
  const json = JSON.stringify(params);
  const bytes = new TextEncoder().encode(json.padEnd(size ?? json.length, " "));
  return { mediaType: "application/vnd.ollama.image.params", size: bytes.length, head: () => bytes };
};

/** llama3.2:1b as the library serves it: Q8_0, 1,321,082,688 bytes, every key the estimate needs before the tokenizer. */
const llama32_1b: FakeModel = {
  host: "registry.ollama.ai",
  namespace: "library",
  name: "llama3.2",
  tag: "1b",
  layers: [
    {
      mediaType: "application/vnd.ollama.image.model",
      size: 1_321_082_688,
      head: cached(() =>
        ggufHeader({
          tensors: [
            { name: "token_embd.weight", dims: [2048, 128_256], type: 8 },
            { name: "output_norm.weight", dims: [2048], type: 0 },
          ],
          kvs: [
            ["general.architecture", str("llama")],
            ["general.type", str("model")],
            ["general.name", str("Llama 3.2 1B Instruct")],
            [
              "general.tags",
              strings(6, (i) => ["facebook", "meta", "pytorch", "llama", "llama-3", "text-generation"][i]!),
            ],
            ["general.languages", strings(8, (i) => ["en", "de", "fr", "it", "pt", "hi", "es", "th"][i]!)],
            ["llama.block_count", u32(16)],
            ["llama.context_length", u32(131_072)],
            ["llama.embedding_length", u32(2048)],
            ["llama.feed_forward_length", u32(8192)],
            ["llama.attention.head_count", u32(32)],
            ["llama.attention.head_count_kv", u32(8)],
            ["llama.rope.freq_base", f32(500_000)],
            ["llama.attention.layer_norm_rms_epsilon", f32(0.00001)],
            ["llama.attention.key_length", u32(64)],
            ["llama.attention.value_length", u32(64)],
            ["general.file_type", u32(7)],
            ["llama.vocab_size", u32(128_256)],
            ["llama.rope.dimension_count", u32(64)],
            ...tokenizerKvs(128_256, 280_147, "llama-bpe"),
            ["general.quantization_version", u32(2)],
          ],
        }),
      ),
    },
    small("application/vnd.ollama.image.template", 1429),
    small("application/vnd.ollama.image.license", 7711),
    small("application/vnd.ollama.image.license", 6016),
    paramsLayer({ stop: ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"] }, 96),
  ],
};

/** qwen2.5:32b: Q4_K_M, no key_length/value_length keys, so a reader goes through the whole tokenizer (MBs). */
const qwen25_32b: FakeModel = {
  host: "registry.ollama.ai",
  namespace: "library",
  name: "qwen2.5",
  tag: "32b",
  layers: [
    {
      mediaType: "application/vnd.ollama.image.model",
      size: 19_851_335_840,
      head: cached(() =>
        ggufHeader({
          tensors: [
            { name: "token_embd.weight", dims: [5120, 152_064], type: 12 },
            { name: "output.weight", dims: [5120, 152_064], type: 14 },
            { name: "output_norm.weight", dims: [5120], type: 0 },
          ],
          kvs: [
            ["general.architecture", str("qwen2")],
            ["general.type", str("model")],
            ["general.name", str("Qwen2.5 32B Instruct")],
            ["general.size_label", str("32B")],
            ["general.license", str("apache-2.0")],
            ["general.tags", strings(2, (i) => ["chat", "text-generation"][i]!)],
            ["general.languages", strings(1, () => "en")],
            ["qwen2.block_count", u32(64)],
            ["qwen2.context_length", u32(32_768)],
            ["qwen2.embedding_length", u32(5120)],
            ["qwen2.feed_forward_length", u32(27_648)],
            ["qwen2.attention.head_count", u32(40)],
            ["qwen2.attention.head_count_kv", u32(8)],
            ["qwen2.rope.freq_base", f32(1_000_000)],
            ["qwen2.attention.layer_norm_rms_epsilon", f32(0.000001)],
            ["general.file_type", u32(15)],
            ...tokenizerKvs(152_064, 151_387, "qwen2"),
            ["general.quantization_version", u32(2)],
          ],
        }),
      ),
    },
    small("application/vnd.ollama.image.template", 1482),
    small("application/vnd.ollama.image.system", 68),
    small("application/vnd.ollama.image.license", 11_343),
  ],
};

/**
 * qwen2.5:72b: Q4_K_M, 47,415,713,568 bytes. Sold-as-48-GB cards (L40S, A40: 46,068 MiB) cannot
 * hold it whole at any context; an 80 GB card can.
 */
const qwen25_72b: FakeModel = {
  host: "registry.ollama.ai",
  namespace: "library",
  name: "qwen2.5",
  tag: "72b",
  layers: [
    {
      mediaType: "application/vnd.ollama.image.model",
      size: 47_415_713_568,
      head: cached(() =>
        ggufHeader({
          tensors: [
            { name: "token_embd.weight", dims: [8192, 152_064], type: 12 },
            { name: "output.weight", dims: [8192, 152_064], type: 14 },
          ],
          kvs: [
            ["general.architecture", str("qwen2")],
            ["general.type", str("model")],
            ["general.name", str("Qwen2.5 72B Instruct")],
            ["qwen2.block_count", u32(80)],
            ["qwen2.context_length", u32(32_768)],
            ["qwen2.embedding_length", u32(8192)],
            ["qwen2.feed_forward_length", u32(29_568)],
            ["qwen2.attention.head_count", u32(64)],
            ["qwen2.attention.head_count_kv", u32(8)],
            ["qwen2.rope.freq_base", f32(1_000_000)],
            ["general.file_type", u32(15)],
            ...tokenizerKvs(152_064, 151_387, "qwen2"),
            ["general.quantization_version", u32(2)],
          ],
        }),
      ),
    },
    small("application/vnd.ollama.image.template", 1482),
    small("application/vnd.ollama.image.license", 11_343),
  ],
};

/**
 * A Hugging Face GGUF, an older conversion: no vocab_size, key_length or value_length, and its
 * tokenizer written before the architecture's keys, so the header runs past the first range.
 */
const hfLlama32_3b: FakeModel = {
  host: "hf.co",
  namespace: "bartowski",
  name: "Llama-3.2-3B-Instruct-GGUF",
  tag: "Q4_K_M",
  layers: [
    {
      mediaType: "application/vnd.ollama.image.model",
      size: 2_019_377_696,
      head: cached(() =>
        ggufHeader({
          tensors: [{ name: "token_embd.weight", dims: [3072, 128_256], type: 12 }],
          kvs: [
            ["general.architecture", str("llama")],
            ["general.name", str("Llama 3.2 3B Instruct")],
            ...tokenizerKvs(128_256, 280_147, "llama-bpe"),
            ["llama.block_count", u32(28)],
            ["llama.context_length", u32(131_072)],
            ["llama.embedding_length", u32(3072)],
            ["llama.feed_forward_length", u32(8192)],
            ["llama.attention.head_count", u32(24)],
            ["llama.attention.head_count_kv", u32(8)],
            ["llama.rope.freq_base", f32(500_000)],
            ["general.file_type", u32(15)],
            ["quantize.imatrix.file", str("/models_out/Llama-3.2-3B-Instruct-GGUF/Llama-3.2-3B-Instruct.imatrix")],
            ["quantize.imatrix.entries_count", { type: "i32", value: 196 }],
          ],
        }),
      ),
    },
    small("application/vnd.ollama.image.template", 1322),
    paramsLayer({ stop: ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], temperature: 0.6 }, 105),
  ],
};

/** A header that never ends within 32 MiB: a tokenizer array of 100 million (empty) strings. */
const bloated: FakeModel = {
  host: "registry.ollama.ai",
  namespace: "library",
  name: "bloated",
  tag: "latest",
  layers: [
    {
      mediaType: "application/vnd.ollama.image.model",
      size: 4_000_000_000,
      head: cached(() =>
        ggufHeader({
          kvs: [
            ["general.architecture", str("llama")],
            ["llama.block_count", u32(16)],
            ["tokenizer.ggml.tokens", { type: "array", of: "string", count: 100_000_000 }],
          ],
        }),
      ),
    },
  ],
};

/** A safetensors model (Ollama's MLX runtime only): tensor layers and no GGUF model layer. */
const mlxOnly: FakeModel = {
  host: "registry.ollama.ai",
  namespace: "library",
  name: "mlx-only",
  tag: "latest",
  layers: [
    small("application/vnd.ollama.image.tensor", 2_000_000_000),
    small("application/vnd.ollama.image.tensor", 1_000_000_000),
    small("application/vnd.ollama.image.template", 1000),
  ],
};

export const FAKE_MODELS = { llama32_1b, qwen25_32b, qwen25_72b, hfLlama32_3b, bloated, mlxOnly } as const;

// ---------------------------------------------------------------------------------------------
// The registry.

/** Where the registries' blob redirects go (the real ones: Cloudflare R2 for Ollama, a CAS bridge for hf.co). */
const CDN_HOST: Record<string, string> = {
  "registry.ollama.ai": "dd20bb891979d25aebc8bec07b2b3bbc.r2.cloudflarestorage.com",
  "hf.co": "cas-bridge.xethub.hf.co",
};
const REDIRECT_STATUS: Record<string, number> = { "registry.ollama.ai": 307, "hf.co": 302 };

/** A hang ends after this with the error the caller's timeout raises (see test/robustness/faulty.ts). */
const HANG_MS = 5;

export type RegistryDown = "5xx" | "network" | "hang" | null;

export interface RegistryRequest {
  kind: "manifest" | "blob" | "cdn";
  url: string;
  range: string | null;
  accept: string | null;
}

const keyOf = (m: Pick<FakeModel, "host" | "namespace" | "name" | "tag">) =>
  `${m.host}/${m.namespace}/${m.name}:${m.tag}`.toLowerCase();

async function sha256(bytes: Uint8Array): Promise<string> {
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(hash, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** A deterministic digest for a layer (the fake has no real blob to hash). */
function layerDigest(model: FakeModel, index: number): string {
  let h = 0x811c9dc5;
  for (const c of `${model.build ?? keyOf(model)}#${index}#${model.layers[index]!.size}`) {
    h = Math.imul(h ^ c.charCodeAt(0), 0x01000193);
  }
  return `sha256:${(h >>> 0).toString(16).padStart(8, "0").repeat(8)}`;
}

/** `size` bytes of a blob from `start`: its head, then zeros; made as read, never held whole. */
function blobStream(head: Uint8Array, start: number, size: number): ReadableStream<Uint8Array> {
  let at = start;
  const end = start + size;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (at >= end) {
        controller.close();
        return;
      }
      const n = Math.min(256 * 1024, end - at);
      const chunk = new Uint8Array(n);
      if (at < head.length) chunk.set(head.subarray(at, Math.min(head.length, at + n)));
      at += n;
      controller.enqueue(chunk);
    },
  });
}

export class OllamaRegistryFake implements FakeService {
  /** every request, in order */
  readonly requests: RegistryRequest[] = [];
  /** 5xx, a dropped connection or no answer at all, for every host of this fake */
  down: RegistryDown = null;
  /** every answer waits this long first */
  slowMs = 0;
  /** the CDN ignores Range and sends whole blobs (200) */
  ignoreRange = false;
  /** the CDN answers every blob read with this status (403 = the signed URL expired) */
  cdnStatus: number | null = null;
  private readonly models = new Map<string, FakeModel>();
  private readonly blobs = new Map<string, { model: FakeModel; layer: FakeLayer }>();
  private readonly registryHosts: Map<string, string>;

  /** `registryUrl`: where registry.ollama.ai references are served (OLLAMA_REGISTRY_URL) */
  constructor(registryUrl = "https://registry.ollama.ai", models: FakeModel[] = Object.values(FAKE_MODELS)) {
    this.registryHosts = new Map([
      [new URL(registryUrl).host, "registry.ollama.ai"],
      ["hf.co", "hf.co"],
      ["huggingface.co", "hf.co"],
    ]);
    for (const model of models) this.put(model);
  }

  /** Adds a model, or moves a tag to another build (a new manifest digest). */
  put(model: FakeModel): void {
    this.models.set(keyOf(model), model);
    model.layers.forEach((layer, i) => {
      this.blobs.set(layerDigest(model, i), { model, layer });
    });
  }

  remove(model: Pick<FakeModel, "host" | "namespace" | "name" | "tag">): void {
    this.models.delete(keyOf(model));
  }

  /** The manifest body the registry sends for a model, byte for byte. */
  manifestBody(model: FakeModel): string {
    return JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.docker.distribution.manifest.v2+json",
      config: {
        mediaType: "application/vnd.docker.container.image.v1+json",
        digest: layerDigest({ ...model, layers: [{ mediaType: "config", size: 485 }] }, 0),
        size: 485,
      },
      layers: model.layers.map((layer, i) => ({
        mediaType: layer.mediaType,
        digest: layerDigest(model, i),
        size: layer.size,
      })),
    });
  }

  /** What Ollama's /api/tags calls the model's digest, with the "sha256:" prefix. */
  async manifestDigest(model: FakeModel): Promise<string> {
    return `sha256:${await sha256(new TextEncoder().encode(this.manifestBody(model)))}`;
  }

  count(kind: RegistryRequest["kind"]): number {
    return this.requests.filter((r) => r.kind === kind).length;
  }

  handles(url: URL): boolean {
    return this.registryHosts.has(url.host) || Object.values(CDN_HOST).includes(url.host);
  }

  async handle(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const kind = this.registryHosts.has(url.host)
      ? url.pathname.includes("/manifests/")
        ? "manifest"
        : "blob"
      : "cdn";
    this.requests.push({
      kind,
      url: request.url,
      range: request.headers.get("Range"),
      accept: request.headers.get("Accept"),
    });
    if (this.slowMs > 0) await new Promise((resolve) => setTimeout(resolve, this.slowMs));
    switch (this.down) {
      case "5xx":
        return text("Service Unavailable", 503);
      case "network":
        throw new TypeError("Network connection lost.");
      case "hang":
        return new Promise((_, reject) => {
          const timeout = () => reject(new DOMException("The operation was aborted due to timeout", "TimeoutError"));
          if (request.signal.aborted) reject(request.signal.reason);
          request.signal.addEventListener("abort", () => reject(request.signal.reason));
          setTimeout(timeout, HANG_MS);
        });
    }
    if (kind === "cdn") return this.cdn(request, url);
    const host = this.registryHosts.get(url.host)!;
    const path = /^\/v2\/([^/]+)\/([^/]+)\/(manifests|blobs)\/([^/]+)$/.exec(url.pathname);
    if (request.method !== "GET" || !path)
      return json({ errors: [{ code: "UNSUPPORTED", message: "unsupported" }] }, 404);
    const [, namespace, name, what, ref] = path.map(decodeURIComponent) as [string, string, string, string, string];
    if (what === "manifests") {
      const model = this.models.get(keyOf({ host, namespace, name, tag: ref }));
      if (!model) {
        return json({ errors: [{ code: "MANIFEST_UNKNOWN", message: "manifest unknown", detail: { Tag: ref } }] }, 404);
      }
      return new Response(this.manifestBody(model), {
        status: 200,
        headers: { "Content-Type": "application/vnd.docker.distribution.manifest.v2+json" },
      });
    }
    if (!this.blobs.has(ref))
      return json({ errors: [{ code: "BLOB_UNKNOWN", message: "blob unknown to registry" }] }, 404);
    const hex = ref.replace("sha256:", "");
    const signed = `https://${CDN_HOST[host]}/blobs/sha256/${hex.slice(0, 2)}/${hex}/data?X-Amz-Expires=1200&X-Amz-Signature=f4k3s1gn4tur3`;
    return new Response(null, { status: REDIRECT_STATUS[host]!, headers: { Location: signed } });
  }

  private cdn(request: Request, url: URL): Response {
    const digest = `sha256:${url.pathname.split("/")[4] ?? ""}`;
    const blob = this.blobs.get(digest);
    if (!blob || !url.searchParams.has("X-Amz-Signature")) return text("AccessDenied", 403);
    if (this.cdnStatus !== null)
      return text(`<Error><Code>AccessDenied</Code><Url>${url}</Url></Error>`, this.cdnStatus);
    const head = blob.layer.head?.() ?? new Uint8Array(0);
    const size = blob.layer.size;
    const range = /^bytes=(\d+)-(\d*)$/.exec(request.headers.get("Range") ?? "");
    if (!range || this.ignoreRange) {
      return new Response(blobStream(head, 0, size), {
        status: 200,
        headers: { "Content-Length": String(size), "Accept-Ranges": "bytes" },
      });
    }
    const first = Number(range[1]);
    const last = Math.min(range[2] ? Number(range[2]) : size - 1, size - 1);
    if (first >= size) return new Response(null, { status: 416, headers: { "Content-Range": `bytes */${size}` } });
    return new Response(blobStream(head, first, last - first + 1), {
      status: 206,
      headers: { "Content-Range": `bytes ${first}-${last}/${size}`, "Content-Length": String(last - first + 1) },
    });
  }
}
