/** The host a model needs besides its GPU: container disk, vCPUs and RAM. */
export interface HostSizing {
  diskGb: number;
  vcpus: number;
  ramGb: number;
}

const clamp = (value: number, min: number, max: number) => Math.min(max, Math.max(min, value));

/**
 * Host sizing from the model weights (GB), after the earlier rental module's `wirt_bedarf` (docs/providers.md#sizing): a fixed 80 GB disk /
 * 32 GB RAM kept small hosts out of reach, so the need grows with the weights instead.
 * disk = clamp(1.5 × weights + 15, 25, 120) GB; 4 vCPU under 20 GB of weights, else 8;
 * RAM = clamp(weights + 8, 16, 64) GB.
 */
export function hostSizing(weightsGb: number): HostSizing {
  const weights = Math.max(0, weightsGb);
  return {
    diskGb: clamp(Math.floor(weights * 1.5) + 15, 25, 120),
    vcpus: weights < 20 ? 4 : 8,
    ramGb: clamp(Math.floor(weights) + 8, 16, 64),
  };
}

/**
 * The lean variant for one retry after a no-capacity answer: RunPod refused an RTX 4090 twice at
 * 26 GB RAM / 4 vCPU (2026-10-16, docs/providers.md#sizing) while Ollama keeps the weights in GPU memory and barely
 * touches host RAM. The disk stays: the weights still have to fit.
 */
export function leanHostSizing(weightsGb: number): HostSizing {
  return { ...hostSizing(weightsGb), vcpus: 2, ramGb: 15 };
}
