import { runnerFit } from "../../models/runner";
import { displayName, type LibraryModel, libraryModel, profileFacts } from "./library";
import { MANIFEST_UNKNOWN, type ManifestAnswer } from "./registry";

/**
 * The Ollama server of one simulated machine, on a clock the caller moves: which blobs are being
 * downloaded, which models are pulled and which are loaded. All of it is plain JSON (the sim keeps
 * it in its Durable Object's storage) and is brought up to date lazily by settle().
 *
 * Ollama's own rules it follows (ollama/ollama `server/download.go`, `server/images.go`,
 * `server/sched.go`):
 * - a blob download runs while at least one pull waits on it; when the last waiting pull goes
 *   away (its HTTP client hung up) the download is cancelled, keeping what it has for a later pull;
 * - the container's start command (`ollama pull "$GPULEASE_MODEL"`, then one load request with
 *   `keep_alive: -1`) is such a waiting pull, from the moment the server listens until it is done;
 * - a model is in `/api/ps` from the moment its runner is allocated, before it answers.
 * The manifests come from the registry (prepare(), before anything else looks at the state).
 */

export const MANIFEST_MS = 300;
const MIB = 1024 ** 2;

/** A machine's cards: how many, and the memory of each as the driver reports it. */
export interface GpuMemory {
  count: number;
  memoryMib: number;
}

export interface OllamaSwitches {
  /** bytes per second the machine downloads blobs at */
  downloadBytesPerS: number;
  /** bytes per second a pulled model loads into memory at */
  loadBytesPerS: number;
  /** every pull fails with Ollama's error text, after this share of the weights (0: at the manifest) */
  pullFailure: { error: string; afterFraction: number } | null;
  /** share of a loaded model on the GPUs, the rest on the CPU (null: as much as fits the VRAM) */
  gpuFraction: number | null;
}

export const DEFAULT_SWITCHES: OllamaSwitches = {
  downloadBytesPerS: 250e6,
  loadBytesPerS: 2e9,
  pullFailure: null,
  gpuFraction: null,
};

/** What the machine was started with (its env), parsed. */
export interface OllamaEnv {
  /** GPULEASE_MODEL: the start command pulls and loads it */
  model: string | null;
  /** OLLAMA_CONTEXT_LENGTH */
  contextLength: number | null;
  /** OLLAMA_KEEP_ALIVE in ms; null = forever (a negative value) */
  keepAliveMs: number | null;
  callbackUrl: string | null;
  callbackToken: string | null;
}

export function parseEnv(env: Record<string, string>): OllamaEnv {
  const ctx = Number(env.OLLAMA_CONTEXT_LENGTH);
  return {
    model: env.GPULEASE_MODEL?.trim() || null,
    contextLength: Number.isInteger(ctx) && ctx > 0 ? ctx : null,
    keepAliveMs: env.OLLAMA_KEEP_ALIVE === undefined ? 5 * 60_000 : parseKeepAlive(env.OLLAMA_KEEP_ALIVE, 5 * 60_000),
    callbackUrl: env.GPULEASE_CALLBACK_URL ?? null,
    callbackToken: env.GPULEASE_CALLBACK_TOKEN ?? null,
  };
}

/** Ollama's keep_alive: seconds as a number, a Go duration ("5m", "1h30m"), negative = forever (null). */
export function parseKeepAlive(value: unknown, fallbackMs: number | null): number | null {
  if (typeof value === "number" && Number.isFinite(value)) return value < 0 ? null : value * 1000;
  if (typeof value !== "string" || !value.trim()) return fallbackMs;
  const text = value.trim();
  if (/^-?\d+(\.\d+)?$/.test(text)) return Number(text) < 0 ? null : Number(text) * 1000;
  const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
  const negative = text.startsWith("-");
  let total = 0;
  const body = negative ? text.slice(1) : text;
  const parts = [...body.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)];
  if (parts.map((p) => p[0]).join("") !== body) return fallbackMs;
  for (const [, amount, unit] of parts) total += Number(amount) * units[unit!]!;
  return negative ? null : total;
}

export interface Download {
  /** bytes of the weights blob on disk */
  completed: number;
  total: number;
  /** when `completed` was counted */
  at: number;
  /** HTTP pulls waiting on it now */
  waiting: number;
  /** the start command's pull waits on it */
  startCommand: boolean;
}

export interface Loaded {
  /** the runner was allocated: from here on the model is in /api/ps */
  startedAt: number;
  /** it answers from here on */
  readyAt: number;
  /** null: never unloads (keep_alive < 0) */
  expiresAt: number | null;
  size: number;
  sizeVram: number;
  contextLength: number;
}

export interface OllamaState {
  /** what the registry answered for each name pulled */
  manifests: Record<string, ManifestAnswer>;
  downloads: Record<string, Download>;
  /** manifest written: name -> when */
  pulled: Record<string, number>;
  loaded: Record<string, Loaded>;
  /** the start command: not begun, pulling, done (pulled and loading/loaded) or failed */
  startCommand: "idle" | "pulling" | "done" | "failed";
  /** why the start command's pull failed, and when */
  failure: { error: string; at: number } | null;
  /** a pull that failed, per name, for the pulls waiting on it (cleared by the next pull) */
  failed: Record<string, { error: string; at: number }>;
}

export function emptyState(): OllamaState {
  return { manifests: {}, downloads: {}, pulled: {}, loaded: {}, startCommand: "idle", failure: null, failed: {} };
}

/** What the machine around the server tells it. */
export interface OllamaHost {
  now(): number;
  /** when `ollama serve` began listening */
  upAt: number;
  env: OllamaEnv;
  /** the cards; null when unknown (then everything fits) */
  gpus: GpuMemory | null;
  switches: OllamaSwitches;
  /** GET the manifest from the registry (what `ollama pull` does first) */
  manifest(name: string): Promise<ManifestAnswer>;
}

/** One simulated server: its state and the machine it runs on. */
export class OllamaMachine {
  constructor(
    readonly state: OllamaState,
    readonly host: OllamaHost,
  ) {}

  now(): number {
    return this.host.now();
  }

  listening(): boolean {
    return this.now() >= this.host.upAt;
  }

  /**
   * Fetches the manifests the server needs now: the start command's model once the server
   * listens, and `reference` (an HTTP pull: asked again if it failed before, as Ollama does).
   */
  async prepare(reference?: string): Promise<void> {
    const wanted: [string, boolean][] = [];
    if (this.host.env.model && this.listening()) wanted.push([this.host.env.model, false]);
    if (reference) wanted.push([reference, true]);
    for (const [ref, again] of wanted) {
      const name = displayName(ref);
      if (!name || this.#switchRefusal()) continue;
      const known = this.state.manifests[name];
      if (known && (known.ok || !again)) continue;
      this.state.manifests[name] = await this.host.manifest(name);
    }
  }

  /** The pulled or pulling model by its name, from the manifest the registry gave. */
  model(name: string): LibraryModel | undefined {
    const manifest = this.state.manifests[name];
    return manifest?.ok ? libraryModel(name, manifest) : undefined;
  }

  /** Brings downloads, the start command and loaded models up to now. */
  settle(): void {
    const now = this.now();
    const s = this.state;
    const env = this.host.env;
    const startName = env.model ? displayName(env.model) : null;
    const ready = startName === null || this.#switchRefusal() || s.manifests[startName] !== undefined;
    if (env.model && s.startCommand === "idle" && now >= this.host.upAt + MANIFEST_MS && ready) {
      this.#beginStartCommand(env.model, this.host.upAt + MANIFEST_MS);
    }
    for (const [name, download] of Object.entries(s.downloads)) this.#advance(name, download, now);
    for (const [name, loaded] of Object.entries(s.loaded)) {
      if (loaded.expiresAt !== null && now >= loaded.expiresAt) delete s.loaded[name];
    }
  }

  /** A pull asked over HTTP: the manifest now, then waiting on the download (release when done). */
  attachPull(reference: string): { ok: true; name: string } | { ok: false; error: string } {
    this.settle();
    const name = displayName(reference) ?? reference;
    delete this.state.failed[name];
    const refusal = this.#manifestRefusal(name);
    const model = this.model(name);
    if (refusal || !model) return { ok: false, error: refusal ?? MANIFEST_UNKNOWN };
    if (this.state.pulled[name] !== undefined) return { ok: true, name };
    const download = this.state.downloads[name] ?? this.#newDownload(name, model, this.now());
    download.waiting += 1;
    return { ok: true, name };
  }

  /** The HTTP client of a pull went away (or it finished): it stops waiting on the download. */
  detachPull(name: string): void {
    this.settle();
    const download = this.state.downloads[name];
    if (download) download.waiting = Math.max(0, download.waiting - 1);
  }

  /** The download's state for a pull waiting on `name`. */
  pullState(
    name: string,
  ):
    | { phase: "downloading"; completed: number; total: number }
    | { phase: "pulled" }
    | { phase: "failed"; error: string } {
    this.settle();
    if (this.state.pulled[name] !== undefined) return { phase: "pulled" };
    const failed = this.state.failed[name];
    if (failed) return { phase: "failed", error: failed.error };
    const download = this.state.downloads[name];
    if (!download) return { phase: "failed", error: "context canceled" };
    return { phase: "downloading", completed: Math.floor(download.completed), total: download.total };
  }

  /**
   * A request that needs the model in memory: loads it (or keeps it loaded) with this keep-alive
   * and context. A load the start command began is finished now rather than waited for.
   * Returns what it took to load, in ms (0 when it was loaded already).
   */
  use(name: string, keepAliveMs: number | null, contextLength: number | null): { loadMs: number } | null {
    this.settle();
    const model = this.model(name);
    if (!model || this.state.pulled[name] === undefined) return null;
    const now = this.now();
    const current = this.state.loaded[name];
    const ctx = this.#contextLength(model, contextLength);
    // A new context length means a new runner, as in Ollama's scheduler.
    const loaded = current && current.contextLength === ctx ? current : this.#load(model, now, ctx);
    this.state.loaded[name] = loaded;
    const loadMs = Math.max(0, loaded.readyAt - now);
    loaded.readyAt = Math.min(loaded.readyAt, now);
    loaded.expiresAt = keepAliveMs === null ? null : now + keepAliveMs;
    return { loadMs };
  }

  unload(name: string): void {
    this.settle();
    delete this.state.loaded[name];
  }

  pulledModels(): { model: LibraryModel; at: number }[] {
    this.settle();
    return Object.entries(this.state.pulled).flatMap(([name, at]) => {
      const model = this.model(name);
      return model ? [{ model, at }] : [];
    });
  }

  loadedModels(): { model: LibraryModel; loaded: Loaded }[] {
    this.settle();
    const now = this.now();
    return Object.entries(this.state.loaded).flatMap(([name, loaded]) => {
      const model = this.model(name);
      return model && loaded.startedAt <= now ? [{ model, loaded }] : [];
    });
  }

  /** The default keep-alive of a request that names none (OLLAMA_KEEP_ALIVE, else 5 minutes). */
  defaultKeepAliveMs(): number | null {
    return this.host.env.keepAliveMs;
  }

  // ---- internals ----

  #beginStartCommand(reference: string, at: number): void {
    const s = this.state;
    const name = displayName(reference) ?? reference;
    const refusal = this.#manifestRefusal(name);
    const model = this.model(name);
    if (refusal || !model) {
      s.startCommand = "failed";
      s.failure = { error: refusal ?? MANIFEST_UNKNOWN, at };
      return;
    }
    s.startCommand = "pulling";
    if (s.pulled[name] !== undefined) {
      this.#startCommandPulled(name, model, at);
      return;
    }
    const download = s.downloads[name] ?? this.#newDownload(name, model, at);
    download.startCommand = true;
  }

  /** The pull-failure switch at the manifest: the registry refuses whatever it is asked. */
  #switchRefusal(): string | null {
    const failure = this.host.switches.pullFailure;
    return failure && failure.afterFraction <= 0 ? failure.error : null;
  }

  #manifestRefusal(name: string): string | null {
    const refusal = this.#switchRefusal();
    if (refusal) return refusal;
    const manifest = this.state.manifests[name];
    return manifest && !manifest.ok ? manifest.error : manifest ? null : MANIFEST_UNKNOWN;
  }

  #newDownload(name: string, model: LibraryModel, at: number): Download {
    const download: Download = { completed: 0, total: model.model.size, at, waiting: 0, startCommand: false };
    this.state.downloads[name] = download;
    return download;
  }

  /** Counts the bytes downloaded since `download.at`, while anyone waited; finishes or fails it. */
  #advance(name: string, download: Download, now: number): void {
    if (now <= download.at) return;
    const held = download.startCommand || download.waiting > 0;
    if (!held) {
      download.at = now;
      return;
    }
    const speed = this.host.switches.downloadBytesPerS / 1000;
    const failure = this.host.switches.pullFailure;
    const failAt = failure ? failure.afterFraction * download.total : Number.POSITIVE_INFINITY;
    const reached = download.completed + (now - download.at) * speed;
    if (reached >= failAt && failAt < download.total && failure) {
      const at = download.at + (failAt - download.completed) / speed;
      this.#fail(name, download, failure.error, Math.ceil(at));
      return;
    }
    if (reached >= download.total) {
      const at = Math.ceil(download.at + (download.total - download.completed) / speed);
      delete this.state.downloads[name];
      this.state.pulled[name] = at;
      const model = this.model(name);
      if (download.startCommand && model) this.#startCommandPulled(name, model, at);
      return;
    }
    download.completed = reached;
    download.at = now;
  }

  #fail(name: string, download: Download, error: string, at: number): void {
    delete this.state.downloads[name];
    this.state.failed[name] = { error, at };
    if (download.startCommand) {
      this.state.startCommand = "failed";
      this.state.failure = { error, at };
    }
  }

  /** The start command's load request (`keep_alive: -1`) follows its pull at once. */
  #startCommandPulled(name: string, model: LibraryModel, at: number): void {
    this.state.startCommand = "done";
    if (!this.state.loaded[name]) {
      this.state.loaded[name] = { ...this.#load(model, at, this.#contextLength(model, null)), expiresAt: null };
    }
  }

  /**
   * The runner's physics (src/models/runner.ts, the rule of the Ollama gpulease pins): the model
   * takes its weights, KV cache and compute buffer; when a card cannot keep llama.cpp's margin
   * free, layers go to the CPU and `/api/ps` shows `size_vram < size`.
   */
  #load(model: LibraryModel, at: number, contextLength: number): Loaded {
    const facts = profileFacts(model);
    const gpus = this.host.gpus ?? { count: 1, memoryMib: Number.MAX_SAFE_INTEGER / MIB };
    const fit = runnerFit(facts, contextLength, { count: gpus.count, memoryMib: gpus.memoryMib, flashAttention: true });
    const kv = fit.cards.reduce((sum, c) => sum + c.kv, 0);
    const compute = fit.cards.reduce((sum, c) => sum + c.compute, 0);
    const size = model.model.size + kv + compute;
    const onGpu = fit.fits ? size : Math.floor((size * fit.layersOnGpu) / fit.layers);
    return {
      startedAt: at,
      readyAt: at + Math.round((model.model.size / this.host.switches.loadBytesPerS) * 1000),
      expiresAt: this.host.env.keepAliveMs === null ? null : at + this.host.env.keepAliveMs,
      size,
      sizeVram: this.#onGpu(size, onGpu),
      contextLength,
    };
  }

  #onGpu(size: number, byRule: number): number {
    const fraction = this.host.switches.gpuFraction;
    if (fraction !== null) return Math.floor(size * Math.min(1, Math.max(0, fraction)));
    return byRule;
  }

  /** num_ctx, else OLLAMA_CONTEXT_LENGTH, else Ollama's default by VRAM (4k, 32k from 23 GiB, 256k from 47 GiB); at most the model's own. */
  #contextLength(model: LibraryModel, requested: number | null): number {
    const vram = this.host.gpus ? this.host.gpus.count * this.host.gpus.memoryMib * MIB : 0;
    const byVram = vram >= 47 * 1024 * MIB ? 262_144 : vram >= 23 * 1024 * MIB ? 32_768 : 4_096;
    // A request's num_ctx, else the model's own (its params layer), else OLLAMA_CONTEXT_LENGTH (server/routes.go).
    const wanted = requested ?? model.profile.num_ctx ?? this.host.env.contextLength ?? byVram;
    return Math.min(wanted, model.profile.context_length);
  }
}
