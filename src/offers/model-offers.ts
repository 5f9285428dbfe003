import { refusalError } from "../errors";
import { fitOn, type ModelSizing, modelSourceGroups, sizeModelFrom } from "../leases/model-sizing";
import { RentRefusal } from "../leases/refusal";
import { providerNames } from "../providers/types";
import type { Services } from "../services";
import { compareRanked, type RankedOffer, toOffer } from "./rank";
import { DEFAULT_OFFER_LIMIT, MAX_OFFER_LIMIT, type Offer, type OffersQuery, type ProviderFailure } from "./schemas";
import { listRankedOffers } from "./service";

/**
 * `GET /v1/offers?model=…`: the offers the model fits, each with `fits`. Each provider's offers
 * are sized from where its machines pull the model (modelSourceGroups): the sim's from its
 * library, the clouds' from the registry. When one source cannot size the model (the registry is
 * unreachable) and another can, the first one's providers are listed in `errors` with why, and
 * the others' offers still list; when none can, the refusal is the answer (400 or 502).
 */
export async function listModelOffers(
  services: Services,
  model: { model: string; context_length?: number },
  query: OffersQuery,
): Promise<{ offers: Offer[]; errors: ProviderFailure[]; fetched_at: string }> {
  const asked = query.provider ?? providerNames;
  const groups = modelSourceGroups(services, asked);
  const input = { ...model, weights_gb: query.weights_gb, vram_gb: query.vram_gb };
  if (groups.length <= 1) {
    // One source (or nothing configured, which the listing reports): the query as asked.
    const sizing = await sized(services, input, groups[0]?.library ?? null);
    const { fitting, errors, fetched_at } = await listFitting(services, query, sizing, query.limit);
    return { offers: fitting.map((f) => f.offer), errors, fetched_at };
  }
  const grouped = new Set(groups.flatMap((g) => g.providers));
  const attempts = await Promise.all(
    groups.map(async (group) => {
      const sizing = await sizeModelFrom(services, input, group.library);
      return { group, sizing };
    }),
  );
  const sizedGroups = attempts.filter((a): a is { group: (typeof groups)[number]; sizing: ModelSizing } => {
    return a.sizing !== null && !(a.sizing instanceof RentRefusal);
  });
  if (sizedGroups.length === 0) {
    // The registry's answer, as with one source.
    const registry = attempts.find((a) => a.group.library === null) ?? attempts[0]!;
    throw refusalError(registry.sizing as RentRefusal);
  }
  const errors: ProviderFailure[] = attempts.flatMap(({ group, sizing }) =>
    sizing instanceof RentRefusal
      ? group.providers.map((provider) => ({ provider, code: "provider_error" as const, error: sizing.message }))
      : [],
  );
  // Providers asked for but not configured go with the first group: the listing says why.
  const unconfigured = asked.filter((name) => !grouped.has(name));
  const listings = await Promise.all(
    sizedGroups.map(({ group, sizing }, i) =>
      listFitting(
        services,
        { ...query, provider: i === 0 ? [...group.providers, ...unconfigured] : group.providers },
        sizing,
        MAX_OFFER_LIMIT,
      ),
    ),
  );
  const offers = listings
    .flatMap((l) => l.fitting)
    .sort((a, b) => compareRanked(a.ranked, b.ranked))
    .slice(0, query.limit ?? DEFAULT_OFFER_LIMIT);
  return {
    offers: offers.map(({ offer }) => offer),
    errors: [...errors, ...listings.flatMap((l) => l.errors)].sort(
      (a, b) => providerNames.indexOf(a.provider) - providerNames.indexOf(b.provider),
    ),
    fetched_at: listings.map((l) => l.fetched_at).sort()[0]!,
  };
}

async function sized(
  services: Services,
  input: Parameters<typeof sizeModelFrom>[1],
  library: Parameters<typeof sizeModelFrom>[2],
): Promise<ModelSizing> {
  const sizing = await sizeModelFrom(services, input, library);
  if (sizing instanceof RentRefusal) throw refusalError(sizing);
  if (!sizing) throw refusalError(new RentRefusal("invalid_request", "invalid query: model"));
  return sizing;
}

interface Fitting {
  ranked: RankedOffer;
  offer: Offer;
}

/** The listing for `query` ranked for the model's weights, cut to the offers it fits (at most `limit`). */
async function listFitting(
  services: Services,
  query: OffersQuery,
  sizing: ModelSizing,
  limit: number | undefined,
): Promise<{ fitting: Fitting[]; errors: ProviderFailure[]; fetched_at: string }> {
  const result = await listRankedOffers(services, {
    ...query,
    weights_gb: sizing.model.weights_gb,
    vram_gb: query.vram_gb ?? sizing.model.vram_need_gb ?? undefined,
    template: "ollama",
    limit: MAX_OFFER_LIMIT,
  });
  const fitting = result.offers
    .map((ranked) => ({ ranked, fits: fitOn(sizing, ranked.source) }))
    .filter((o) => o.fits !== null)
    .slice(0, limit ?? DEFAULT_OFFER_LIMIT)
    .map(({ ranked, fits }) => ({ ranked, offer: { ...toOffer(ranked), fits: fits ?? undefined } }));
  return { fitting, errors: result.errors, fetched_at: result.fetched_at };
}
