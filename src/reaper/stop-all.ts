import { iso } from "../lib/time";
import type { ProviderName } from "../providers/types";
import type { Services } from "../services";
import { listOwnMachines, pagingOf } from "./listings";
import { diffListing, leaseIdFromLabel, type PlannedAction } from "./plan";
import { leasesNamedBy, perform, refsOf, unlabelledProviders } from "./reaper";
import { type ReaperProvider, type ReaperRun, recordRunStatements } from "./runs";
import { eventStatements, knownRefLists, loadLedgerView } from "./store";

export interface StopAllResult {
  ok: true;
  /** active leases asked to stop */
  leases: number;
  /** machines carrying our label (or, at VRAMfarm, a ref the ledger knows) found at the providers, all now being torn down */
  machines: number;
  /** providers whose listing failed or stopped at its page bound: some of their machines may not have been seen */
  errors: { provider: ProviderName; error: string }[];
}

/**
 * The emergency brake: every active lease stops (`requested`), and every machine at any
 * provider that carries our label is torn down with verification — a machine the ledger does
 * not know is adopted at once, whatever its age. Recorded as a reaper run.
 */
export async function stopAll(services: Services): Promise<StopAllResult> {
  const now = services.clock();
  const { db, config } = services;
  const ledger = await loadLedgerView(db, now, unlabelledProviders(services));
  // The ledger first: what it knows stops before any provider is listed (a listing may take
  // the whole of a slow provider's timeout).
  const active = ledger.active.filter((l) => l.status === "provisioning" || l.status === "running");
  const leaseStops = await perform(
    services,
    active.map(
      (lease): PlannedAction => ({
        kind: "stop_all",
        provider: lease.provider,
        provider_ref: lease.provider_ref,
        lease_id: lease.id,
        reason: "requested",
        detail: "stop-all: stopped",
      }),
    ),
    now,
  );

  const listings = await listOwnMachines(services, knownRefLists(ledger));
  const { leasesById, records } = await leasesNamedBy(services, listings, ledger);

  const planned: PlannedAction[] = [];
  const providers: ReaperProvider[] = [];
  const errors: StopAllResult["errors"] = [];
  let machines = 0;
  for (const listing of listings) {
    const provider = listing.provider.name;
    if (!listing.ok) {
      providers.push({ provider, listed: null, error: listing.error });
      errors.push({ provider, error: listing.error });
      continue;
    }
    const byRef = refsOf(listing.provider, leasesById, records);
    const diff = diffListing({
      provider,
      prefix: config.labelPrefix,
      machines: listing.machines,
      leasesById,
      leasesByRef: byRef,
      activeLeases: [],
      createRecords: records.get(provider) ?? new Map(),
      now,
      graceMs: 0,
    });
    machines += listing.machines.filter(
      (m) => m.state !== "gone" && (leaseIdFromLabel(m.label, config.labelPrefix) !== null || byRef.has(m.ref)),
    ).length;
    providers.push({
      provider,
      listed: listing.machines.length,
      ignored: diff.ignored,
      error: null,
      ...pagingOf(listing),
    });
    planned.push(...diff.actions);
    // What it saw is torn down; the caller learns that machines past the page bound were not.
    if (listing.next !== null)
      errors.push({ provider, error: "the listing stopped at the page bound: machines past it were not seen" });
  }

  const actions = [...leaseStops, ...(await perform(services, planned, now))];
  const run: ReaperRun = { at: iso(now), mode: "enforce", providers, actions };
  await db.batch([
    ...actions.flatMap((a) => eventStatements(db, a.lease_id, iso(now), `reaper_${a.kind}`, a.detail)),
    ...recordRunStatements(db, run),
  ]);
  return {
    ok: true,
    leases: actions.filter((a) => a.kind === "stop_all" && a.outcome === "done").length,
    machines,
    errors,
  };
}
