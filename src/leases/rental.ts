/**
 * The rent path's decisions, with no I/O (like keeper/decide.ts): which offers to try and what
 * the budget reserves (`planRental`), and what the lease becomes once its creates have answered
 * (`settleRental`, applied by the lease's keeper, the one writer of the lease row).
 */
import { budgetBreach } from "../account/budget";
import { roundUsd, type Spend } from "../account/spend";
import { iso, ms } from "../lib/time";
import type { RankedOffer } from "../offers/rank";
import { type CreateRecord, openCreates } from "./create-records";
import type { LeasePatch, LeaseRow, NewEvent } from "./ledger";
import { reservationUsd, type WorstCaseBilling, worstCaseUsd } from "./pricing";
import { RentRefusal } from "./refusal";
import type { RentAttempt } from "./schema";

export interface RentalFacts {
  /** the offers the request may rent, best first (already filtered by the provider's limits) */
  candidates: readonly RankedOffer[];
  /** how each offer's provider bills */
  billing: (offer: RankedOffer) => WorstCaseBilling;
  caps: { max_minutes: number; max_cost?: number | null | undefined };
  /** spend now: null when no budget is set */
  spend: Pick<Spend, "committedToday" | "committedMonth"> | null;
  budget: { daily: number | null; monthly: number | null };
  maxAttempts: number;
}

export interface PlannedOffer {
  offer: RankedOffer;
  worstCaseUsd: number;
}

export type RentalPlan =
  | { ok: true; offers: PlannedOffer[]; reservationUsd: number }
  | { ok: false; refusal: RentRefusal };

/**
 * The offers to try and the reservation the budget holds for them: an offer whose worst case
 * would cross a budget on top of committed spend is dropped; none left is a 402. The reservation
 * is the largest worst case of the offers kept (any of them may be the one rented).
 */
export function planRental(facts: RentalFacts): RentalPlan {
  let refusal: RentRefusal | null = null;
  const offers: PlannedOffer[] = [];
  for (const offer of facts.candidates.slice(0, facts.maxAttempts)) {
    const usd = worstCaseUsd(offer, facts.caps, facts.billing(offer));
    const breach = facts.spend
      ? budgetBreach(
          facts.budget,
          { today: facts.spend.committedToday + usd, month: facts.spend.committedMonth + usd },
          true,
        )
      : null;
    if (breach) {
      const period = breach.period === "daily" ? "today's" : "this month's";
      refusal ??= new RentRefusal(
        "budget_exceeded",
        `this rental may cost up to ${roundUsd(usd)} USD, which would take ${period} committed spend to ` +
          `${roundUsd(breach.amountUsd)} USD, over the ${breach.period} budget of ${breach.budgetUsd} USD`,
      );
      continue;
    }
    offers.push({ offer, worstCaseUsd: usd });
  }
  if (offers.length === 0 && refusal) return { ok: false, refusal };
  return { ok: true, offers, reservationUsd: offers.length ? Math.max(...offers.map((o) => o.worstCaseUsd)) : 0 };
}

/** How the rental's request ended, as the keeper learns it. */
export type RentEnd =
  /** still renting (the request may still send or record a create) */
  | { kind: "renting" }
  /** the request settled: `error` says why nothing was rented, null when it rented */
  | { kind: "answered"; error: string | null }
  /** the request never settled within the rent window: it died */
  | { kind: "timed_out" };

export interface SettleSettings {
  startTimeoutMin: number;
  eurUsd: number;
}

export interface Settlement {
  patch: LeasePatch;
  events: NewEvent[];
  /** the lease went to (or is) stopping with a machine to tear down: start at once */
  teardownNow: boolean;
}

const NOTHING: Settlement = { patch: {}, events: [], teardownNow: false };

/**
 * What a lease without a machine becomes from its create records. A machine a create made is
 * recorded as the lease's machine (whatever the status: a stopping lease then tears it down);
 * a request that answered without one leaves the lease `stopped` only when every create is
 * resolved to "none", and `stopping` (its keeper still resolving) while any is unresolved.
 */
export function settleRental(
  lease: LeaseRow,
  creates: readonly CreateRecord[],
  end: RentEnd,
  now: number,
  s: SettleSettings,
): Settlement {
  if (lease.status === "stopped" || lease.provider_ref) return NOTHING;
  const machine = currentCandidate(creates);
  // The request gave up on this lease (it died, or answered with a refusal): a machine that
  // turned up on its records anyway is torn down, never run behind the caller's back.
  const gaveUp = end.kind === "timed_out" ? "the rental did not complete" : end.kind === "answered" ? end.error : null;
  const died = gaveUp !== null && lease.status === "provisioning";
  if (machine) {
    const patch = machinePatch(lease, machine, creates, s, lease.status === "provisioning" && !died);
    const events: NewEvent[] = [
      lease.status === "provisioning" && !died
        ? { kind: "rented", detail: `${machine.offer_id} as ${machine.provider_ref}` }
        : { kind: "machine_found", detail: `found ${machine.provider_ref} at ${machine.provider}` },
    ];
    if (died) {
      Object.assign(patch, stopPatch(now, gaveUp));
      events.push({
        kind: "stop_requested",
        detail: `rent_failed: ${gaveUp}; tearing its machine down`,
        reason: "rent_failed",
      });
    }
    return { patch, events, teardownNow: lease.status === "stopping" || died };
  }
  if (lease.status !== "provisioning" || end.kind === "renting") return NOTHING;
  const attempts = JSON.stringify(attemptsOf(creates));
  const { unresolved } = openCreates(lease, creates);
  const error = end.kind === "answered" ? (end.error ?? "no offer could be rented") : "the rental did not complete";
  if (unresolved.length > 0 || end.kind === "timed_out") {
    return {
      patch: { ...stopPatch(now, error), attempts },
      events: [
        {
          kind: "stop_requested",
          reason: "rent_failed",
          detail: `rent_failed: ${error}; ${unresolved.length} create(s) unresolved: the keeper looks for their machines`,
        },
      ],
      teardownNow: false,
    };
  }
  return {
    patch: {
      ...stopPatch(now, error),
      status: "stopped",
      stopped_at: iso(now),
      teardown_verified_at: iso(now),
      inference_key_sealed: null,
      attempts,
    },
    events: [
      {
        kind: "stopped",
        detail: `rent_failed: ${error}; every create was answered, none made a machine`,
        reason: "rent_failed",
      },
    ],
    teardownNow: false,
  };
}

/**
 * Stopping with no machine: `stopped` once no create is unresolved, no other machine is still
 * there, and no request can still be renting (the rent window since the lease was written).
 */
export function rentalConcluded(
  lease: LeaseRow,
  creates: readonly CreateRecord[],
  now: number,
  rentWindowMs: number,
): boolean {
  if (lease.status !== "stopping" || lease.provider_ref) return false;
  const unresolved = creates.some((c) => c.resolution === "unresolved");
  // Without a machine of its own the lease has no strays yet: any live machine keeps it open.
  const live = creates.some((c) => c.resolution === "machine" && c.gone_at === null);
  return !unresolved && !live && now - ms(lease.created_at) >= rentWindowMs;
}

/** The offers tried and why they did not rent, for the answer's `attempts`. */
export function attemptsOf(creates: readonly CreateRecord[]): RentAttempt[] {
  return creates
    .filter((c) => c.origin === "rent" && c.resolution !== "machine")
    .map((c) => ({
      offer_id: c.offer_id,
      error: c.resolution === "unresolved" ? `unresolved: ${c.detail ?? "no answer yet"}` : (c.detail ?? "no machine"),
    }));
}

/** The machine a lease without one takes: the latest a create made that is not gone. */
function currentCandidate(creates: readonly CreateRecord[]): CreateRecord | null {
  const live = creates.filter((c) => c.resolution === "machine" && c.provider_ref && c.gone_at === null);
  return live[live.length - 1] ?? null;
}

function stopPatch(now: number, error: string): LeasePatch {
  return { status: "stopping", stop_reason: "rent_failed", stop_requested_at: iso(now), error };
}

/** The lease row's machine columns from the create that made it, its reservation at the provider's price. */
function machinePatch(
  lease: LeaseRow,
  create: CreateRecord,
  creates: readonly CreateRecord[],
  s: SettleSettings,
  willRun: boolean,
): LeasePatch {
  const offer = create.offer;
  // A machine found for a lease that is being torn down never gets a running_at: it is billed
  // from its creation, whatever its provider's billing start (the larger, safe figure).
  const billingStartsAt = willRun ? offer.billing_starts_at : "accepted";
  const price = create.price_per_hour ?? offer.price_per_hour;
  const rented = {
    ...lease,
    currency: offer.currency,
    billing_starts_at: billingStartsAt,
    spec: { ...lease.spec, min_billed_minutes: offer.min_billed_minutes, download_s: offer.download_s },
  };
  return {
    provider: create.provider,
    provider_ref: create.provider_ref,
    offer_id: create.offer_id,
    gpu: offer.gpu,
    gpu_count: offer.gpu_count,
    vram_gb: offer.vram_gb,
    price_per_hour: price,
    currency: offer.currency,
    spec: rented.spec,
    expected_cost: price === null ? lease.expected_cost : reservationUsd(rented, price, s.startTimeoutMin, s.eurUsd),
    billing_starts_at: billingStartsAt,
    rented_at: create.billed_from ?? create.resolved_at ?? create.sent_at,
    attempts: creates.length > 1 ? JSON.stringify(attemptsOf(creates)) : null,
  };
}
