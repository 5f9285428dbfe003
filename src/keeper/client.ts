import type { AdmissionFacts } from "../gateway/admission";
import type { UsageSample } from "../gateway/usage";
import type { CreateRecord, FoundMachine } from "../leases/create-records";
import { getLease, type LeaseRow, type NewEvent } from "../leases/ledger";
import type { StopReason } from "../leases/schema";
import type { ProviderName } from "../providers/types";

export interface StopResult {
  ok: true;
  already: boolean;
}

/** What the rent path tells a lease's keeper once its creates have answered. */
export interface SettleReport {
  /** why nothing was rented (null: a create made a machine, or a stop came first) */
  error: string | null;
  /** the rent path's own events (attempts, ambiguous answers), written with the settlement */
  events: NewEvent[];
}

export type ClaimResult = { claimed: boolean; reopened: boolean; detail: string };

/**
 * A settled lease: its row afterwards, and its create records as the settlement read them (they
 * hold while the row's revision does; null when the row was read again after the settlement).
 */
export interface Settled {
  lease: LeaseRow;
  creates: CreateRecord[] | null;
}

/** The lease as the ledger has it now, when no settlement committed (its creates unread). */
export async function readSettled(db: D1Database, leaseId: string): Promise<Settled | null> {
  const row = await getLease(db, leaseId);
  return row ? { lease: row, creates: null } : null;
}

/**
 * The lease keepers, as the rest of the worker reaches them (a port on Services, so a route test
 * can record the calls): one Durable Object per lease, the one writer of its row after insert.
 */
export interface KeeperPort {
  start(leaseId: string): Promise<void>;
  stop(leaseId: string, reason: StopReason, detail?: string): Promise<StopResult>;
  jobDone(leaseId: string, exitCode: number): Promise<StopResult>;
  /** re-arms the loop of an active lease; `rearmed` when it had no alarm */
  ensureAlarm(leaseId: string): Promise<{ rearmed: boolean }>;
  /** records how the rental ended, from the lease's create records; the lease afterwards */
  settle(leaseId: string, report: SettleReport): Promise<Settled | null>;
  /** a machine carrying the lease's label that is not its current one: record it, tear it down */
  claim(leaseId: string, machine: FoundMachine): Promise<ClaimResult>;
  /** the stopped lease's own machine still exists: tear it down again */
  reopen(leaseId: string, provider: ProviderName, ref: string): Promise<{ reopened: boolean }>;
  /** one request through the LLM gateway, for the lease's usage */
  recordUsage(leaseId: string, sample: UsageSample): Promise<void>;
  /**
   * the gateway's one call per request: the lease's admission facts (null: no such lease), with
   * the usage of earlier requests to it, counted as recordUsage counts them
   */
  admission(leaseId: string, usage: UsageSample[]): Promise<AdmissionFacts | null>;
  /** a new inference key (its hash): the old one stops working at once */
  setInferenceKey(leaseId: string, hash: string): Promise<{ ok: boolean }>;
}

/** The keeper of one lease: a Durable Object named by the lease id. */
export function keeperFor(env: Env, leaseId: string) {
  return env.LEASE_KEEPER.getByName(leaseId);
}

export function keepersOf(env: Env): KeeperPort {
  return {
    start: async (id) => {
      await keeperFor(env, id).start(id);
    },
    stop: (id, reason, detail) => keeperFor(env, id).stop(reason, detail),
    jobDone: (id, exitCode) => keeperFor(env, id).jobDone(exitCode),
    ensureAlarm: (id) => keeperFor(env, id).ensureAlarm(id),
    settle: (id, report) => keeperFor(env, id).settle(id, report) as Promise<Settled | null>,
    claim: (id, machine) => keeperFor(env, id).claim(id, machine),
    reopen: (id, provider, ref) => keeperFor(env, id).reopen(id, provider, ref),
    recordUsage: (id, sample) => keeperFor(env, id).recordUsage(id, sample),
    setInferenceKey: (id, hash) => keeperFor(env, id).setInferenceKey(id, hash),
    admission: (id, usage) => keeperFor(env, id).admission(id, usage),
  };
}
