import {
  type ModelFacts,
  ModelNotFoundError,
  modelFacts,
  needOf,
  RegistryUnavailableError,
  vramNeedGb,
} from "../models/need";
import { parseModelRef } from "../models/reference";
import type { ProviderOffer } from "../providers/types";
import type { Services } from "../services";
import { RentRefusal } from "./refusal";
import type { LeaseInput } from "./schema";

/** A model lease's model as the ledger keeps it (LeaseModelSchema). */
export interface StoredModel {
  name: string;
  digest: string | null;
  weights_gb: number;
  vram_need_gb: number | null;
  context_length: number | null;
  loaded_at: string | null;
}

/** What renting a model needs to know: the stored model, and the registry's facts when it answered. */
export interface ModelSizing {
  model: StoredModel;
  facts: ModelFacts | null;
}

/**
 * Sizes a model lease from the registry (cached): the weights, and the VRAM the requested context
 * needs. An unknown model is a 400; an unreachable registry a 502, unless the caller gave
 * `weights_gb` and `vram_gb` (then the lease is sized by those, with no digest).
 */
export async function sizeModel(
  services: Pick<Services, "db" | "config" | "clock">,
  input: Pick<LeaseInput, "model" | "context_length" | "weights_gb" | "vram_gb">,
): Promise<ModelSizing | RentRefusal | null> {
  if (!input.model) return null;
  const parsed = parseModelRef(input.model);
  if (!parsed.ok) {
    return new RentRefusal("invalid_request", `invalid model reference: ${parsed.reason}`, {
      issues: [{ path: "model", message: parsed.reason }],
    });
  }
  let facts: ModelFacts;
  try {
    facts = await modelFacts(services, parsed.ref);
  } catch (error) {
    if (error instanceof ModelNotFoundError) {
      return new RentRefusal("invalid_request", `model "${parsed.ref.canonical}" not found in the registry`, {
        issues: [{ path: "model", message: "not found in the registry" }],
      });
    }
    if (!(error instanceof RegistryUnavailableError)) throw error;
    if (input.weights_gb !== undefined && input.vram_gb !== undefined) {
      const model: StoredModel = {
        name: parsed.ref.canonical,
        digest: null,
        weights_gb: input.weights_gb,
        vram_need_gb: input.vram_gb,
        context_length: input.context_length ?? null,
        loaded_at: null,
      };
      return { model, facts: null };
    }
    return new RentRefusal(
      "provider_error",
      `the model registry could not be reached (${(error as Error).message}); give weights_gb and vram_gb to rent without it`,
    );
  }
  const need = needOf(facts, input.context_length ?? null);
  return {
    model: {
      name: need.name,
      digest: need.digest,
      weights_gb: input.weights_gb ?? weightsGb(facts.weights_bytes),
      vram_need_gb: input.vram_gb ?? need.vram_need_gb,
      context_length: need.context_length,
      loaded_at: null,
    },
    facts,
  };
}

/** The download as the lease shows it: GB to two decimals, as near as they say (1,321,082,688 bytes: 1.32). */
export function weightsGb(bytes: number): number {
  return Math.round(bytes / 1e7) / 100;
}

/** How a model fits an offer's cards: the need for that many cards, and what is left over. */
export interface Fit {
  vram_need_gb: number;
  headroom_gb: number;
}

/**
 * The fit of a sized model on an offer: with the registry's facts, the need for the offer's card
 * count (Ollama splits layers across cards, each with its own overhead); without, the caller's
 * `vram_gb`. Null when it does not fit.
 */
export function fitOn(sizing: ModelSizing, offer: Pick<ProviderOffer, "vram_gb" | "gpu_count">): Fit | null {
  const context = sizing.model.context_length;
  const need =
    sizing.facts && context !== null
      ? vramNeedGb(sizing.facts, context, offer.gpu_count)
      : (sizing.model.vram_need_gb ?? 0);
  const rounded = Math.round(need * 10) / 10;
  const headroom = Math.round((offer.vram_gb - rounded) * 10) / 10;
  return headroom >= 0 ? { vram_need_gb: rounded, headroom_gb: headroom } : null;
}
