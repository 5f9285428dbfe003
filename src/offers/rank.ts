import { toUsd } from "../leases/pricing";
import { gpuSpecByKey } from "../providers/gpus";
import { type ProviderOffer, providerNames } from "../providers/types";
import type { Offer } from "./schemas";

/** An offer as the API shows it, plus the provider's own offer so the leases code can rent it. */
export interface RankedOffer extends Offer {
  /** the adapter's offer, for provider.rent(); stripped by toOffer() before it is sent */
  source: ProviderOffer;
}

export interface RankContext {
  /** download size for the load estimate, GB */
  weightsGb: number;
  /** USD per EUR */
  eurUsd: number;
}

/** Host download speed assumed where a provider reports none (RunPod, VRAMfarm, sim): a typical datacentre link. */
export const DEFAULT_DOWNLOAD_MBS = 150;
/** Seconds of container start before any download (image pull and boot of a typical template). */
const BASE_LOAD_S = 100;
/** Each extra card keeps 90 % of the previous figure: multi-GPU inference does not scale linearly. */
const MULTI_GPU_FACTOR = 0.9;

const round = (n: number, places: number) => {
  const f = 10 ** places;
  return Math.round(n * f) / f;
};

/** Memory bandwidth of all cards together, GB/s, or null when the card is unknown. */
export function effectiveBandwidth(offer: ProviderOffer): number | null {
  const perCard = offer.bandwidth_gbs ?? (offer.gpu_key ? gpuSpecByKey(offer.gpu_key)?.bandwidth_gbs : undefined);
  if (!perCard) return null;
  return perCard * MULTI_GPU_FACTOR ** Math.max(0, offer.gpu_count - 1);
}

/** Seconds until `weightsGb` are on the machine: start-up plus download at the host's speed. */
export function loadTimeSeconds(offer: ProviderOffer, weightsGb: number): number {
  const mbs = Math.max(offer.download_mbs ?? DEFAULT_DOWNLOAD_MBS, 1);
  return Math.round(BASE_LOAD_S + (weightsGb * 1000) / mbs);
}

/**
 * The value score: effective bandwidth per USD of the first hour, where the first hour
 * pays for the load time (billing starts before the model is usable) and the download fee.
 * VRAMfarm's 15-minute minimum is shorter than that hour, so it does not change the figure.
 */
export function rankOffer(offer: ProviderOffer, ctx: RankContext): RankedOffer {
  const loadTime = loadTimeSeconds(offer, ctx.weightsGb);
  const downloadFee = offer.download_cost_per_gb * ctx.weightsGb;
  const firstHour = offer.price_per_hour * (1 + loadTime / 3600) + downloadFee;
  const firstHourUsd = toUsd(firstHour, offer.currency, ctx.eurUsd);
  const bandwidth = effectiveBandwidth(offer);
  const value =
    bandwidth !== null && offer.price_per_hour > 0 && firstHourUsd > 0 ? Math.round(bandwidth / firstHourUsd) : null;
  return {
    offer_id: offer.offer_id,
    provider: offer.provider,
    gpu: offer.gpu,
    gpu_count: offer.gpu_count,
    vram_gb: offer.vram_gb,
    price_per_hour: offer.price_per_hour,
    currency: offer.currency,
    price_per_hour_usd: round(toUsd(offer.price_per_hour, offer.currency, ctx.eurUsd), 4),
    cloud: offer.cloud,
    availability: offer.availability,
    location: offer.location,
    bandwidth_gbs: bandwidth === null ? null : Math.round(bandwidth),
    load_time_s: loadTime,
    first_hour_cost: round(firstHour, 4),
    first_hour_cost_usd: round(firstHourUsd, 4),
    value,
    min_billed_minutes: offer.min_billed_minutes,
    templates: offer.templates,
    source: offer,
  };
}

const providerOrder = new Map(providerNames.map((name, i) => [name, i] as const));

/** Best value first, unknown value last, then cheaper (in USD), then a stable provider/id order. */
export function compareRanked(a: RankedOffer, b: RankedOffer): number {
  if (a.value !== b.value) {
    if (a.value === null) return 1;
    if (b.value === null) return -1;
    return b.value - a.value;
  }
  if (a.price_per_hour_usd !== b.price_per_hour_usd) return a.price_per_hour_usd - b.price_per_hour_usd;
  const byProvider = (providerOrder.get(a.provider) ?? 0) - (providerOrder.get(b.provider) ?? 0);
  if (byProvider !== 0) return byProvider;
  return a.offer_id < b.offer_id ? -1 : a.offer_id > b.offer_id ? 1 : 0;
}

export function rankOffers(offers: readonly ProviderOffer[], ctx: RankContext): RankedOffer[] {
  return offers.map((offer) => rankOffer(offer, ctx)).sort(compareRanked);
}

/** The public offer object: everything but the adapter's own offer. */
export function toOffer(ranked: RankedOffer): Offer {
  const { source: _source, ...offer } = ranked;
  return offer;
}
