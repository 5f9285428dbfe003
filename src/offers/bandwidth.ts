import { normaliseGpuName } from "../providers/gpus";
import { offerHost as hostOfOffer } from "../providers/offer-host";
import type { ProviderName, ProviderOffer } from "../providers/types";

/** Each extra card keeps 90 % of the previous figure: multi-GPU inference does not scale linearly. */
const MULTI_GPU_FACTOR = 0.9;

/** What `count` cards together deliver, as a share of one card's memory bandwidth. */
export function multiGpuFactor(count: number): number {
  return MULTI_GPU_FACTOR ** Math.max(0, count - 1);
}

/** A measured per-card memory bandwidth: the median of `samples` metered leases. */
export interface MeasuredFigure {
  gbs: number;
  samples: number;
}

/** Measured figures by measuredKey(): one per provider and GPU, and one per host where a provider names hosts. */
export type MeasuredBandwidth = ReadonlyMap<string, MeasuredFigure>;

/**
 * The key of a provider's GPU (and host): a lease keeps the display name of the offer it rented,
 * so offers and leases meet on that name, normalised ("NVIDIA RTX 4090" and "RTX 4090" are one card).
 */
export function measuredKey(provider: ProviderName, gpu: string, host: string | null = null): string {
  const card = normaliseGpuName(gpu) || gpu.trim().toLowerCase();
  return host === null ? `${provider}|${card}` : `${provider}|${card}|${host}`;
}

/** The host an offer (or the lease that rented it) runs on, where its provider names one. */
export function offerHost(offer: Pick<ProviderOffer, "provider" | "offer_id">): string | null {
  return hostOfOffer(offer);
}
