import type { OllamaProbe } from "../../providers/types";
import type { ModelMachine } from "../model";
import type { SimSettings } from "../settings";
import { OLLAMA_VERSION, serveOllama } from "./http";
import {
  DEFAULT_SWITCHES,
  emptyState,
  type GpuMemory,
  type OllamaEnv,
  OllamaMachine,
  type OllamaState,
  type OllamaSwitches,
  parseEnv,
} from "./machine";
import { probeMachine } from "./probe";
import { pullManifest } from "./registry";

/** What a sim machine of the Ollama template keeps about its server (in its meta, as JSON). */
export interface SimOllamaMeta {
  env: OllamaEnv;
  /** the switches in force when the machine was created */
  switches: OllamaSwitches;
  version: string;
  state: OllamaState;
}

export interface SimOllamaSummary {
  /** GPULEASE_MODEL: what the start command pulls and loads */
  model: string | null;
  /** what the keeper's probe finds for that model now */
  probe: OllamaProbe;
}

/** Streams in the sim run on workerd's real clock: look at it a few times a second. */
const SIM_STREAMING = { tickMs: 250, tokenMs: 20, progressEveryMs: 500 };

export function simOllamaMeta(settings: SimSettings, image: string, env: Record<string, string>): SimOllamaMeta {
  const failure = settings.faults.pull_failure;
  return {
    env: parseEnv(env),
    switches: {
      ...DEFAULT_SWITCHES,
      downloadBytesPerS: settings.downloadMbs * 1e6,
      pullFailure: failure ? { error: failure.error, afterFraction: failure.after_fraction } : null,
      gpuFraction: settings.faults.partial_gpu,
    },
    version: /:(\d+\.\d+\.\d+[\w.-]*)$/.exec(image)?.[1] ?? OLLAMA_VERSION,
    state: emptyState(),
  };
}

export interface SimOllama {
  probe(model: string | null): Promise<OllamaProbe>;
  serve(request: Request, changed: () => void): Promise<Response>;
}

/** Where the sim's machines pull manifests from: the registry the worker sizes models from. */
export interface SimRegistry {
  url: string;
  fetch: typeof fetch;
}

/** The server of a machine whose server listens (machine.meta.ollama), or null for other templates. */
export function simOllama(
  machine: ModelMachine,
  at: { upAt: number; gpus: GpuMemory | null },
  registry: SimRegistry,
): SimOllama | null {
  const meta = metaOf(machine);
  if (!meta) return null;
  const server = new OllamaMachine(meta.state, {
    now: () => Date.now(),
    upAt: at.upAt,
    env: meta.env,
    gpus: at.gpus,
    switches: meta.switches,
    manifest: (name) => pullManifest(name, registry.url, registry.fetch),
  });
  return {
    probe: async (model) => {
      await server.prepare();
      return probeMachine(server, model);
    },
    serve: (request, changed) => serveOllama(server, request, { ...SIM_STREAMING, version: meta.version, changed }),
  };
}

/** What GET /v1/sim shows: the probe's view, worked out on a copy (looking changes nothing). */
export function simOllamaSummary(
  machine: ModelMachine,
  at: { upAt: number; gpus: GpuMemory | null; now: number } | null,
): SimOllamaSummary | null {
  const meta = metaOf(machine);
  if (!meta) return null;
  if (!at) return { model: meta.env.model, probe: { phase: "down" } };
  const copy = new OllamaMachine(structuredClone(meta.state), {
    now: () => at.now,
    upAt: at.upAt,
    env: meta.env,
    gpus: at.gpus,
    switches: meta.switches,
    manifest: async () => ({ ok: false, error: "not looked up" }),
  });
  return { model: meta.env.model, probe: probeMachine(copy, meta.env.model) };
}

function metaOf(machine: ModelMachine): SimOllamaMeta | null {
  const meta = machine.meta.ollama as SimOllamaMeta | null | undefined;
  return meta && typeof meta === "object" && meta.state ? meta : null;
}
