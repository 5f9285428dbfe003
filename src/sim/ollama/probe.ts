import type { OllamaProbe } from "../../providers/types";
import { displayName } from "./library";
import type { OllamaMachine } from "./machine";

/**
 * What the keeper's probe (src/providers/ollama.ts `probeOllama`: /api/tags, a one-token
 * generation, /api/ps) would conclude about this server, read straight from its state. Like the
 * probe's generation it loads a pulled model nobody loaded yet; a load the start command began
 * is `loading` until it is done. The digest is the one /api/tags lists.
 */
export function probeMachine(machine: OllamaMachine, model: string | null): OllamaProbe {
  if (!machine.listening()) return { phase: "down" };
  if (model === null) return { phase: "ready", digest: "" };
  machine.settle();
  const name = displayName(model);
  if (!name) return { phase: "failed", error: "invalid model name" };
  const state = machine.state;
  const failed = state.failed[name];
  if (failed) return { phase: "failed", error: failed.error };
  const startModel = machine.host.env.model ? displayName(machine.host.env.model) : null;
  if (state.startCommand === "failed" && startModel === name && state.failure)
    return { phase: "failed", error: state.failure.error };
  const pulled = machine.pulledModels().find((p) => p.model.name === name);
  if (!pulled) {
    const download = state.downloads[name];
    return download
      ? { phase: "pulling", completed: Math.floor(download.completed), total: download.total }
      : { phase: "pulling", completed: null, total: null };
  }
  const digest = pulled.model.digest;
  if (!machine.loadedModels().some((l) => l.model.name === name)) machine.use(name, null, null);
  const entry = machine.loadedModels().find((l) => l.model.name === name);
  if (!entry) return { phase: "loading", digest };
  if (entry.loaded.sizeVram < entry.loaded.size)
    return { phase: "spilled", digest, size: entry.loaded.size, size_vram: entry.loaded.sizeVram };
  return entry.loaded.readyAt <= machine.now()
    ? { phase: "ready", digest, loaded_at: entry.loaded.readyAt }
    : { phase: "loading", digest };
}
