import type { LeaseRow } from "../leases/ledger";
import { idPattern } from "../lib/ids";
import { ms } from "../lib/time";
import type { OwnMachine, ProviderName } from "../providers/types";

export const actionKinds = [
  "adopt",
  "claim",
  "reopen",
  "reconcile",
  "rearm",
  "stop_overdue",
  "budget_stop",
  "stop_all",
] as const;
export type ActionKind = (typeof actionKinds)[number];

/** One thing the reaper does (or, in report mode, would do). */
export interface PlannedAction {
  kind: ActionKind;
  provider: ProviderName | null;
  provider_ref: string | null;
  lease_id: string;
  detail: string;
  /** adopt: the machine's label, price and age, for the new lease row; claim: the machine to hand over */
  machine?: OwnMachine;
  /** stop_overdue / budget_stop: the stop reason the keeper gets */
  reason?: "max_minutes" | "max_cost" | "start_timeout" | "budget" | "requested";
}

/** The lease id a label names (`<prefix>-<lease id>`), or null for a label that is not ours. */
export function leaseIdFromLabel(label: string | null, prefix: string): string | null {
  if (!label?.startsWith(`${prefix}-`)) return null;
  const rest = label.slice(prefix.length + 1);
  // `gpulease-staging-lse_...` belongs to another deployment whose prefix extends ours.
  return idPattern.test(rest) ? rest : null;
}

export interface ListingDiffInput {
  provider: ProviderName;
  prefix: string;
  machines: readonly OwnMachine[];
  /** ledger rows by lease id: every lease a listed label names, plus the active ones */
  leasesById: ReadonlyMap<string, LeaseRow>;
  /** this provider's ledger rows by provider_ref (VRAMfarm machines carry no label) */
  leasesByRef: ReadonlyMap<string, LeaseRow>;
  /**
   * this provider's active leases that have a machine, to find those missing from the listing:
   * empty for a listing that did not run from page 1 to the end (it proves only what it shows)
   */
  activeLeases: readonly LeaseRow[];
  /** this provider's machines that create records hold: ref → the lease and whether verified gone */
  createRecords: ReadonlyMap<string, { leaseId: string; goneAt: string | null }>;
  now: number;
  graceMs: number;
}

export interface ListingDiff {
  actions: PlannedAction[];
  /** listed machines left alone: not ours, or gone */
  ignored: number;
}

/**
 * Diffs one provider's own-machine listing with the ledger. Only called with a listing that
 * succeeded: from a failed one nothing is concluded.
 */
export function diffListing(input: ListingDiffInput): ListingDiff {
  const actions: PlannedAction[] = [];
  let ignored = 0;
  const listedRefs = new Set<string>();
  for (const machine of input.machines) {
    listedRefs.add(machine.ref);
    if (machine.state === "gone") {
      ignored++;
      continue;
    }
    const labelledId = leaseIdFromLabel(machine.label, input.prefix);
    const lease = (labelledId ? input.leasesById.get(labelledId) : undefined) ?? input.leasesByRef.get(machine.ref);
    if (!lease) {
      // Never touched: a machine without our label (VRAMfarm lists only refs we know).
      if (!labelledId) {
        ignored++;
        continue;
      }
      const age = ageMs(machine.created_at, input.now);
      if (age !== null && age < input.graceMs) continue;
      actions.push({
        kind: "adopt",
        provider: input.provider,
        provider_ref: machine.ref,
        lease_id: labelledId,
        detail: `labelled machine ${machine.ref} has no lease (${ageText(age)}): adopted and torn down`,
        machine,
      });
      continue;
    }
    if (!(lease.provider === input.provider && machine.ref === lease.provider_ref)) {
      // A machine of this lease that is not its current one (an ambiguous create whose machine
      // showed up after the rent moved on, at any provider): its keeper tears it down and bills
      // it to the lease. One its create records already hold is in the keeper's hands.
      const record = input.createRecords.get(machine.ref);
      if (record?.leaseId === lease.id && record.goneAt === null) continue;
      const age = ageMs(machine.created_at, input.now);
      if (age !== null && age < input.graceMs) continue;
      actions.push({
        kind: "claim",
        provider: input.provider,
        provider_ref: machine.ref,
        lease_id: lease.id,
        detail: `machine ${machine.ref} carries lease ${lease.id}'s label but is not its machine (${lease.provider_ref ?? "none"}): handed to its keeper, torn down and billed to the lease`,
        machine,
      });
      continue;
    }
    if (lease.status !== "stopped") continue;
    const sinceStop = lease.stopped_at ? input.now - ms(lease.stopped_at) : null;
    // A machine verified gone can linger in a listing for a moment after its teardown.
    if (sinceStop !== null && sinceStop < input.graceMs) continue;
    actions.push({
      kind: "reopen",
      provider: input.provider,
      provider_ref: machine.ref,
      lease_id: lease.id,
      detail: `machine ${machine.ref} still exists though lease ${lease.id} is stopped: teardown reopened`,
    });
  }
  for (const lease of input.activeLeases) {
    if (lease.provider !== input.provider || !lease.provider_ref || lease.status === "stopping") continue;
    if (listedRefs.has(lease.provider_ref)) continue;
    actions.push({
      kind: "reconcile",
      provider: input.provider,
      provider_ref: lease.provider_ref,
      lease_id: lease.id,
      detail: `machine ${lease.provider_ref} is not in the provider's listing: the keeper reconciles`,
    });
  }
  return { actions, ignored };
}

export interface OverdueSettings {
  now: number;
  /** the keeper had this long past a cap to act before the reaper steps in */
  slackMs: number;
  startTimeoutMs: number;
  /** USD spent so far by a lease */
  spentUsd: (lease: LeaseRow) => number;
}

/** An active lease past a cap its keeper should already have enforced, with the reason. */
export function overdue(lease: LeaseRow, s: OverdueSettings): PlannedAction | null {
  if (lease.status !== "provisioning" && lease.status !== "running") return null;
  const base = {
    kind: "stop_overdue" as const,
    provider: lease.provider,
    provider_ref: lease.provider_ref,
    lease_id: lease.id,
  };
  if (lease.status === "running" && lease.running_at) {
    const capAt = ms(lease.running_at) + lease.max_minutes * 60_000;
    if (s.now > capAt + s.slackMs) {
      return {
        ...base,
        reason: "max_minutes",
        detail: `past max_minutes (${lease.max_minutes}) since ${new Date(capAt).toISOString()}: stopped`,
      };
    }
  }
  const downloadMs = (lease.spec.download_s ?? 0) * 1000;
  if (lease.status === "provisioning" && s.now > ms(lease.created_at) + s.startTimeoutMs + downloadMs + s.slackMs) {
    return { ...base, reason: "start_timeout", detail: "still provisioning past the start timeout: stopped" };
  }
  if (lease.max_cost !== null && s.spentUsd(lease) > lease.max_cost * 1.05) {
    return { ...base, reason: "max_cost", detail: `cost past max_cost (${lease.max_cost} USD): stopped` };
  }
  return null;
}

function ageMs(createdAt: string | null, now: number): number | null {
  if (!createdAt) return null;
  const at = ms(createdAt);
  return Number.isFinite(at) ? now - at : null;
}

function ageText(age: number | null): string {
  return age === null ? "age unknown" : `${Math.round(age / 60_000)} min old`;
}
