/**
 * GPU spec table: memory bandwidth decides an LLM's token rate, so it drives the value score.
 * Figures are vendor specifications (GB/s). A card is matched by the provider's own GPU id
 * (RunPod gpuTypeId, VRAMfarm slug) or by a normalised Vast.ai gpu_name — never by comparing
 * display names across providers (RunPod's "RTX PRO 4500" is "NVIDIA RTX PRO 4500 Blackwell"
 * elsewhere).
 */
export interface GpuSpec {
  key: string;
  name: string;
  /** the size the card is sold as ("48 GB"): what users filter by */
  vram_gb: number;
  /**
   * What the driver reports as the card's total memory (`nvidia-smi` memory.total, MiB; rocm-smi
   * for AMD): what a model must fit in. docs/models.md#gpu-memory gives the source of every row.
   */
  memory_mib: number;
  bandwidth_gbs: number;
  vendor: "nvidia" | "amd";
  runpod: string[];
  vramfarm: string[];
  /**
   * Vast.ai gpu_name values as Vast spells them, for its `gpu_name: {"in": [...]}` filter (gpuhunt
   * `GPU_MAPPING`, `GPU_MAPPING_RULES`); matched here after normaliseGpuName.
   */
  vast: string[];
}

const spec = (
  key: string,
  name: string,
  vram_gb: number,
  memory_mib: number,
  bandwidth_gbs: number,
  runpod: string[],
  vast: string[],
  vendor: "nvidia" | "amd" = "nvidia",
): GpuSpec => ({ key, name, vram_gb, memory_mib, bandwidth_gbs, vendor, runpod, vramfarm: [key], vast });

export const GPU_SPECS: readonly GpuSpec[] = [
  spec("B200", "B200", 180, 183359, 8000, ["NVIDIA B200"], ["B200"]),
  spec("h200", "H200 SXM", 141, 143771, 4800, ["NVIDIA H200"], ["H200", "H200 SXM"]),
  spec("h200-nvl", "H200 NVL", 141, 143771, 4800, ["NVIDIA H200 NVL"], ["H200 NVL"]),
  spec("h100-nvl", "H100 NVL", 94, 95830, 3900, ["NVIDIA H100 NVL"], ["H100 NVL"]),
  spec("h100-sxm", "H100 SXM", 80, 81559, 3350, ["NVIDIA H100 80GB HBM3"], ["H100 SXM"]),
  spec("h100-pcie", "H100 PCIe", 80, 81559, 2000, ["NVIDIA H100 PCIe"], ["H100 PCIE"]),
  spec("a100-sxm-80gb", "A100 SXM 80GB", 80, 81251, 2039, ["NVIDIA A100-SXM4-80GB"], ["A100 SXM4", "A100 SXM"]),
  spec("a100-pcie-80gb", "A100 PCIe 80GB", 80, 81251, 1935, ["NVIDIA A100 80GB PCIe"], ["A100 PCIE"]),
  spec("a100-pcie-40gb", "A100 PCIe 40GB", 40, 40536, 1555, ["NVIDIA A100-PCIE-40GB"], ["A100 PCIE 40GB"]),
  spec("mi300x", "MI300X", 192, 196288, 5300, ["AMD Instinct MI300X OAM"], ["Instinct MI300X", "MI300X"], "amd"),
  spec(
    "rtx-pro-6000",
    "RTX PRO 6000",
    96,
    97887,
    1792,
    ["NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"],
    ["RTX PRO 6000", "RTX PRO 6000 S", "RTX PRO 6000 WS"],
  ),
  spec("rtx-pro-5000", "RTX PRO 5000", 48, 48935, 1344, ["NVIDIA RTX PRO 5000 Blackwell"], ["RTX PRO 5000"]),
  spec("rtx-6000-ada", "RTX 6000 Ada", 48, 49140, 960, ["NVIDIA RTX 6000 Ada Generation"], ["RTX 6000Ada"]),
  // RunPod lists it as "RTX PRO 4500" in places; its gpuTypeId carries "Blackwell" (docs/providers.md#gpu-names).
  spec("rtx-pro-4500", "RTX PRO 4500", 32, 32623, 896, ["NVIDIA RTX PRO 4500 Blackwell"], ["RTX PRO 4500"]),
  spec("rtx-pro-4000", "RTX PRO 4000", 24, 24467, 672, [], ["RTX PRO 4000"]),
  spec("l40s", "L40S", 48, 46068, 864, ["NVIDIA L40S"], ["L40S"]),
  spec("l40", "L40", 48, 46068, 864, ["NVIDIA L40"], ["L40"]),
  spec("rtx-a6000", "RTX A6000", 48, 46068, 768, ["NVIDIA RTX A6000"], ["RTX A6000"]),
  spec("a40", "A40", 48, 46068, 696, ["NVIDIA A40"], ["A40"]),
  spec("rtx-5090", "RTX 5090", 32, 32607, 1792, ["NVIDIA GeForce RTX 5090"], ["RTX 5090"]),
  spec("rtx-5080", "RTX 5080", 16, 16303, 960, ["NVIDIA GeForce RTX 5080"], ["RTX 5080"]),
  spec("rtx-4090", "RTX 4090", 24, 24564, 1008, ["NVIDIA GeForce RTX 4090"], ["RTX 4090"]),
  spec(
    "rtx-4080-super",
    "RTX 4080 SUPER",
    16,
    16376,
    736,
    ["NVIDIA GeForce RTX 4080 SUPER"],
    ["RTX 4080 SUPER", "RTX 4080S"],
  ),
  spec("rtx-4080", "RTX 4080", 16, 16376, 717, ["NVIDIA GeForce RTX 4080"], ["RTX 4080"]),
  spec("rtx-3090-ti", "RTX 3090 Ti", 24, 24564, 1008, ["NVIDIA GeForce RTX 3090 Ti"], ["RTX 3090 Ti"]),
  spec("rtx-3090", "RTX 3090", 24, 24576, 936, ["NVIDIA GeForce RTX 3090"], ["RTX 3090"]),
  spec("rtx-a5000", "RTX A5000", 24, 24564, 768, ["NVIDIA RTX A5000"], ["RTX A5000"]),
  spec("rtx-a4500", "RTX A4500", 20, 20470, 640, ["NVIDIA RTX A4500"], ["RTX A4500"]),
  spec("rtx-a4000", "RTX A4000", 16, 16376, 448, ["NVIDIA RTX A4000"], ["RTX A4000"]),
  spec("rtx-4000-ada", "RTX 4000 Ada", 20, 20475, 360, ["NVIDIA RTX 4000 Ada Generation"], ["RTX 4000Ada"]),
  spec("rtx-2000-ada", "RTX 2000 Ada", 16, 16380, 224, ["NVIDIA RTX 2000 Ada Generation"], ["RTX 2000Ada"]),
  spec("a30", "A30", 24, 24258, 933, ["NVIDIA A30"], ["A30"]),
  spec("l4", "L4", 24, 23034, 300, ["NVIDIA L4"], ["L4"]),
  spec("a10", "A10", 24, 23028, 600, [], ["A10"]),
  spec("t4", "Tesla T4", 16, 15360, 320, [], ["Tesla T4", "T4"]),
  spec("rtx-3080-ti", "RTX 3080 Ti", 12, 12288, 912, ["NVIDIA GeForce RTX 3080 Ti"], ["RTX 3080 Ti"]),
  spec("rtx-3080", "RTX 3080", 10, 10240, 760, ["NVIDIA GeForce RTX 3080"], ["RTX 3080"]),
  spec("v100", "Tesla V100", 16, 16160, 900, ["Tesla V100-SXM2-16GB", "Tesla V100-PCIE-16GB"], ["Tesla V100", "V100"]),
  spec("v100-32gb", "Tesla V100 32GB", 32, 32510, 900, ["Tesla V100-SXM2-32GB"], ["Tesla V100-SXM2-32GB"]),
];

/** Lower case, alphanumerics only, vendor words dropped: "NVIDIA GeForce RTX 4090" -> "RTX 4090". */
export function normaliseGpuName(name: string): string {
  return name
    .toLowerCase()
    .replace(/\b(nvidia|geforce)\b/g, "")
    .replace(/[^a-z0-9]/g, "");
}

const byRunpodId = new Map(GPU_SPECS.flatMap((s) => s.runpod.map((id) => [id, s] as const)));
const byVramfarmSlug = new Map(GPU_SPECS.flatMap((s) => s.vramfarm.map((id) => [id, s] as const)));
const byVastName = new Map(GPU_SPECS.flatMap((s) => s.vast.map((name) => [normaliseGpuName(name), s] as const)));
const byKey = new Map(GPU_SPECS.map((s) => [s.key, s] as const));

/** The spec for a provider's own GPU identifier, or undefined when the card is not in the table. */
export function gpuSpecFor(
  provider: "runpod" | "vast" | "vramfarm" | "sim",
  providerGpuId: string,
): GpuSpec | undefined {
  switch (provider) {
    case "runpod":
      return byRunpodId.get(providerGpuId);
    case "vast":
      return byVastName.get(normaliseGpuName(providerGpuId));
    case "vramfarm":
    case "sim":
      return byVramfarmSlug.get(providerGpuId);
  }
}

/**
 * The physical memory of `count` cards sold as `vramGb` in all when the card is not in the table:
 * the marketing "GB" read as 10^9 bytes, below what every card in the table reports (a "48 GB"
 * L40S has 46,068 MiB; 48e9 bytes are 45,776 MiB), so an unknown card is never sized high.
 */
export function memoryMibOf(gpuKey: string | null, gpuCount: number, vramGb: number): number {
  const spec = gpuKey ? byKey.get(gpuKey) : undefined;
  if (spec) return spec.memory_mib * gpuCount;
  return Math.floor((vramGb * 1e9) / 1024 ** 2);
}

/** An offer's physical memory over all its cards, MiB: the provider's own figure, else the table's. */
export function offerMemoryMib(offer: {
  memory_mib?: number | null;
  gpu_key: string | null;
  gpu_count: number;
  vram_gb: number;
}): number {
  return offer.memory_mib ?? memoryMibOf(offer.gpu_key, offer.gpu_count, offer.vram_gb);
}

export function gpuSpecByKey(key: string): GpuSpec | undefined {
  return byKey.get(key);
}

/** The vendor's figure for a lease's card by its display name, or null for a card not in the table. */
export function vendorBandwidthGbs(gpu: string): number | null {
  const card = normaliseGpuName(gpu);
  if (!card) return null;
  const spec = GPU_SPECS.find(
    (s) =>
      normaliseGpuName(s.name) === card ||
      s.vast.some((name) => normaliseGpuName(name) === card) ||
      s.runpod.some((id) => normaliseGpuName(id) === card),
  );
  return spec?.bandwidth_gbs ?? null;
}
