import type { ProviderName } from "./catalogue";

/** A Vast.ai offer is one machine's ask, named by the ask's id (docs/providers.md, offer fields). */
const VAST_OFFER_ID = /^vast:(\d+)$/;

export function vastOfferId(askId: number): string {
  return `vast:${askId}`;
}

/** An offer id as the API shows one (the OpenAPI document's example). */
export const EXAMPLE_OFFER_ID = vastOfferId(4_242_424);

/** The ask id in a Vast.ai offer id, or null when it is not one. */
export function vastAskId(offerId: string): string | null {
  return VAST_OFFER_ID.exec(offerId)?.[1] ?? null;
}

/**
 * The host an offer (or the lease that rented it) runs on, where the provider names one: a
 * Vast.ai offer is one machine. RunPod, VRAMfarm and the sim offer pools of cards, not machines.
 */
export function offerHost(offer: { provider: ProviderName; offer_id: string }): string | null {
  return offer.provider === "vast" ? vastAskId(offer.offer_id) : null;
}
