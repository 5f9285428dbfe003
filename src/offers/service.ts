import { toUsd } from "../leases/pricing";
import { scrubError } from "../lib/scrub";
import { iso } from "../lib/time";
import { withTimeout } from "../lib/timeout";
import { notConfiguredReason, reportedWhenAbsent } from "../providers/catalogue";
import { gpuSpecByKey, normaliseGpuName } from "../providers/gpus";
import { ProviderError } from "../providers/http";
import {
  type OfferQuery,
  type Provider,
  type ProviderName,
  ProviderNameSchema,
  type ProviderOffer,
  providerNames,
} from "../providers/types";
import type { Services } from "../services";
import type { MeasuredBandwidth } from "./bandwidth";
import { type CachedListing, findCachedOffer, getListing, listingKey, putListing } from "./cache";
import { measuredBandwidth } from "./measured";
import { type RankContext, type RankedOffer, rankOffer, rankOffers, toOffer } from "./rank";
import { DEFAULT_OFFER_LIMIT, type OffersQuery, type OfferType, type ProviderFailure } from "./schemas";
import { sharedOffersCache } from "./shared-cache";

export type { RankedOffer } from "./rank";
export type { OffersQuery, ProviderFailure } from "./schemas";

/** Each provider gets this long for its listing; a slow one is reported, the others still answer. */
export const PROVIDER_TIMEOUT_MS = 8_000;

export interface RankedOffers {
  offers: RankedOffer[];
  errors: ProviderFailure[];
  fetched_at: string;
}

export interface ListOptions {
  /** per-provider timeout; tests shorten it */
  timeoutMs?: number;
}

/** Ranked offers of the selected providers, best value first, cut to `limit`. */
export async function listRankedOffers(
  services: Services,
  query: OffersQuery,
  options: ListOptions = {},
): Promise<RankedOffers> {
  const all = await collectRankedOffers(services, query, options);
  return { ...all, offers: all.offers.slice(0, query.limit ?? DEFAULT_OFFER_LIMIT) };
}

/** One entry per card type among the matching offers, best-value type first. */
export async function listOfferTypes(
  services: Services,
  query: OffersQuery,
  options: ListOptions = {},
): Promise<{ types: OfferType[]; errors: ProviderFailure[]; fetched_at: string }> {
  const { offers, errors, fetched_at } = await collectRankedOffers(services, query, options);
  const groups = new Map<string, RankedOffer[]>();
  for (const offer of offers) {
    const key = offer.source.gpu_key ?? `name:${normaliseGpuName(offer.gpu)}`;
    const group = groups.get(key) ?? [];
    group.push(offer);
    groups.set(key, group);
  }
  const types: OfferType[] = [];
  for (const group of groups.values()) {
    // Ranked order breaks price ties, so among equal prices the better-value offer wins.
    const cheapest = group.reduce((best, o) => (o.price_per_hour_usd < best.price_per_hour_usd ? o : best));
    const spec = cheapest.source.gpu_key ? gpuSpecByKey(cheapest.source.gpu_key) : undefined;
    types.push({
      gpu: spec?.name ?? cheapest.gpu,
      vram_gb: spec?.vram_gb ?? cheapest.vram_gb / cheapest.gpu_count,
      cheapest: toOffer(cheapest),
      available: group.length,
    });
  }
  return { types, errors, fetched_at };
}

/**
 * The offer with this id, ranked for `query` (weights for the load estimate), or null when no
 * configured provider lists it. The offer is not checked against `query`'s filters. Looks in the cached listings first, so an offer just shown by
 * GET /v1/offers is found without a new provider call. Throws ProviderError when the
 * provider's listing fails: "unknown offer" and "provider down" are different answers.
 */
export async function findOffer(
  services: Services,
  offerId: string,
  query: OffersQuery = {},
  options: ListOptions = {},
): Promise<RankedOffer | null> {
  const name = ProviderNameSchema.safeParse(offerId.split(":", 1)[0]);
  if (!name.success) return null;
  const resolved = resolveProvider(services, name.data);
  if (!("provider" in resolved)) return null;
  const measured = readMeasured(services);
  let offer = findCachedOffer(name.data, offerId, services.clock());
  if (!offer) {
    // The caller's filters pick the same listing a GET /v1/offers with them would have used
    // (Vast returns a bounded page per search, so an unfiltered one may lack the offer).
    const listing = await fetchListing(
      services,
      resolved.provider,
      toAdapterQuery(query),
      options.timeoutMs ?? PROVIDER_TIMEOUT_MS,
    );
    offer = listing.offers.find((o) => o.offer_id === offerId) ?? null;
  }
  return offer ? rankOffer(offer, rankContext(services, query, await measured)) : null;
}

async function collectRankedOffers(
  services: Services,
  query: OffersQuery,
  options: ListOptions,
): Promise<RankedOffers> {
  const startedAt = services.clock();
  const timeoutMs = options.timeoutMs ?? PROVIDER_TIMEOUT_MS;
  const errors: ProviderFailure[] = [];
  const targets: Provider[] = [];
  for (const name of query.provider ?? providerNames) {
    const resolved = resolveProvider(services, name);
    if ("provider" in resolved) targets.push(resolved.provider);
    // A development aid (the sim): its absence is news only to someone who asked for it.
    else if (resolved.failure.code !== "not_configured" || reportedWhenAbsent(name) || query.provider)
      errors.push(resolved.failure);
  }

  // Measured after the listings' cache, at rank time: a sample recorded now ranks the next request.
  const measured = readMeasured(services);
  const adapterQuery = toAdapterQuery(query);
  const settled = await Promise.allSettled(targets.map((p) => fetchListing(services, p, adapterQuery, timeoutMs)));
  const listings: CachedListing[] = [];
  settled.forEach((result, i) => {
    const provider = targets[i]!;
    if (result.status === "fulfilled") listings.push(result.value);
    else errors.push(toFailure(services, provider.name, result.reason));
  });

  const eurUsd = services.config.eurUsd;
  const matching = listings.flatMap((l) => l.offers).filter((o) => matches(o, query, eurUsd));
  const fetchedAt = listings.length ? Math.min(...listings.map((l) => l.fetchedAt)) : startedAt;
  return {
    offers: rankOffers(matching, rankContext(services, query, await measured)),
    errors: errors.sort((a, b) => providerNames.indexOf(a.provider) - providerNames.indexOf(b.provider)),
    fetched_at: iso(fetchedAt),
  };
}

type Resolved = { provider: Provider } | { failure: ProviderFailure };

function resolveProvider(services: Services, name: ProviderName): Resolved {
  let provider: Provider | null;
  try {
    provider = services.providers.get(name);
  } catch (cause) {
    // An adapter that cannot even be built (bad URL, a bug) is one broken provider, not a 500.
    return { failure: toFailure(services, name, cause) };
  }
  if (provider) return { provider };
  return { failure: { provider: name, code: "not_configured", error: notConfiguredReason(name) } };
}

/** How long a caller waits for another's refresh when there is nothing older to serve. */
const BUSY_WAIT_MS = 250;
const BUSY_WAITS = 40;

async function fetchListing(
  services: Services,
  provider: Provider,
  query: OfferQuery,
  timeoutMs: number,
): Promise<CachedListing> {
  const key = listingKey(provider.name, query);
  const ttlMs = services.config.offersCacheS * 1000;
  const local = getListing(key, services.clock(), ttlMs);
  if (local) return local;
  const shared = ttlMs > 0 ? sharedOffersCache(services.env) : null;
  if (!shared) return refreshListing(services, provider, query, timeoutMs, key);

  for (let wait = 0; ; wait++) {
    const read = await shared.read(key, services.clock(), ttlMs);
    if (read.kind === "hit") {
      putListing(key, read.listing);
      return read.listing;
    }
    // Someone else refreshes: the previous listing is good enough meanwhile.
    if (read.kind === "busy" && read.stale) return read.stale;
    if (read.kind === "busy" && wait < BUSY_WAITS) {
      await services.sleep(BUSY_WAIT_MS);
      continue;
    }
    const budget = provider.searchBudget;
    if (
      budget &&
      !(await shared.takeCall(`search:${provider.name}`, services.clock(), budget.limit, budget.windowMs))
    ) {
      await shared.release(key);
      if (read.stale) return read.stale;
      throw new ProviderError(
        provider.name,
        "rate_limited",
        `offer search held back: ${provider.name} allows ${budget.limit} searches a minute for the whole worker`,
      );
    }
    try {
      const listing = await refreshListing(services, provider, query, timeoutMs, key);
      await shared.write(key, listing);
      return listing;
    } catch (error) {
      await shared.release(key);
      throw error;
    }
  }
}

async function refreshListing(
  services: Services,
  provider: Provider,
  query: OfferQuery,
  timeoutMs: number,
  key: string,
): Promise<CachedListing> {
  const fetchedAt = services.clock();
  const offers = await withTimeout(
    () => provider.listOffers(query),
    timeoutMs,
    () => new ProviderError(provider.name, "timeout", `no offers within ${timeoutMs / 1000} s`),
  );
  const listing: CachedListing = {
    provider: provider.name,
    fetchedAt,
    // An adapter must only ever report its own offers; anything else could be rented on the wrong account.
    offers: offers.filter((o: ProviderOffer) => o.provider === provider.name),
  };
  putListing(key, listing);
  return listing;
}

function toFailure(services: Services, provider: ProviderName, reason: unknown): ProviderFailure {
  const code = reason instanceof ProviderError && reason.kind === "timeout" ? "timeout" : "provider_error";
  return { provider, code, error: scrubError(services.config, reason, "listing failed") };
}

function toAdapterQuery(query: OffersQuery): OfferQuery {
  return {
    vram_gb: query.vram_gb,
    weights_gb: query.weights_gb,
    disk_gb: query.disk_gb,
    gpu: query.gpu?.trim().toLowerCase(),
    gpu_count: query.gpu_count,
    max_price_usd: query.max_price,
    template: query.template,
  };
}

function rankContext(services: Services, query: OffersQuery, measured: MeasuredBandwidth): RankContext {
  return {
    weightsGb: query.weights_gb ?? query.vram_gb ?? 0,
    eurUsd: services.config.eurUsd,
    measured,
    measuredMinSamples: services.config.measuredMinSamples,
  };
}

/** One D1 read for every offer listed. Measurements refine the ranking: without them it ranks on the vendors' figures. */
async function readMeasured(services: Services): Promise<MeasuredBandwidth> {
  try {
    return await measuredBandwidth(services.db, services.clock());
  } catch (error) {
    services.log.warn("measured_bandwidth_unread", { error });
    return new Map();
  }
}

/** The filters again, whatever the adapter applied: adapters may filter loosely or not at all. */
function matches(offer: ProviderOffer, query: OffersQuery, eurUsd: number): boolean {
  if (query.vram_gb !== undefined && offer.vram_gb < query.vram_gb) return false;
  if (query.gpu_count !== undefined && offer.gpu_count !== query.gpu_count) return false;
  if (query.max_price !== undefined && toUsd(offer.price_per_hour, offer.currency, eurUsd) > query.max_price)
    return false;
  if (query.template !== undefined && !offer.templates.includes(query.template)) return false;
  if (query.gpu !== undefined && !gpuMatches(offer, query.gpu)) return false;
  return true;
}

/** Case-insensitive substring, also across spacing and vendor words ("rtx4090" finds "RTX 4090"). */
function gpuMatches(offer: ProviderOffer, filter: string): boolean {
  const plain = filter.trim().toLowerCase();
  if (offer.gpu.toLowerCase().includes(plain)) return true;
  const wanted = normaliseGpuName(filter);
  if (!wanted) return false;
  const spec = offer.gpu_key ? gpuSpecByKey(offer.gpu_key) : undefined;
  return [offer.gpu, offer.gpu_key ?? "", spec?.name ?? ""].some((name) => normaliseGpuName(name).includes(wanted));
}
