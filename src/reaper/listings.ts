import { withTimeout } from "../lib/timeout";
import { scrubError } from "../providers/scrub";
import type { OwnMachine, Provider, ProviderName } from "../providers/types";
import type { Services } from "../services";

/** One provider's paged own-machine listing gets this long in total. */
const LISTING_TIMEOUT_MS = 25_000;

export type Listing =
  | { provider: Provider; ok: true; machines: OwnMachine[] }
  | { provider: Provider; ok: false; error: string };

/**
 * Every configured provider's own machines, listed concurrently: one listOwn per provider
 * (the adapter pages to the end), so provider calls never grow with the ledger. A provider
 * that fails, times out or answers something unparseable is reported, never read as "none".
 */
export async function listOwnMachines(
  services: Services,
  knownRefs: Partial<Record<ProviderName, string[]>>,
): Promise<Listing[]> {
  let providers: Provider[];
  try {
    providers = services.providers.configured();
  } catch (error) {
    services.log.error("reaper_providers_unavailable", { error: safeMessage(services, error) });
    return [];
  }
  return Promise.all(
    providers.map(async (provider): Promise<Listing> => {
      try {
        const { machines } = await withTimeout(
          () => provider.listOwn(services.config.labelPrefix, knownRefs[provider.name] ?? []),
          LISTING_TIMEOUT_MS,
          () => new Error(`listing took longer than ${LISTING_TIMEOUT_MS / 1000} s`),
        );
        return { provider, ok: true, machines };
      } catch (error) {
        return { provider, ok: false, error: safeMessage(services, error) };
      }
    }),
  );
}

export function safeMessage(services: Services, error: unknown): string {
  return scrubError(services.config, error, "failed");
}
