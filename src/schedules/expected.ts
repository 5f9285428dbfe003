import { worstCaseUsd } from "../leases/pricing";
import { billingFor, offersQueryFor } from "../leases/rent";
import type { LeaseInput } from "../leases/schema";
import { findOffer, listRankedOffers, type ProviderFailure, type RankedOffer } from "../offers/service";
import type { Services } from "../services";
import type { ExpectedCost } from "./schema";

export type OfferCheck =
  | { kind: "offer"; offer: RankedOffer; expected: ExpectedCost }
  /** every provider answered and none offers what the lease asks for (at its max_price) */
  | { kind: "none" }
  /** nothing found, but a provider's listing failed: the answer may change on the next try */
  | { kind: "unknown"; errors: ProviderFailure[] };

/**
 * Tonight's best offer for a schedule's lease, and what a run would cost at most on it. Uses
 * the same filters as renting, so the listing lands in the offers cache the rental reads next.
 */
export async function checkOffers(services: Services, input: LeaseInput): Promise<OfferCheck> {
  const sizing = { vram_gb: input.vram_gb, weights_gb: input.weights_gb };
  let offer: RankedOffer | null = null;
  let errors: ProviderFailure[] = [];
  if (input.offer_id) {
    try {
      offer = await findOffer(services, input.offer_id, sizing);
    } catch (error) {
      const provider = input.offer_id.split(":", 1)[0] as ProviderFailure["provider"];
      return {
        kind: "unknown",
        errors: [{ provider, code: "provider_error", error: error instanceof Error ? error.message : String(error) }],
      };
    }
  } else {
    const listed = await listRankedOffers(services, offersQueryFor(input));
    offer = listed.offers[0] ?? null;
    errors = listed.errors.filter((e) => e.code !== "not_configured");
  }
  if (!offer) return errors.length > 0 ? { kind: "unknown", errors } : { kind: "none" };
  return {
    kind: "offer",
    offer,
    expected: {
      amount_usd: worstCaseUsd(offer, input, billingFor(services, offer, input.model ? offer.load_time_s : 0)),
      offer_id: offer.offer_id,
      provider: offer.provider,
      gpu: offer.gpu,
      price_per_hour_usd: offer.price_per_hour_usd,
    },
  };
}
