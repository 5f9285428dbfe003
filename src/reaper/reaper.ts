import { checkBudget } from "../account/budget";
import { breachText } from "../account/enforce";
import { spentUsd } from "../account/spend";
import type { LeaseRow } from "../leases/ledger";
import { billedFromOf } from "../leases/lookup";
import { iso } from "../lib/time";
import type { OwnMachine, Provider, ProviderName } from "../providers/types";
import type { Services } from "../services";
import { cursorStatements } from "./cursors";
import { mapLimit, stopViaKeeper } from "./keepers";
import { type Listing, listOwnMachines, pagingOf, safeMessage } from "./listings";
import { diffListing, leaseIdFromLabel, overdue, type PlannedAction } from "./plan";
import { type ReaperAction, type ReaperProvider, type ReaperRun, recordRunStatements } from "./runs";
import {
  adoptStatement,
  type CreateRecordRefs,
  eventStatements,
  knownRefLists,
  type LedgerView,
  loadLedgerView,
  loadRowsAndRecords,
} from "./store";

/** The keeper gets this long past a cap before the reaper stops the lease itself. */
const OVERDUE_SLACK_MS = 5 * 60_000;
const KEEPER_CONCURRENCY = 5;

/**
 * Cron `*\/10 * * * *`: finds and kills machines that slipped through. One own-machine listing
 * per provider, diffed with the ledger; a handful of D1 round trips whatever the ledger's size.
 * Every run is recorded; in REAPER_MODE=report it only records what it would do.
 */
export async function runReaper(services: Services): Promise<ReaperRun> {
  const now = services.clock();
  const { db, config } = services;
  const ledger = await loadLedgerView(db, now, unlabelledProviders(services));
  // A listing cut short by a page bound in an earlier run goes on where it stopped.
  const listings = await listOwnMachines(services, knownRefLists(ledger), ledger.cursors);
  const { leasesById, records } = await leasesNamedBy(services, listings, ledger);

  const providers: ReaperProvider[] = [];
  const planned: PlannedAction[] = [];
  for (const listing of listings) {
    if (!listing.ok) {
      providers.push({ provider: listing.provider.name, listed: null, error: listing.error });
      continue;
    }
    const diff = diffListing({
      provider: listing.provider.name,
      prefix: config.labelPrefix,
      machines: listing.machines,
      leasesById,
      leasesByRef: refsOf(listing.provider, leasesById, records),
      // Absence is evidence only in a listing that ran from page 1 to the end in this run.
      activeLeases: listing.complete ? ledger.active : [],
      createRecords: records.get(listing.provider.name) ?? new Map(),
      now,
      graceMs: config.reaperGraceMin * 60_000,
    });
    providers.push({
      provider: listing.provider.name,
      listed: listing.machines.length,
      ignored: diff.ignored,
      error: null,
      ...pagingOf(listing),
    });
    planned.push(...diff.actions);
  }

  const stopping = new Set<string>();
  for (const lease of ledger.active) {
    const action = overdue(lease, {
      now,
      slackMs: OVERDUE_SLACK_MS,
      startTimeoutMs: config.startTimeoutMin * 60_000,
      spentUsd: (l) => spentUsd(l, now, config.eurUsd),
    });
    if (action) {
      planned.push(action);
      stopping.add(lease.id);
    }
  }
  planned.push(...(await budgetActions(services, stopping)));

  const mode = config.reaperMode;
  let actions: ReaperAction[];
  if (mode === "report") {
    actions = planned.map((a) => toRecord(a, "reported", `would: ${a.detail}`));
  } else {
    actions = await perform(services, planned, now);
    actions.push(...(await rearm(services, ledger.active, new Set(planned.map((a) => a.lease_id)))));
  }

  const run: ReaperRun = { at: iso(now), mode, providers, actions };
  const events =
    mode === "enforce"
      ? actions.flatMap((a) => eventStatements(db, a.lease_id, iso(now), `reaper_${a.kind}`, outcomeText(a)))
      : [];
  await db.batch([...events, ...recordRunStatements(db, run), ...cursorStatements(db, listings, iso(now))]);
  return run;
}

/**
 * The ledger rows the listings name: the active leases, plus every lease a listed label names
 * and every VRAMfarm lease whose ref was listed; and the machines their create records hold.
 * One batch.
 */
export async function leasesNamedBy(
  services: Services,
  listings: readonly Listing[],
  ledger: LedgerView,
): Promise<{ leasesById: Map<string, LeaseRow>; records: CreateRecordRefs }> {
  const prefix = services.config.labelPrefix;
  const leasesById = new Map(ledger.active.map((l) => [l.id, l] as const));
  const wanted: string[] = [];
  for (const listing of listings) {
    if (!listing.ok) continue;
    for (const machine of listing.machines) {
      const id =
        leaseIdFromLabel(machine.label, prefix) ?? ledger.knownRefs.get(listing.provider.name)?.get(machine.ref);
      if (id && !leasesById.has(id)) wanted.push(id);
    }
  }
  const { rows, records } = await loadRowsAndRecords(services.db, wanted, [...leasesById.keys(), ...wanted]);
  for (const row of rows) leasesById.set(row.id, row);
  return { leasesById, records };
}

/**
 * A provider's leases by machine ref (the lease's machine, and the machines its create records
 * hold), only for a provider whose machines carry no label (Provider.labelled false). Elsewhere
 * a machine is ours by its label alone, so an unlabelled one is never touched.
 */
export function refsOf(
  provider: Provider,
  leasesById: ReadonlyMap<string, LeaseRow>,
  records: CreateRecordRefs,
): Map<string, LeaseRow> {
  const byRef = new Map<string, LeaseRow>();
  if (provider.labelled) return byRef;
  for (const [ref, record] of records.get(provider.name) ?? []) {
    const lease = leasesById.get(record.leaseId);
    if (lease) byRef.set(ref, lease);
  }
  for (const lease of leasesById.values())
    if (lease.provider === provider.name && lease.provider_ref) byRef.set(lease.provider_ref, lease);
  return byRef;
}

/** The configured providers whose machines carry no label. */
export function unlabelledProviders(services: Services): ProviderName[] {
  return services.providers
    .configured()
    .filter((p) => !p.labelled)
    .map((p) => p.name);
}

/** Actual spend at the budget: every active lease not already being stopped stops with `budget`. */
async function budgetActions(services: Services, alreadyStopping: ReadonlySet<string>): Promise<PlannedAction[]> {
  if (services.config.budgetDailyUsd === null && services.config.budgetMonthlyUsd === null) return [];
  const { spend, breach } = await checkBudget(services);
  if (!breach) return [];
  return spend.activeLeases
    .filter((l) => (l.status === "provisioning" || l.status === "running") && !alreadyStopping.has(l.id))
    .map((l) => ({
      kind: "budget_stop" as const,
      provider: l.provider,
      provider_ref: l.provider_ref,
      lease_id: l.id,
      reason: "budget" as const,
      detail: `${breachText(breach)}: stopped`,
    }));
}

/**
 * Writes the adoptions (new lease rows) in one batch, then hands each lease to its keeper, which
 * alone changes an existing lease: it reopens a stopped one and tears down a machine it is handed.
 */
export async function perform(
  services: Services,
  planned: readonly PlannedAction[],
  now: number,
): Promise<ReaperAction[]> {
  const { db, keepers } = services;
  const writes = planned.filter((a) => a.kind === "adopt");
  const written = new Map<PlannedAction, boolean>();
  if (writes.length > 0) {
    const statements = writes.map((a) =>
      adoptStatement(db, {
        leaseId: a.lease_id,
        provider: a.provider as ProviderName,
        currency: services.providers.get(a.provider as ProviderName)?.currency ?? "USD",
        machine: a.machine as OwnMachine,
        now: iso(now),
      }),
    );
    const results = await db.batch(statements);
    for (const [i, a] of writes.entries()) written.set(a, (results[i]?.meta.changes ?? 0) > 0);
  }
  const adoptedHere = new Set(writes.filter((a) => written.get(a)).map((a) => a.lease_id));

  return mapLimit(planned, KEEPER_CONCURRENCY, async (action): Promise<ReaperAction> => {
    try {
      switch (action.kind) {
        case "adopt":
          if (!written.get(action)) {
            // Another machine under the same label was adopted into this lease by this very run:
            // this one is that lease's other machine, torn down and billed to it.
            if (adoptedHere.has(action.lease_id)) {
              const result = await handOver(services, action, now);
              const detail = `labelled machine ${action.provider_ref} shares its label with a machine adopted in this run: handed to lease ${action.lease_id}'s keeper, torn down and billed to it`;
              return toRecord(action, "done", result.claimed ? detail : `${detail} (${result.detail})`);
            }
            return toRecord(action, "done", `${action.detail} (already handled by another run)`);
          }
          await keepers.start(action.lease_id);
          return toRecord(action, "done", action.detail);
        case "reopen": {
          const { reopened } = await keepers.reopen(
            action.lease_id,
            action.provider as ProviderName,
            action.provider_ref as string,
          );
          return toRecord(action, "done", reopened ? action.detail : `${action.detail} (already handled)`);
        }
        case "claim": {
          const result = await handOver(services, action, now);
          return toRecord(action, "done", result.claimed ? action.detail : `${action.detail} (${result.detail})`);
        }
        case "reconcile":
        case "rearm":
          await keepers.ensureAlarm(action.lease_id);
          return toRecord(action, "done", action.detail);
        case "stop_overdue":
        case "budget_stop":
        case "stop_all": {
          const { already } = await stopViaKeeper(
            keepers,
            action.lease_id,
            action.reason ?? "requested",
            action.detail,
          );
          return toRecord(action, "done", already ? `${action.detail} (was already stopping)` : action.detail);
        }
      }
    } catch (error) {
      return toRecord(action, "failed", `${action.detail} — failed: ${safeMessage(services, error)}`);
    }
  });
}

/** Hands a listed machine to a lease's keeper, which records it and tears it down as the lease's other machine. */
function handOver(services: Services, action: PlannedAction, now: number) {
  const machine = action.machine as OwnMachine;
  const provider = action.provider as ProviderName;
  return services.keepers.claim(action.lease_id, {
    provider,
    ref: machine.ref,
    price_per_hour: machine.price_per_hour,
    billed_from: billedFromOf(machine, { sent_at: iso(now) }),
    detail: "found by the reaper",
    currency: services.providers.get(provider)?.currency ?? "USD",
  });
}

/**
 * Every active lease the run did not act on gets its keeper's alarm checked: an alarm that
 * was dropped (retries exhausted, a lost write) is set again. Bounded by MAX_ACTIVE_LEASES.
 */
async function rearm(
  services: Services,
  active: readonly LeaseRow[],
  handled: ReadonlySet<string>,
): Promise<ReaperAction[]> {
  const targets = active.filter((l) => !handled.has(l.id));
  const results = await mapLimit(targets, KEEPER_CONCURRENCY, async (lease): Promise<ReaperAction | null> => {
    const base: PlannedAction = {
      kind: "rearm",
      provider: lease.provider,
      provider_ref: lease.provider_ref,
      lease_id: lease.id,
      detail: "the keeper had no alarm set: re-armed",
    };
    try {
      const { rearmed } = await services.keepers.ensureAlarm(lease.id);
      return rearmed ? toRecord(base, "done", base.detail) : null;
    } catch (error) {
      return toRecord(base, "failed", `checking the keeper's alarm failed: ${safeMessage(services, error)}`);
    }
  });
  return results.filter((a): a is ReaperAction => a !== null);
}

export function toRecord(action: PlannedAction, outcome: ReaperAction["outcome"], detail: string): ReaperAction {
  return {
    kind: action.kind,
    provider: action.provider,
    provider_ref: action.provider_ref,
    lease_id: action.lease_id,
    detail,
    outcome,
  };
}

function outcomeText(action: ReaperAction): string {
  const where = action.provider && action.provider_ref ? ` [${action.provider} ${action.provider_ref}]` : "";
  return `${action.detail}${where}`;
}
