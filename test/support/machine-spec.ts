import type { MachineSpec } from "../../src/providers/types";

/** What the rent path hands an adapter for an Ollama lease, with `over` on top. */
export const ollamaSpec = (over: Partial<MachineSpec> = {}): MachineSpec => ({
  label: "gpulease-lse01",
  template: "ollama",
  image: "ollama/ollama:latest",
  cmd: null,
  env: {},
  ports: [11434],
  disk_gb: 40,
  weights_gb: 18,
  context_length: 8192,
  max_minutes: 60,
  ...over,
});

/** What the rent path hands an adapter for a custom batch image (no HTTP ports), with `over` on top. */
export const batchSpec = (over: Partial<MachineSpec> = {}): MachineSpec => ({
  label: "gpulease-lse01",
  template: "custom",
  image: "ghcr.io/you/batch:1",
  cmd: "python /app/run.py",
  env: {},
  ports: [],
  disk_gb: 40,
  weights_gb: 0,
  context_length: null,
  max_minutes: 60,
  ...over,
});
