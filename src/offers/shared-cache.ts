import { DurableObject } from "cloudflare:workers";
import type { ProviderName, ProviderOffer } from "../providers/types";

/**
 * One offers cache for every instance of the worker (OFFERS_CACHE_S), and the provider call
 * budgets that must hold for the whole worker (Vast.ai: 10 offer searches a minute).
 *
 * Why a Durable Object: the Cache API is per data centre (two colos would each call the
 * providers) and cannot count calls; D1 is shared but has no single writer, so twenty clients
 * missing at once would all refresh and race on any counter. One named object is one
 * single-threaded instance worldwide: it hands the refresh of a listing to exactly one caller,
 * serves the previous listing to the others meanwhile, and counts calls exactly.
 * The caller does the provider call (with its own adapters and timeouts); this object only
 * coordinates, holding plain data in memory (a lost cache just means one more refresh).
 */

export interface SharedListing {
  provider: ProviderName;
  fetchedAt: number;
  offers: ProviderOffer[];
}

export type ReadResult =
  /** fresh: use it */
  | { kind: "hit"; listing: SharedListing }
  /** the caller refreshes; `stale` may be served if that fails or is refused */
  | { kind: "refresh"; stale: SharedListing | null }
  /** someone else is refreshing: serve `stale`, or wait and read again when there is none */
  | { kind: "busy"; stale: SharedListing | null };

/** A refresh that has not reported back after this long is taken over by the next caller. */
const REFRESH_CLAIM_MS = 20_000;
const MAX_ENTRIES = 256;

export class OffersCache extends DurableObject<Env> {
  private readonly listings = new Map<string, SharedListing>();
  private readonly refreshing = new Map<string, number>();
  private readonly calls = new Map<string, number[]>();

  read(key: string, now: number, ttlMs: number): ReadResult {
    const entry = this.listings.get(key) ?? null;
    const age = entry ? now - entry.fetchedAt : Number.POSITIVE_INFINITY;
    if (entry && age >= 0 && age < ttlMs) return { kind: "hit", listing: entry };
    const claimedAt = this.refreshing.get(key);
    if (claimedAt !== undefined && now - claimedAt < REFRESH_CLAIM_MS && now >= claimedAt)
      return { kind: "busy", stale: entry };
    this.refreshing.set(key, now);
    return { kind: "refresh", stale: entry };
  }

  write(key: string, listing: SharedListing): void {
    this.refreshing.delete(key);
    this.listings.delete(key);
    this.listings.set(key, listing);
    while (this.listings.size > MAX_ENTRIES) {
      const oldest = this.listings.keys().next().value;
      if (oldest === undefined) break;
      this.listings.delete(oldest);
    }
  }

  /** The refresh failed: the next caller may try. */
  release(key: string): void {
    this.refreshing.delete(key);
  }

  /** One call of `budget` if fewer than `limit` were made in the last `windowMs`; false otherwise. */
  takeCall(budget: string, now: number, limit: number, windowMs: number): boolean {
    const recent = (this.calls.get(budget) ?? []).filter((at) => now - at < windowMs && at <= now);
    const allowed = recent.length < limit;
    if (allowed) recent.push(now);
    this.calls.set(budget, recent);
    return allowed;
  }

  /** Tests: forget everything. */
  reset(): void {
    this.listings.clear();
    this.refreshing.clear();
    this.calls.clear();
  }
}

/** The one instance every worker instance talks to. */
export function sharedOffersCache(env: Env): DurableObjectStub<OffersCache> | null {
  const namespace = (env as Partial<Env>).OFFERS_CACHE;
  return namespace ? namespace.getByName("global") : null;
}
