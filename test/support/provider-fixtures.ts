import type { MachineSpec, ProviderOffer } from "../../src/providers/types";

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

/** An RTX 4090 offer for both templates at 0.69 USD an hour; `overrides` names whose it is. */
export function providerOffer(
  overrides: Partial<ProviderOffer> & Pick<ProviderOffer, "offer_id" | "provider">,
): ProviderOffer {
  return {
    gpu: "RTX 4090",
    gpu_key: "rtx-4090",
    gpu_count: 1,
    vram_gb: 24,
    price_per_hour: 0.69,
    currency: "USD",
    cloud: null,
    availability: "high",
    location: null,
    bandwidth_gbs: null,
    download_mbs: null,
    download_cost_per_gb: 0,
    min_billed_minutes: 0,
    templates: ["ollama", "custom"],
    ...overrides,
  };
}

/** A RunPod secure-cloud RTX 4090 offer for `gpuCount` GPUs, as the RunPod adapters list it. */
export const runpodOffer = (offerId = "runpod:SECURE:NVIDIA GeForce RTX 4090", gpuCount = 1): ProviderOffer =>
  providerOffer({
    offer_id: offerId,
    provider: "runpod",
    cloud: "SECURE",
    gpu_count: gpuCount,
    vram_gb: 24 * gpuCount,
    price_per_hour: 0.69 * gpuCount,
  });
