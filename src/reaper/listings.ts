import { scrubError } from "../lib/scrub";
import { withTimeout } from "../lib/timeout";
import { CursorRefusedError } from "../providers/http";
import type { OwnListing, OwnMachine, Provider, ProviderName } from "../providers/types";
import type { Services } from "../services";
import type { ReaperProvider } from "./runs";

/** One provider's paged own-machine listing gets this long in total. */
const LISTING_TIMEOUT_MS = 25_000;
/**
 * listOwn calls chained within one run, each going on at the cursor the last one handed back
 * seconds earlier: a listing of up to this many times the adapter's page bound is read from page
 * 1 to the end in every run, whatever a cursor's life (docs/architecture.md "The reaper's
 * listing cursor"). Only a longer one is continued by the next run from a saved cursor.
 */
export const LISTING_CALLS_PER_RUN = 3;

export type Listing =
  | {
      provider: Provider;
      ok: true;
      machines: OwnMachine[];
      /**
       * Read from the first page to the last in this run, every state listed. Only a complete listing is evidence
       * that a machine missing from it is gone; an incomplete one proves only what it shows.
       */
      complete: boolean;
      /** where a listing cut short by the adapter's page bound goes on; null: it reached the end */
      next: string | null;
      /** how the listing began or ended when it was not page 1 to the end, for the run's record */
      note: string | null;
    }
  | { provider: Provider; ok: false; error: string };

/**
 * Every configured provider's own machines, listed concurrently: per provider up to
 * LISTING_CALLS_PER_RUN chained listOwn calls (the adapter pages up to its bound in each), so
 * provider calls never grow with the ledger. A provider that
 * fails, times out or answers something unparseable is reported, never read as "none".
 * `resumeFrom`: per provider, the cursor an earlier run's listing stopped at; a cursor the
 * provider refuses is dropped and that provider listed again from page 1.
 */
export async function listOwnMachines(
  services: Services,
  knownRefs: Partial<Record<ProviderName, string[]>>,
  resumeFrom: ReadonlyMap<ProviderName, string> = new Map(),
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
        return await withTimeout(
          () => listOne(services, provider, knownRefs[provider.name] ?? [], resumeFrom.get(provider.name) ?? null),
          LISTING_TIMEOUT_MS,
          () => new Error(`listing took longer than ${LISTING_TIMEOUT_MS / 1000} s`),
        );
      } catch (error) {
        return { provider, ok: false, error: safeMessage(services, error) };
      }
    }),
  );
}

async function listOne(
  services: Services,
  provider: Provider,
  knownRefs: string[],
  from: string | null,
): Promise<Listing> {
  const list = (at: string | null): Promise<OwnListing> => provider.listOwn(services.config.labelPrefix, knownRefs, at);
  let listing: OwnListing;
  let refused: string | null = null;
  try {
    listing = await list(from);
  } catch (error) {
    if (from === null || !(error instanceof CursorRefusedError)) throw error;
    refused = safeMessage(services, error);
    listing = await list(null);
  }
  const fromFirstPage = from === null || refused !== null;
  // Go on at once while the cursor is fresh, up to the run's bound on calls.
  const machines = [...listing.machines];
  const partial = listing.partial ? [listing.partial] : [];
  let calls = 1;
  while (listing.next !== null && calls < LISTING_CALLS_PER_RUN) {
    listing = await list(listing.next);
    calls++;
    machines.push(...listing.machines);
    if (listing.partial) partial.push(listing.partial);
  }
  const notes = [
    refused !== null ? `the saved cursor was refused (${refused}): listed again from page 1` : null,
    !fromFirstPage ? "began at the cursor an earlier run stopped at" : null,
    calls > 1 ? `read in ${calls} listing calls, each going on at the cursor the last one gave` : null,
    listing.next !== null
      ? `stopped at the run's bound of ${LISTING_CALLS_PER_RUN} listing calls: the next run goes on from there`
      : null,
    partial.length > 0 ? `not every state was listed (${[...new Set(partial)].join("; ")})` : null,
  ].filter((note) => note !== null);
  return {
    provider,
    ok: true,
    machines,
    complete: fromFirstPage && listing.next === null && partial.length === 0,
    next: listing.next,
    note: notes.length > 0 ? notes.join("; ") : null,
  };
}

/** A listing's paging as the run records it: `complete`, and a note when it was not page 1 to the end. */
export function pagingOf(listing: Extract<Listing, { ok: true }>): Pick<ReaperProvider, "complete" | "note"> {
  return { complete: listing.complete, ...(listing.note !== null ? { note: listing.note } : {}) };
}

export function safeMessage(services: Services, error: unknown): string {
  return scrubError(services.config, error, "failed");
}
