import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { loadSettings } from "../config";
import { gpuSpecByKey } from "../providers/gpus";
import type { OllamaProbe } from "../providers/types";
import { SIM_CATALOGUE, simGpuType } from "./catalogue";
import { CloudModel, type ModelMachine, type ModelState, type TerminateOutcome } from "./model";
import { libraryFetch, SIM_LIBRARY_URL } from "./ollama/library-registry";
import type { GpuMemory } from "./ollama/machine";
import { type SimOllama, type SimOllamaSummary, simOllama, simOllamaMeta, simOllamaSummary } from "./ollama/sim";
import {
  applyConfigPatch,
  DEFAULT_EXIT_REASON,
  DEFAULT_SETTINGS,
  hasNoCapacity,
  type SimConfigPatch,
  SimConfigPatchSchema,
  type SimSettings,
  withDefaults,
} from "./settings";

/** What a provider's API would show for a machine: a lingering machine shows its last state. */
export type SimShownState = "booting" | "running" | "exited" | "gone";

export interface SimMachineView {
  ref: string;
  label: string | null;
  gpu: string;
  gpu_count: number;
  price_per_hour: number;
  /** epoch ms */
  created_at: number;
  /** the model's truth (GET /v1/sim shows it) */
  state: ModelState;
  /** what the adapter reports */
  shown: SimShownState;
  running_since: number | null;
  terminate_requested_at: number | null;
  /** Ollama answers (readySeconds after running, until terminated or exited) */
  ready: boolean;
  /** USD billed from creation until now, terminate or exit */
  cost_usd: number;
  error: string | null;
  template: string;
  ports: number[];
  /** where the worker that rented it answers (null: not said at create) */
  origin: string | null;
  ignore_terminates: number;
  /** the machine's Ollama server and its models (Ollama template only) */
  ollama: SimOllamaSummary | null;
}

export interface SimStock {
  slug: string;
  name: string;
  vram_gb: number;
  price_per_gpu_hour: number;
  counts: number[];
  /** GPUs not held by a machine that still exists */
  free: number;
  /** how fast its machines download model weights */
  download_mbs: number;
}

export interface SimCreate {
  gpu: string;
  gpu_count: number;
  label: string | null;
  template: string;
  image: string;
  ports: number[];
  /** the machine's environment (GPULEASE_MODEL, OLLAMA_CONTEXT_LENGTH, the call-back, ...) */
  env?: Record<string, string>;
  /** where the worker that rented it answers: its ports are served there */
  origin?: string | null;
}

export type SimCreateResult =
  | { ok: true; machine: SimMachineView }
  | { ok: false; kind: "no_capacity" | "rejected" | "error_but_created"; error: string };

/** A read a fault can fail; the adapter turns `ok: false` into a ProviderError. */
export type SimRead<T> = { ok: true; value: T } | { ok: false; error: string };

export interface SimPlant {
  label: string | null;
  gpu?: string;
  gpu_count?: number;
  /** created this long ago (the reaper's grace period counts from creation) */
  age_seconds?: number;
}

export interface SimDescription {
  settings: SimSettings;
  balance_usd: number;
  machines: SimMachineView[];
}

// RunPod's wording: the sim answers the way the real clouds do so the renting logic meets it.
export const SIM_NO_CAPACITY =
  "There are no longer any instances available with the requested specifications. Please refresh and try again.";

const StoredSchema = z.object({
  settings: z.custom<SimSettings>((v) => typeof v === "object" && v !== null),
  spentUsd: z.number(),
  machines: z.array(z.custom<ModelMachine>((v) => typeof v === "object" && v !== null)),
});
type Stored = z.infer<typeof StoredSchema>;

const STATE_KEY = "state";

/** The one simulated cloud (adapter, control routes, tests and benches all reach this instance). */
export function simCloud(namespace: DurableObjectNamespace): DurableObjectStub<SimCloud> {
  return (namespace as DurableObjectNamespace<SimCloud>).getByName("sim");
}

/**
 * The simulated cloud: one instance (getByName("sim")) holds every machine in a CloudModel,
 * persisted in the object's SQLite-backed KV after each change. Its clock is Date.now of the
 * Durable Object, which in workerd only advances across I/O; in vitest-pool-workers the object
 * runs in the test's isolate, so vi.setSystemTime moves it too (see test/sim/cloud.test.ts).
 * Every method is synchronous inside (sync KV), so each call is atomic.
 */
export class SimCloud extends DurableObject<Env> {
  #model = new CloudModel({ now: () => Date.now() });
  #settings: SimSettings = DEFAULT_SETTINGS;
  #spentUsd = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    const parsed = StoredSchema.safeParse(ctx.storage.kv.get(STATE_KEY));
    if (parsed.success) this.#load(parsed.data);
  }

  offers(): SimStock[] {
    this.#settle();
    return SIM_CATALOGUE.map((t) => ({
      slug: t.slug,
      name: t.name,
      vram_gb: t.vram_gb,
      price_per_gpu_hour: t.price_per_gpu_hour,
      counts: [...t.counts],
      free: this.#free(t.slug),
      download_mbs: this.#settings.downloadMbs,
    }));
  }

  create(input: SimCreate): SimCreateResult {
    this.#settle();
    const type = simGpuType(input.gpu);
    if (!type) return { ok: false, kind: "rejected", error: `unknown GPU type "${input.gpu}"` };
    if (!type.counts.includes(input.gpu_count)) {
      return { ok: false, kind: "rejected", error: `${type.name} is not offered with ${input.gpu_count} GPUs` };
    }
    const faults = this.#settings.faults;
    if (hasNoCapacity(faults, type.slug) || this.#free(type.slug) < input.gpu_count) {
      return { ok: false, kind: "no_capacity", error: SIM_NO_CAPACITY };
    }
    const pricePerHour = round(type.price_per_gpu_hour * input.gpu_count, 4);
    if (this.#balance() < pricePerHour) {
      return { ok: false, kind: "rejected", error: "insufficient balance: add credit to rent this machine" };
    }
    const machine = this.#model.create({
      id: newRef(),
      label: input.label,
      offerKey: type.slug,
      gpuCount: input.gpu_count,
      pricePerHour,
      bootMs: faults.stuck_booting ? Number.POSITIVE_INFINITY : this.#settings.bootSeconds * 1000,
      lingerMs: this.#settings.lingerSeconds * 1000,
      ignoreTerminates: faults.ignore_terminates,
      failStart: faults.fail_start,
      meta: {
        template: input.template,
        image: input.image,
        ports: input.ports,
        origin: input.origin ?? null,
        readyMs: this.#settings.readySeconds * 1000,
        ollama: input.template === "ollama" ? simOllamaMeta(this.#settings, input.image, input.env ?? {}) : null,
      },
    });
    if (faults.exit) scheduleExit(machine, faults.exit.after_seconds, faults.exit.reason);
    this.#save();
    if (faults.error_but_created) {
      return {
        ok: false,
        kind: "error_but_created",
        error: "internal server error while creating the machine (simulated)",
      };
    }
    return { ok: true, machine: this.#view(machine) };
  }

  status(ref: string): SimRead<SimMachineView | null> {
    this.#settle();
    if (this.#settings.faults.status_error)
      return { ok: false, error: "status read failed: internal server error (simulated)" };
    const machine = this.#model.get(ref);
    return { ok: true, value: machine ? this.#view(machine) : null };
  }

  /** Machines that still exist (lingering ones included), oldest first. */
  list(): SimRead<SimMachineView[]> {
    this.#settle();
    if (this.#settings.faults.listing_error)
      return { ok: false, error: "listing failed: internal server error (simulated)" };
    return { ok: true, value: this.#model.list().map((m) => this.#view(m)) };
  }

  terminate(ref: string): TerminateOutcome {
    this.#settle();
    const outcome = this.#model.terminate(ref);
    this.#save();
    return outcome;
  }

  balance(): number {
    this.#settle();
    return round(this.#balance(), 4);
  }

  /** How far the machine's Ollama server is with `model` (what probeOllama would find). */
  async ollamaProbe(ref: string, model: string | null): Promise<OllamaProbe> {
    this.#settle();
    const server = this.#ollama(ref);
    const probe = server ? await server.probe(model) : ({ phase: "down" } as const);
    this.#save();
    return probe;
  }

  /**
   * The machines' Ollama servers over HTTP: `/sim/ollama/{ref}/<Ollama path>` (the worker's
   * route forwards here). A machine whose server does not listen answers like RunPod's proxy.
   */
  override async fetch(request: Request): Promise<Response> {
    this.#settle();
    const match = /^\/sim\/ollama\/([^/]+)(\/.*)?$/.exec(new URL(request.url).pathname);
    if (!match) return new Response("Not Found", { status: 404 });
    const ref = decodeURIComponent(match[1]!);
    if (!this.#model.get(ref)) return new Response("Not Found", { status: 404 });
    const server = this.#ollama(ref);
    if (!server) return new Response("Bad Gateway", { status: 502, headers: { "Content-Type": "text/plain" } });
    const url = new URL(request.url);
    url.pathname = match[2] ?? "/";
    return server.serve(new Request(url, request), () => this.#save());
  }

  // ---- control (the admin routes, tests and benches) ----

  configure(patch: SimConfigPatch): SimSettings {
    this.#settle();
    const parsed = SimConfigPatchSchema.parse(patch);
    this.#settings = applyConfigPatch(this.#settings, parsed);
    const exit = this.#settings.faults.exit;
    // Switching `exit` on also kills the machines alive now: that is how a demo shows a lease dying.
    if (exit && parsed.faults?.exit !== undefined) {
      for (const machine of this.#model.list()) {
        if (machine.terminateRequestedAt === null && machine.exitedAt === null) {
          scheduleExit(machine, exit.after_seconds, exit.reason);
        }
      }
    }
    this.#save();
    return this.#settings;
  }

  /** Back to the defaults: no machines, no faults, full credit. */
  reset(): SimSettings {
    this.#model.restore([]);
    this.#settings = DEFAULT_SETTINGS;
    this.#spentUsd = 0;
    this.#save();
    return this.#settings;
  }

  describe(): SimDescription {
    this.#settle();
    return {
      settings: this.#settings,
      balance_usd: round(this.#balance(), 4),
      machines: this.#model.list().map((m) => this.#view(m)),
    };
  }

  /** A machine that appears without a rent call (a leaked machine for the reaper to find). */
  plant(input: SimPlant): SimMachineView {
    this.#settle();
    const type = simGpuType(input.gpu ?? "rtx-4090") ?? SIM_CATALOGUE[0]!;
    const gpuCount = input.gpu_count ?? 1;
    const machine = this.#model.create({
      id: newRef(),
      label: input.label,
      offerKey: type.slug,
      gpuCount,
      pricePerHour: round(type.price_per_gpu_hour * gpuCount, 4),
      bootMs: this.#settings.bootSeconds * 1000,
      lingerMs: this.#settings.lingerSeconds * 1000,
      meta: { template: "custom", image: "planted", ports: [], readyMs: this.#settings.readySeconds * 1000 },
    });
    machine.createdAt -= (input.age_seconds ?? 0) * 1000;
    this.#save();
    return this.#view(machine);
  }

  /** The machine vanishes at once, as if reaped behind our back. False when there was none. */
  remove(ref: string): boolean {
    this.#settle();
    const machine = this.#model.get(ref);
    if (!machine) return false;
    this.#spentUsd += this.#cost(machine);
    this.#model.remove(ref);
    this.#save();
    return true;
  }

  /** The machine dies on its own now. False when there was none. */
  exit(ref: string, reason: string = DEFAULT_EXIT_REASON): boolean {
    this.#settle();
    const machine = this.#model.get(ref);
    if (!machine || this.#model.state(ref) === "gone") return false;
    this.#model.exit(ref, reason);
    this.#save();
    return true;
  }

  // ---- internals (#private: not exposed over RPC) ----

  #load(stored: Stored): void {
    this.#settings = withDefaults(stored.settings);
    this.#spentUsd = stored.spentUsd;
    this.#model.restore(stored.machines);
    // Pull streams do not outlive the object: none waits on a download any more.
    for (const machine of this.#model.machines.values()) {
      const ollama = machine.meta.ollama as { state?: { downloads?: Record<string, { waiting: number }> } } | null;
      for (const download of Object.values(ollama?.state?.downloads ?? {})) download.waiting = 0;
    }
  }

  /** The Ollama server of a machine whose server listens now, or null. */
  #ollama(ref: string): SimOllama | null {
    const machine = this.#model.get(ref);
    const host = machine && this.#ollamaHost(machine);
    if (!machine || !host) return null;
    // The registry the worker sized from: the sim's library (in process), or OLLAMA_REGISTRY_URL.
    const { config } = loadSettings(this.env);
    const registry =
      config.simModels === "library"
        ? { url: SIM_LIBRARY_URL, fetch: libraryFetch as typeof fetch }
        : { url: config.ollamaRegistryUrl, fetch: ((input, init) => fetch(input, init)) as typeof fetch };
    return simOllama(machine, host, registry);
  }

  /** When the machine's server began listening and the VRAM it has; null while it does not listen. */
  #ollamaHost(machine: ModelMachine): { upAt: number; gpus: GpuMemory | null } | null {
    const runningSince = this.#model.runningSince(machine.id);
    if (this.#model.state(machine.id) !== "running" || runningSince === null) return null;
    const upAt = runningSince + readyMsOf(machine);
    if (this.#model.now() < upAt) return null;
    const type = simGpuType(machine.offerKey);
    const spec = type ? gpuSpecByKey(type.slug) : undefined;
    return { upAt, gpus: spec ? { count: machine.gpuCount, memoryMib: spec.memory_mib } : null };
  }

  #save(): void {
    const stored: Stored = { settings: this.#settings, spentUsd: this.#spentUsd, machines: this.#model.snapshot() };
    this.ctx.storage.kv.put(STATE_KEY, stored);
  }

  /** Forgets machines that are gone, keeping what they cost in the account's spend. */
  #settle(): void {
    let changed = false;
    for (const machine of [...this.#model.machines.values()]) {
      if (this.#model.state(machine.id) === "gone") {
        this.#spentUsd += this.#cost(machine);
        this.#model.remove(machine.id);
        changed = true;
      }
    }
    if (changed) this.#save();
  }

  #free(slug: string): number {
    const type = simGpuType(slug);
    if (!type) return 0;
    const used = this.#model
      .list()
      .filter((m) => m.offerKey === slug)
      .reduce((sum, m) => sum + m.gpuCount, 0);
    return Math.max(0, type.stock * (this.#settings.stockScale ?? 1) - used);
  }

  #cost(machine: ModelMachine): number {
    return machine.pricePerHour * this.#model.billedHours(machine.id, "created");
  }

  #balance(): number {
    const live = [...this.#model.machines.values()].reduce((sum, m) => sum + this.#cost(m), 0);
    return this.#settings.creditUsd - this.#spentUsd - live;
  }

  #view(machine: ModelMachine): SimMachineView {
    const state = this.#model.state(machine.id);
    const now = this.#model.now();
    const shown: SimShownState = state === "gone" ? "gone" : shownAt(machine, machine.terminateRequestedAt ?? now);
    const runningSince = this.#model.runningSince(machine.id);
    const ready = state === "running" && runningSince !== null && now >= runningSince + readyMsOf(machine);
    const error = shown === "exited" ? exitError(machine, machine.terminateRequestedAt ?? now) : null;
    return {
      ref: machine.id,
      label: machine.label,
      gpu: machine.offerKey,
      gpu_count: machine.gpuCount,
      price_per_hour: machine.pricePerHour,
      created_at: machine.createdAt,
      state,
      shown,
      running_since: machine.failStart ? null : runningSince,
      terminate_requested_at: machine.terminateRequestedAt,
      ready,
      cost_usd: round(this.#cost(machine), 6),
      error,
      template: typeof machine.meta.template === "string" ? machine.meta.template : "custom",
      ports: Array.isArray(machine.meta.ports) ? (machine.meta.ports as number[]) : [],
      origin: typeof machine.meta.origin === "string" ? machine.meta.origin : null,
      ignore_terminates: machine.ignoreTerminates,
      ollama: simOllamaSummary(machine, ready ? { ...this.#ollamaHost(machine)!, now } : null),
    };
  }
}

function readyMsOf(machine: ModelMachine): number {
  return typeof machine.meta.readyMs === "number" ? machine.meta.readyMs : 0;
}

/** The state a provider's API would report at time `t`, ignoring terminate. */
function shownAt(m: ModelMachine, t: number): Exclude<SimShownState, "gone"> {
  if (m.exitedAt !== null && t >= m.exitedAt) return "exited";
  if (t < m.createdAt + m.bootMs) return "booting";
  // A failed start shows as exited with the reason, like a Vast instance with an OCI error.
  return m.failStart ? "exited" : "running";
}

/** Why an exited machine stopped: it died on its own, or it never started. */
function exitError(m: ModelMachine, t: number): string | null {
  return m.exitedAt !== null && t >= m.exitedAt ? m.exitReason : m.failStart;
}

/** The machine will die `afterSeconds` after it comes up (or now, if it has been up longer). */
function scheduleExit(m: ModelMachine, afterSeconds: number, reason: string): void {
  if (!Number.isFinite(m.bootMs)) return;
  m.exitedAt = Math.max(Date.now(), m.createdAt + m.bootMs + afterSeconds * 1000);
  m.exitReason = reason;
}

function newRef(): string {
  return `sim-${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
}

function round(value: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}
