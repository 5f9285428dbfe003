import type { RankedOffer } from "../offers/service";
import type { Services } from "../services";
import { RentRefusal } from "./refusal";
import type { LeaseInput } from "./schema";

/**
 * Drops the offers whose provider cannot take this env or cmd (Vast.ai: 256 characters per env
 * value, 32,768 of env in total, 4096 of args), asking each adapter's `validateSpec`; a 400 naming the limits when no
 * offer is left. Runs before the lease is stored, so nothing is rented with a spec that would fail.
 */
export function withinProviderLimits(
  services: Services,
  input: LeaseInput,
  offers: RankedOffer[],
): RankedOffer[] | RentRefusal {
  const spec = { env: input.env ?? {}, cmd: input.cmd ?? null, template: input.template };
  const problems = new Map<string, string[]>();
  const kept = offers.filter((offer) => {
    const found = services.providers.get(offer.provider)?.validateSpec?.(spec) ?? [];
    if (found.length > 0) problems.set(offer.provider, found);
    return found.length === 0;
  });
  if (kept.length > 0 || problems.size === 0) return kept;
  const issues = [...problems].flatMap(([provider, list]) =>
    list.map((message) => ({ path: message.startsWith("env") ? "env" : "cmd", message: `${provider}: ${message}` })),
  );
  return new RentRefusal("invalid_request", `the lease exceeds the provider's limits: ${issues[0]!.message}`, {
    issues,
  });
}
