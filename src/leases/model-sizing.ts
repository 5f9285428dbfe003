import { cachedFactsOf, type ModelLibrary } from "../models/facts";
import {
  fitOnCards,
  type ModelFacts,
  ModelNotFoundError,
  modelFacts,
  needOf,
  RegistryUnavailableError,
} from "../models/need";
import { parseModelRef } from "../models/reference";
import { RegistryNotAllowedError } from "../models/registry";
import { gibUp } from "../models/runner";
import { offerMemoryMib } from "../providers/gpus";
import { type Provider, type ProviderName, type ProviderOffer, providerNames } from "../providers/types";
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
 * Configured providers grouped by where their machines pull models from: the configured registry
 * (`library` null: OLLAMA_REGISTRY_URL and the hosts of OLLAMA_REGISTRIES) or a provider's own
 * library (the sim's, in process). Each group's offers are sized from its own source.
 */
export interface ModelSourceGroup {
  library: ModelLibrary | null;
  providers: ProviderName[];
}

export function modelSourceGroups(
  services: Pick<Services, "providers">,
  names: readonly ProviderName[] = providerNames,
): ModelSourceGroup[] {
  const groups: ModelSourceGroup[] = [];
  for (const name of names) {
    let provider: Provider | null;
    try {
      provider = services.providers.get(name);
    } catch {
      provider = null; // an adapter that cannot be built is reported by the listing
    }
    if (!provider) continue;
    const library = provider.modelLibrary ?? null;
    const group = groups.find((g) => g.library === library);
    if (group) group.providers.push(name);
    else groups.push({ library, providers: [name] });
  }
  return groups;
}

/**
 * Sizes a model lease from where the providers it may use pull it: their one source when they
 * share one (under `npm start` only the sim is configured: its library), else the configured
 * registry. Callers that mix sources size each group itself (sizeModelFrom).
 */
export async function sizeModel(
  services: Pick<Services, "db" | "config" | "clock" | "providers">,
  input: Pick<LeaseInput, "model" | "context_length" | "weights_gb" | "vram_gb" | "provider">,
): Promise<ModelSizing | RentRefusal | null> {
  const groups = modelSourceGroups(services, input.provider ? [input.provider] : providerNames);
  return sizeModelFrom(services, input, groups.length === 1 ? groups[0]!.library : null);
}

/**
 * Sizes a model lease from `library`, or with none from the registry (cached): the weights, and
 * the VRAM the requested context needs. An unknown model is a 400; an unreachable registry a 502,
 * unless the caller gave `weights_gb` and `vram_gb` (then the lease is sized by those, with no digest).
 */
export async function sizeModelFrom(
  services: Pick<Services, "db" | "config" | "clock">,
  input: Pick<LeaseInput, "model" | "context_length" | "weights_gb" | "vram_gb">,
  library: ModelLibrary | null,
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
    facts = library ? await library.facts(parsed.ref) : await modelFacts(services, parsed.ref);
  } catch (error) {
    if (error instanceof RegistryNotAllowedError) {
      return new RentRefusal("invalid_request", `invalid model reference: ${error.message}`, {
        issues: [{ path: "model", message: error.message }],
      });
    }
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
  const own = facts.arch.params_num_ctx ?? null;
  if (own !== null && input.context_length !== undefined && input.context_length !== own) {
    // Ollama runs the model at its own num_ctx whatever OLLAMA_CONTEXT_LENGTH says (server/routes.go).
    const message = `model "${parsed.ref.canonical}" sets num_ctx ${own} in its params, and Ollama runs it at that context; ask context_length ${own} or leave it out`;
    return new RentRefusal("invalid_request", message, { issues: [{ path: "context_length", message }] });
  }
  const need = needOf(facts, input.context_length ?? null);
  return {
    model: {
      name: need.name,
      digest: need.digest,
      weights_gb: input.weights_gb ?? need.weights_gb,
      vram_need_gb: input.vram_gb ?? need.vram_need_gb,
      context_length: need.context_length,
      loaded_at: null,
    },
    facts,
  };
}

/** How a model fits an offer's cards: the need for that many cards, and what is left over. */
export interface Fit {
  vram_need_gb: number;
  headroom_gb: number;
}

const round2 = (value: number) => Math.round(value * 100) / 100;

/**
 * The fit of a sized model on an offer, against the cards' memory as the driver reports it: with
 * the registry's facts, the runner's own decision for the offer's cards (src/models/runner.ts);
 * without, the caller's `vram_gb` against that memory. Null when the model would not load whole.
 */
export function fitOn(
  sizing: ModelSizing,
  offer: Pick<ProviderOffer, "vram_gb" | "gpu_count" | "gpu_key" | "memory_mib">,
): Fit | null {
  const memoryMib = offerMemoryMib(offer);
  const memoryGib = memoryMib / 1024;
  const context = sizing.model.context_length;
  if (sizing.facts && context !== null) {
    const fit = fitOnCards(sizing.facts, context, offer.gpu_count, memoryMib / offer.gpu_count);
    if (!fit.fits) return null;
    const need = gibUp(fit.needBytes);
    return { vram_need_gb: need, headroom_gb: round2(Math.max(0, memoryGib - need)) };
  }
  const need = sizing.model.vram_need_gb ?? 0;
  return memoryGib >= need ? { vram_need_gb: need, headroom_gb: round2(memoryGib - need) } : null;
}

/**
 * A lease's model facts for its measured bandwidth, with no registry call: from its provider's own
 * library (the sim's, in process) when the digest is the one the lease was sized with, else the
 * registry's cache (table model_manifests). Null when neither has them.
 */
export async function leaseModelFacts(
  services: Pick<Services, "db" | "config" | "providers">,
  provider: ProviderName,
  model: { name: string; digest: string | null },
): Promise<ModelFacts | null> {
  if (!model.digest) return null;
  const library = modelSourceGroups(services, [provider])[0]?.library;
  if (!library) return cachedFactsOf(services.db, services.config, model.name, model.digest);
  const parsed = parseModelRef(model.name);
  if (!parsed.ok) return null;
  try {
    const facts = await library.facts(parsed.ref);
    return facts.digest === model.digest ? facts : null;
  } catch {
    return null;
  }
}
