import { toUsd } from "../leases/pricing";
import { gpuSpecByKey, offerMemoryMib } from "../providers/gpus";
import { type ProviderOffer, providerNames } from "../providers/types";
import { type MeasuredBandwidth, type MeasuredFigure, measuredKey, multiGpuFactor, offerHost } from "./bandwidth";
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
  /** what metered leases delivered (measured.ts); absent: nothing measured */
  measured?: MeasuredBandwidth;
  /** samples a measured figure needs before it replaces the vendor's in the value score */
  measuredMinSamples?: number;
}

/** MEASURED_MIN_SAMPLES' default. */
export const DEFAULT_MEASURED_MIN_SAMPLES = 3;

/** Host download speed assumed where a provider reports none (RunPod, VRAMfarm, sim): a typical datacentre link. */
export const DEFAULT_DOWNLOAD_MBS = 150;
/** Seconds of container start before any download (image pull and boot of a typical template). */
const BASE_LOAD_S = 100;
const round = (n: number, places: number) => {
  const f = 10 ** places;
  return Math.round(n * f) / f;
};

/** Memory bandwidth of all cards together, GB/s, or null when the card is unknown. */
export function effectiveBandwidth(offer: ProviderOffer): number | null {
  const perCard = offer.bandwidth_gbs ?? (offer.gpu_key ? gpuSpecByKey(offer.gpu_key)?.bandwidth_gbs : undefined);
  if (!perCard) return null;
  return perCard * multiGpuFactor(offer.gpu_count);
}

/**
 * The measured per-card figure for an offer: its host's own once that has enough samples, else
 * its provider and GPU's (every host's samples), or null when nothing was measured.
 */
function measuredFigure(offer: ProviderOffer, ctx: RankContext): MeasuredFigure | null {
  const measured = ctx.measured;
  if (!measured?.size) return null;
  const host = offerHost(offer);
  const own = host === null ? undefined : measured.get(measuredKey(offer.provider, offer.gpu, host));
  if (own && own.samples >= minSamples(ctx)) return own;
  return measured.get(measuredKey(offer.provider, offer.gpu)) ?? null;
}

const minSamples = (ctx: RankContext) => ctx.measuredMinSamples ?? DEFAULT_MEASURED_MIN_SAMPLES;

/** Seconds until `weightsGb` are on the machine: start-up plus download at the host's speed. */
export function loadTimeSeconds(offer: ProviderOffer, weightsGb: number): number {
  const mbs = Math.max(offer.download_mbs ?? DEFAULT_DOWNLOAD_MBS, 1);
  return Math.round(BASE_LOAD_S + (weightsGb * 1000) / mbs);
}

/**
 * The value score: effective bandwidth per USD of the first hour, where the first hour
 * pays for the load time (billing starts before the model is usable) and the download fee.
 * VRAMfarm's 15-minute minimum is shorter than that hour, so it does not change the figure.
 * With enough metered leases the measured bandwidth stands in for the vendor's: it is what
 * users of that card at that provider actually got.
 */
export function rankOffer(offer: ProviderOffer, ctx: RankContext): RankedOffer {
  const loadTime = loadTimeSeconds(offer, ctx.weightsGb);
  const downloadFee = offer.download_cost_per_gb * ctx.weightsGb;
  const firstHour = offer.price_per_hour * (1 + loadTime / 3600) + downloadFee;
  const firstHourUsd = toUsd(firstHour, offer.currency, ctx.eurUsd);
  const bandwidth = effectiveBandwidth(offer);
  const figure = measuredFigure(offer, ctx);
  const measured = figure ? figure.gbs * multiGpuFactor(offer.gpu_count) : null;
  const ranking = figure && figure.samples >= minSamples(ctx) ? measured : bandwidth;
  const value =
    ranking !== null && offer.price_per_hour > 0 && firstHourUsd > 0 ? Math.round(ranking / firstHourUsd) : null;
  return {
    offer_id: offer.offer_id,
    provider: offer.provider,
    gpu: offer.gpu,
    gpu_count: offer.gpu_count,
    vram_gb: offer.vram_gb,
    memory_gib: round(offerMemoryMib(offer) / 1024, 2),
    price_per_hour: offer.price_per_hour,
    currency: offer.currency,
    price_per_hour_usd: round(toUsd(offer.price_per_hour, offer.currency, ctx.eurUsd), 4),
    cloud: offer.cloud,
    availability: offer.availability,
    location: offer.location,
    bandwidth_gbs: bandwidth === null ? null : Math.round(bandwidth),
    measured_bandwidth_gbs: measured === null ? null : Math.round(measured),
    measured_samples: figure?.samples ?? 0,
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
