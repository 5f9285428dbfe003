import { gpuSpecByKey } from "../providers/gpus";

/** One GPU type the simulated cloud rents out. */
export interface SimGpuType {
  /** slug, also the key into the GPU spec table (src/providers/gpus.ts) */
  slug: string;
  name: string;
  /** per card */
  vram_gb: number;
  /** USD per GPU-hour, in line with RunPod secure-cloud prices */
  price_per_gpu_hour: number;
  /** GPUs of this type in the whole simulated cloud: machines in use take them out of stock */
  stock: number;
  /** machine sizes offered */
  counts: number[];
}

const type = (slug: string, price_per_gpu_hour: number, stock: number, counts: number[]): SimGpuType => {
  const spec = gpuSpecByKey(slug);
  if (!spec) throw new Error(`sim catalogue: ${slug} is not in the GPU spec table`);
  return { slug, name: spec.name, vram_gb: spec.vram_gb, price_per_gpu_hour, stock, counts };
};

export const SIM_CATALOGUE: readonly SimGpuType[] = [
  type("rtx-4090", 0.69, 8, [1, 2, 4]),
  type("l40s", 0.86, 8, [1, 2, 4]),
  type("a100-pcie-80gb", 1.64, 8, [1, 2, 4, 8]),
  type("h100-sxm", 2.99, 8, [1, 2, 4, 8]),
];

export function simGpuType(slug: string): SimGpuType | undefined {
  return SIM_CATALOGUE.find((t) => t.slug === slug);
}

export const SIM_GPU_SLUGS = SIM_CATALOGUE.map((t) => t.slug) as [string, ...string[]];
