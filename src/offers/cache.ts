import type { OfferQuery, ProviderName, ProviderOffer } from "../providers/types";

/**
 * Per-isolate copy of the shared offers cache (shared-cache.ts): a warm isolate answers without
 * even asking the shared one. Per-isolate cache of provider listings, so a burst of /v1/offers (or a lease renting right
 * after a listing) does not trip provider rate limits (Vast: one search per ~second). Only
 * settled, plain data is kept: a pending promise shared across requests would tie one
 * request's I/O to another's lifetime, which Workers forbid.
 */
export const OFFER_CACHE_TTL_MS = 30_000;
const MAX_ENTRIES = 64;

export interface CachedListing {
  provider: ProviderName;
  fetchedAt: number;
  offers: ProviderOffer[];
}

const listings = new Map<string, CachedListing>();

/** A stable key for one provider and one adapter query: same filters, same key. */
export function listingKey(provider: ProviderName, query: OfferQuery): string {
  const normalised = Object.entries(query)
    .filter(([, value]) => value !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : 1));
  return `${provider}|${JSON.stringify(normalised)}`;
}

export function getListing(key: string, now: number, ttlMs = OFFER_CACHE_TTL_MS): CachedListing | null {
  const entry = listings.get(key);
  if (!entry) return null;
  if (!isFresh(entry, now, ttlMs)) {
    listings.delete(key);
    return null;
  }
  return entry;
}

export function putListing(key: string, listing: CachedListing): void {
  listings.delete(key);
  listings.set(key, listing);
  // Map iterates in insertion order: the first key is the oldest write.
  while (listings.size > MAX_ENTRIES) {
    const oldest = listings.keys().next().value;
    if (oldest === undefined) break;
    listings.delete(oldest);
  }
}

/** The offer with this id in any fresh listing of its provider, newest listing first. */
export function findCachedOffer(provider: ProviderName, offerId: string, now: number): ProviderOffer | null {
  const fresh = [...listings.values()].filter((l) => l.provider === provider && isFresh(l, now));
  fresh.sort((a, b) => b.fetchedAt - a.fetchedAt);
  for (const listing of fresh) {
    const offer = listing.offers.find((o) => o.offer_id === offerId);
    if (offer) return offer;
  }
  return null;
}

/** Tests only: forget every listing. */
export function clearOfferCache(): void {
  listings.clear();
}

function isFresh(listing: CachedListing, now: number, ttlMs = OFFER_CACHE_TTL_MS): boolean {
  // A clock that went backwards (tests, or a skewed isolate) must not keep an entry forever.
  const age = now - listing.fetchedAt;
  return age >= 0 && age < ttlMs;
}
