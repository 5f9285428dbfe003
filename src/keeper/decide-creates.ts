/**
 * The keeper's decisions about a lease's create records, with no I/O: which unresolved creates
 * to look up (every one, on every alarm: a machine found is claimed at once; only "no machine"
 * waits for the create's timeout, as the create may still land), and how to tear down every
 * machine a create made that is not the lease's current one (terminate, then two "gone" reads
 * in a row, like the lease's own teardown), with its billed time.
 */
import { type CreateRecord, isStray, type StrayPatch } from "../leases/create-records";
import type { LeaseRow, NewEvent } from "../leases/ledger";
import { billedCost, machineCost, toUsd } from "../leases/pricing";
import { iso, ms } from "../lib/time";
import type { Currency, MachineStatus, ProviderName } from "../providers/types";
import { CONFIRM_GONE_MS, type KeeperSettings, reterminateAfterMs } from "./decide";

type Lease = Pick<LeaseRow, "provider" | "provider_ref" | "currency">;

/** How soon an unresolved create whose lookup was due (and did not settle it) is looked up again. */
export const LOOKUP_RETRY_MS = 15_000;

/**
 * The unresolved creates to look up now, oldest first: every one, whether or not its timeout
 * has passed (a machine found is claimed at once; the keeper concludes "no machine" only after
 * the timeout). `labelled` providers answer one lookup for all of a lease's creates there, so
 * only the first create of each is kept.
 */
export function lookupsDue(
  creates: readonly CreateRecord[],
  labelled: (provider: ProviderName) => boolean,
): CreateRecord[] {
  const open = creates.filter((c) => c.resolution === "unresolved");
  const seen = new Set<ProviderName>();
  return open.filter((c) => {
    if (!labelled(c.provider)) return true;
    if (seen.has(c.provider)) return false;
    seen.add(c.provider);
    return true;
  });
}

/** The lease's other machines still to tear down: not its current one, not verified gone. */
export const openStrays = (lease: Lease, creates: readonly CreateRecord[]): CreateRecord[] =>
  creates.filter((c) => isStray(lease, c) && c.gone_at === null);

/** Terminate a stray again? First at once, then at the lease teardown's re-send pace. */
export function strayTerminateDue(create: CreateRecord, now: number, s: KeeperSettings): boolean {
  if (create.terminate_sent_at === null) return true;
  const wait = reterminateAfterMs({ terminatesSent: create.terminates_sent }, s);
  return now - ms(create.terminate_sent_at) >= wait;
}

export interface StrayResult {
  terminate?: { ok: true } | { ok: false; error: string };
  status?: { ok: true; status: MachineStatus } | { ok: false; error: string };
}

/** One teardown step of a stray: its new state, cost and what the log says. */
export function decideStray(
  create: CreateRecord,
  result: StrayResult,
  now: number,
): { patch: StrayPatch; events: NewEvent[] } {
  const patch: StrayPatch = {};
  const events: NewEvent[] = [];
  const what = `${create.provider} ${create.provider_ref}`;
  if (result.terminate?.ok) {
    patch.terminate_sent_at = iso(now);
    patch.terminates_sent = create.terminates_sent + 1;
    if (create.terminates_sent === 0)
      events.push({ kind: "terminate_sent", detail: `${what} (not the lease's machine)` });
  } else if (result.terminate && create.terminates_sent === 0) {
    events.push({ kind: "terminate_failed", detail: `${what}: ${result.terminate.error}` });
  }
  const read = result.status;
  if (read?.ok) {
    const price = read.status.price_per_hour;
    if (price !== null && price > 0 && (read.status.state === "running" || read.status.state === "booting"))
      patch.price_per_hour = price;
  }
  const gone = read?.ok === true && read.status.state === "gone";
  const goneReads = gone ? create.gone_reads + 1 : read ? 0 : create.gone_reads;
  if (goneReads !== create.gone_reads) patch.gone_reads = goneReads;
  const verified = gone && goneReads >= 2;
  // Billed until the first read that says gone (the machine was gone by then at the latest;
  // without a read this step, a stray already read gone once stays billed to that read);
  // what the provider reports it billed for the machine, and its traffic, on every read.
  // Where billing starts only once the machine runs (VRAMfarm), a stray is billed only from a
  // read: the provider's own figure when it reports one (gpulease never saw when it started).
  const fromRunning = create.offer.billing_starts_at === "running";
  const reportsOwn = fromRunning && read?.ok === true && read.status.cost !== null;
  const timed =
    !(fromRunning && !read?.ok) && !reportsOwn && (read ? !gone || create.gone_reads === 0 : create.gone_reads === 0)
      ? machineCost(
          {
            price_per_hour: patch.price_per_hour ?? create.price_per_hour,
            billed_from: create.billed_from ?? create.sent_at,
            min_billed_minutes: create.offer.min_billed_minutes,
          },
          now,
        )
      : 0;
  const cost = read?.ok ? billedCost(timed, read.status.cost, read.status.traffic_cost) : timed;
  if (cost > create.cost) patch.cost = cost;
  if (verified) {
    patch.gone_at = iso(now);
    events.push({ kind: "machine_gone", detail: `${what} (not the lease's machine) is verified gone` });
  }
  return { patch, events };
}

/**
 * When the create work next needs the keeper: an unresolved create is looked up again within
 * one poll interval until its timeout (its machine is claimed as soon as a listing shows it), at
 * the timeout (when "no machine" may be concluded), then at the gentler lookup pace; an open
 * stray soon.
 */
export function nextCreateWorkAt(
  lease: Lease,
  creates: readonly CreateRecord[],
  now: number,
  s: KeeperSettings,
): number | null {
  const times = creates
    .filter((c) => c.resolution === "unresolved")
    .map((c) => {
      const dueAt = ms(c.sent_at) + s.rentWindowMs;
      return now < dueAt
        ? Math.min(dueAt, now + s.pollIntervalMs)
        : now + Math.max(s.verifyIntervalMs, LOOKUP_RETRY_MS);
    });
  for (const stray of openStrays(lease, creates))
    times.push(now + (stray.gone_reads > 0 ? CONFIRM_GONE_MS : s.verifyIntervalMs));
  return times.length ? Math.min(...times) : null;
}

/**
 * What the lease's other machines cost, in the lease's currency (a stray at another provider
 * may bill in another currency; `currencyOf` says which).
 */
export function straysCostIn(
  lease: Lease,
  creates: readonly CreateRecord[],
  currencyOf: (c: CreateRecord) => Currency,
  eurUsd: number,
): number {
  const target: Currency = lease.currency ?? "USD";
  const usd = creates
    .filter((c) => isStray(lease, c))
    .reduce((sum, c) => sum + toUsd(c.cost, currencyOf(c), eurUsd), 0);
  const amount = target === "EUR" ? usd / eurUsd : usd;
  return Math.round(amount * 1e6) / 1e6;
}
