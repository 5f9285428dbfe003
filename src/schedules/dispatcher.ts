import { enforceBudget } from "../account/enforce";
import { appendEvent, getLeaseByIdempotencyKey } from "../leases/ledger";
import type { RentRefusal } from "../leases/refusal";
import { createLease, scopedIdempotencyKey } from "../leases/rent";
import { iso, ms } from "../lib/time";
import type { Services } from "../services";
import { enqueue, scheduleEvent } from "../webhooks/outbox";
import { cronFor } from "./cron";
import { checkOffers } from "./expected";
import { nextRetryAt, planDue, RETRY_WINDOW_MS } from "./plan";
import {
  activeLeaseOf,
  advanceStatement,
  claimRetry,
  expireRetry,
  failStaleClaim,
  finishRun,
  insertRunStatement,
  listDueSchedules,
  listRetryingRuns,
  listStaleClaims,
  type RunRow,
  reclaimStale,
  type ScheduleRow,
} from "./store";

/**
 * Where a cron-started lease's worker answers when neither PUBLIC_URL nor the schedule knows: a
 * schedule stored before schedules kept their origin; `npm start`'s default address.
 */
const FALLBACK_ORIGIN = "http://localhost:8787";

/**
 * How long a claim may belong to a living dispatcher: a cron invocation ends after at most
 * 15 minutes of wall time (docs/architecture.md, The crons). An older claim's dispatcher died
 * between its claim and its closing write; the run is tried again or reported.
 */
export const CLAIM_LIFETIME_MS = 15 * 60_000;

export interface DispatchSummary {
  started: string[];
  skipped: number;
  retrying: number;
  budgetStopped: string[];
}

/**
 * Cron `* * * * *`: stops everything when actual spend has reached the budget, then starts
 * every schedule whose next run is due — exactly one lease per schedule and due time: the
 * (schedule_id, due_at) primary key of schedule_runs admits one claimer, however often the
 * cron fires or however many invocations overlap — and tries runs waiting for capacity again.
 * With `schedules: false` (a malformed setting) only the budget is enforced: due runs wait.
 */
export async function runDispatcher(
  services: Services,
  scheduledTime: number,
  options: { schedules: boolean } = { schedules: true },
): Promise<DispatchSummary> {
  // A cron event retried late is judged at the time it really runs.
  const now = Math.max(scheduledTime, services.clock());
  const summary: DispatchSummary = { started: [], skipped: 0, retrying: 0, budgetStopped: [] };

  const budget = await enforceBudget(services);
  summary.budgetStopped = budget.stopped;
  if (!options.schedules) {
    services.log.error("dispatcher_skipped", { reason: "invalid configuration: budget enforced, no schedule run" });
    return summary;
  }

  for (const schedule of await listDueSchedules(services.db, now)) {
    try {
      await dispatchDue(services, schedule, now, summary);
    } catch (error) {
      // One broken schedule must not hold up the others; its next_run_at has moved on already.
      services.log.error("dispatch_failed", { schedule_id: schedule.id, error });
    }
  }
  for (const { run, schedule } of await listRetryingRuns(services.db)) {
    try {
      await retry(services, schedule, run.due_at, ms(run.updated_at), now, summary);
    } catch (error) {
      services.log.error("dispatch_retry_failed", { schedule_id: schedule.id, due_at: run.due_at, error });
    }
  }
  const cutoff = iso(now - CLAIM_LIFETIME_MS);
  for (const { run, schedule } of await listStaleClaims(services.db, cutoff)) {
    try {
      await recoverClaim(services, schedule, run, cutoff, now, summary);
    } catch (error) {
      services.log.error("dispatch_recover_failed", { schedule_id: schedule.id, due_at: run.due_at, error });
    }
  }
  return summary;
}

async function dispatchDue(
  services: Services,
  schedule: ScheduleRow,
  now: number,
  summary: DispatchSummary,
): Promise<void> {
  const { db } = services;
  const dueIso = schedule.next_run_at as string;
  const plan = planDue(cronFor(schedule.cron, schedule.timezone), ms(dueIso), now);
  const at = iso(now);
  const statements = plan.skips.map((skip) =>
    insertRunStatement(db, {
      scheduleId: schedule.id,
      dueAt: iso(skip.dueAt),
      status: "skipped",
      detail: skip.detail,
      now: at,
    }),
  );
  const claimIndex = statements.length;
  if (plan.start !== null) {
    statements.push(
      insertRunStatement(db, {
        scheduleId: schedule.id,
        dueAt: iso(plan.start),
        status: "claimed",
        detail: null,
        now: at,
      }),
    );
  }
  statements.push(advanceStatement(db, schedule.id, dueIso, plan.next === null ? null : iso(plan.next), at));
  // One transaction: the claim and the move of next_run_at happen together or not at all.
  const results = await db.batch(statements);
  summary.skipped += plan.skips.length;
  if (plan.start === null) return;
  // INSERT OR IGNORE wrote nothing: another invocation owns this due time.
  if ((results[claimIndex]?.meta.changes ?? 0) === 0) return;
  await attempt(services, schedule, iso(plan.start), now, summary);
}

async function retry(
  services: Services,
  schedule: ScheduleRow,
  dueIso: string,
  lastAttemptAt: number,
  now: number,
  summary: DispatchSummary,
): Promise<void> {
  const dueAt = ms(dueIso);
  const retryAt = nextRetryAt(dueAt, lastAttemptAt);
  if (retryAt === null) {
    const detail = `gave up: no capacity within the ${RETRY_WINDOW_MS / 60_000}-minute retry window`;
    await expireRetry(services.db, schedule.id, dueIso, detail, iso(now));
    summary.skipped++;
    return;
  }
  if (now < retryAt) return;
  if (!(await claimRetry(services.db, schedule.id, dueIso, iso(now)))) return;
  await attempt(services, schedule, dueIso, now, summary);
}

/** A claim whose dispatcher died: tried again inside the retry window, else failed and announced. */
async function recoverClaim(
  services: Services,
  schedule: ScheduleRow,
  run: RunRow,
  cutoff: string,
  now: number,
  summary: DispatchSummary,
): Promise<void> {
  const { db } = services;
  if (now > ms(run.due_at) + RETRY_WINDOW_MS || !schedule.enabled) {
    const why = schedule.enabled
      ? `the ${RETRY_WINDOW_MS / 60_000}-minute retry window has passed`
      : "the schedule is disabled";
    const detail = `failed: the dispatcher that claimed this run at ${run.updated_at} did not finish, and ${why}`;
    if (!(await failStaleClaim(db, schedule.id, run.due_at, cutoff, detail, iso(now)))) return;
    await enqueue(db, scheduleEvent("failed", schedule, run.due_at, detail, run.lease_id), now);
    services.log.warn("schedule_claim_lost", { schedule_id: schedule.id, due_at: run.due_at });
    summary.skipped++;
    return;
  }
  if (!(await reclaimStale(db, schedule.id, run.due_at, cutoff, iso(now)))) return;
  services.log.warn("schedule_claim_recovered", { schedule_id: schedule.id, due_at: run.due_at });
  await attempt(services, schedule, run.due_at, now, summary, true);
}

/** The dispatcher's idempotency key of a run's attempt number `n` (1-based). */
function attemptKey(scheduleId: string, dueIso: string, n: number): string {
  return `schedule:${scheduleId}:${dueIso}#${n}`;
}

/** One rental attempt for a claimed run; records how it ended. */
async function attempt(
  services: Services,
  schedule: ScheduleRow,
  dueIso: string,
  now: number,
  summary: DispatchSummary,
  recovered = false,
): Promise<void> {
  const { db } = services;
  const at = iso(now);
  const finish = (
    status: "started" | "skipped" | "retrying" | "failed",
    detail: string | null,
    leaseId: string | null,
    attempted: boolean,
  ) =>
    finishRun(db, { scheduleId: schedule.id, dueAt: dueIso, status, leaseId, detail, attempted, now: at }).then(() =>
      status === "skipped" || status === "failed"
        ? enqueue(db, scheduleEvent(status, schedule, dueIso, detail, leaseId), now)
        : undefined,
    );

  const attemptNo = await attemptsSoFar(db, schedule.id, dueIso);
  // A dead claimer's attempt left attempts as it was: its rental (if any) holds this key.
  if (recovered) {
    const key = scopedIdempotencyKey({
      idempotencyKey: attemptKey(schedule.id, dueIso, attemptNo + 1),
      idempotencyScope: "dispatcher",
    });
    const prior = key ? await getLeaseByIdempotencyKey(db, key) : null;
    if (prior && prior.stop_reason !== "rent_failed") {
      await finish("started", null, prior.id, true);
      summary.started.push(prior.id);
      return;
    }
    if (prior) {
      const retrying = nextRetryAt(ms(dueIso), now) !== null;
      const detail = "the rental of a dispatcher that did not finish failed";
      await finish(retrying ? "retrying" : "failed", `${retrying ? "retrying" : "gave up"}: ${detail}`, prior.id, true);
      if (retrying) summary.retrying++;
      else summary.skipped++;
      return;
    }
  }

  const previous = await activeLeaseOf(db, schedule.id);
  if (previous) {
    const detail = `skipped: the previous lease ${previous} is still active`;
    await finish("skipped", detail, null, false);
    await appendEvent(db, previous, at, {
      kind: "schedule_run_skipped",
      detail: `run due ${dueIso} skipped: this lease is still active`,
    });
    summary.skipped++;
    return;
  }

  const offers = await checkOffers(services, schedule.lease_spec);
  if (offers.kind === "none") {
    const price =
      schedule.lease_spec.max_price !== undefined ? ` under max_price ${schedule.lease_spec.max_price} USD/h` : "";
    await finish("skipped", `skipped: no offer matches the lease${price}`, null, false);
    summary.skipped++;
    return;
  }

  let outcome: Classified;
  try {
    const rented = await createLease(
      services,
      { ...schedule.lease_spec, name: schedule.lease_spec.name ?? schedule.name },
      {
        // The claim already makes the run unique; the key keeps a repeated attempt from renting twice.
        idempotencyKey: attemptKey(schedule.id, dueIso, attemptNo + 1),
        idempotencyScope: "dispatcher",
        scheduleId: schedule.id,
        tokenId: null,
        origin: schedule.origin ?? FALLBACK_ORIGIN,
      },
    );
    if (rented.ok) {
      await finish("started", null, rented.lease.id, true);
      await appendEvent(db, rented.lease.id, at, {
        kind: "schedule_run",
        detail: `started by schedule ${schedule.id} for the run due ${dueIso}`,
      });
      summary.started.push(rented.lease.id);
      return;
    }
    outcome = classify(rented.refusal, offers.kind === "unknown");
  } catch (error) {
    outcome = unexpected(error);
  }
  const canRetry = nextRetryAt(ms(dueIso), now) !== null;
  if (outcome.retry && canRetry) {
    await finish("retrying", `retrying: ${outcome.detail}`, outcome.leaseId, true);
    summary.retrying++;
  } else {
    await finish(
      outcome.retry ? "skipped" : outcome.status,
      outcome.retry ? `gave up: ${outcome.detail}` : outcome.detail,
      outcome.leaseId,
      true,
    );
    summary.skipped++;
  }
}

interface Classified {
  retry: boolean;
  status: "skipped" | "failed";
  detail: string;
  leaseId: string | null;
}

/** What a refused rental means for the run: try again later, skip it, or record a failure. */
function classify(refusal: RentRefusal, listingFailed: boolean): Classified {
  const leaseId = refusal.leaseId;
  switch (refusal.code) {
    case "no_capacity":
      // Without a lease row no offer was even tried: none matched, or a listing failed.
      return {
        retry: leaseId !== null || listingFailed,
        status: "skipped",
        detail: `no capacity: ${refusal.message}`,
        leaseId,
      };
    case "limit_reached":
      return { retry: true, status: "skipped", detail: refusal.message, leaseId };
    case "budget_exceeded":
      return { retry: false, status: "skipped", detail: `budget: ${refusal.message}`, leaseId };
    case "provider_error":
      return { retry: true, status: "failed", detail: refusal.message, leaseId };
    default:
      return { retry: false, status: "failed", detail: `${refusal.code}: ${refusal.message}`, leaseId };
  }
}

/** A failure that is no refusal (D1 down, a bug): worth another try while the run may retry. */
function unexpected(error: unknown): Classified {
  return {
    retry: true,
    status: "failed",
    detail: `unexpected: ${error instanceof Error ? error.message : String(error)}`,
    leaseId: null,
  };
}

async function attemptsSoFar(db: D1Database, scheduleId: string, dueIso: string): Promise<number> {
  const row = await db
    .prepare("SELECT attempts FROM schedule_runs WHERE schedule_id = ? AND due_at = ?")
    .bind(scheduleId, dueIso)
    .first<{ attempts: number }>();
  return row?.attempts ?? 0;
}
