/**
 * The keeper's decisions, with no I/O: given the lease row, the loop's own state, what the
 * provider reported and the time, what changes, what is logged, and when to look again.
 */

import type { Config } from "../config";
import type { LeasePatch, LeaseRow, NewEvent } from "../leases/ledger";
import { billedCost, costCapAt, reservationUsd, roundMoney, timeCapAt, timeCost, toUsd } from "../leases/pricing";
import type { StopReason } from "../leases/schema";
import { iso, ms } from "../lib/time";
import { loadedAtWithin } from "../providers/ollama-answer";
import type { MachineStatus, OllamaProbe } from "../providers/types";

export interface KeeperSettings {
  pollIntervalMs: number;
  verifyIntervalMs: number;
  reterminateIntervalMs: number;
  startTimeoutMs: number;
  /** a teardown still unverified after this long is flagged and slowed down */
  unverifiedAfterMs: number;
  /** the verify pace once flagged */
  slowVerifyMs: number;
  /** running: how often to look for traffic cost and machines that died */
  beatMs: number;
  /** how long a request may still be renting a machine for a lease without provider_ref */
  rentWindowMs: number;
  eurUsd: number;
  /** START_TIMEOUT_MIN: the budget reservation's boot time */
  startTimeoutMin: number;
}

export function keeperSettings(config: Config): KeeperSettings {
  return {
    pollIntervalMs: config.pollIntervalS * 1000,
    verifyIntervalMs: config.verifyIntervalS * 1000,
    reterminateIntervalMs: config.reterminateIntervalS * 1000,
    startTimeoutMs: config.startTimeoutMin * 60_000,
    unverifiedAfterMs: 10 * 60_000,
    slowVerifyMs: Math.max(60_000, config.verifyIntervalS * 1000),
    beatMs: 60_000,
    rentWindowMs: 2 * 60_000,
    eurUsd: config.eurUsd,
    startTimeoutMin: config.startTimeoutMin,
  };
}

/** What the loop remembers between alarms (Durable Object storage). */
export interface LoopState {
  /** when terminate was last sent successfully */
  terminateSentAt: number | null;
  /** terminates sent in this teardown: the re-send pace doubles with each */
  terminatesSent: number;
  /** traffic charges reported so far, in the lease's currency */
  trafficCost: number;
  /** the last observation logged, so an unchanged one is not logged every poll */
  lastSeen: string | null;
  unverifiedFlagged: boolean;
  /** the lease's error before it was flagged teardown_unverified, restored once verified */
  errorBeforeFlag: string | null;
  /** "gone" reads in a row of an active lease's machine (one alone may be a flapping status) */
  goneReads: number;
  /** the teardown the per-teardown fields belong to (its stop_requested_at): a reopen starts afresh */
  teardownOf: string | null;
  /** when this teardown's machine was verified gone (its cost ends there) while other creates stay open */
  machineGoneAt: number | null;
  /** a read has shown the machine (absent in state stored before it existed: not yet seen) */
  machineSeen?: boolean;
}

export const initialLoopState: LoopState = {
  terminateSentAt: null,
  terminatesSent: 0,
  trafficCost: 0,
  lastSeen: null,
  unverifiedFlagged: false,
  errorBeforeFlag: null,
  goneReads: 0,
  teardownOf: null,
  machineGoneAt: null,
};

/**
 * The loop state for this step: a stopping lease whose teardown is not the one the stored state
 * belongs to (the reaper reopened it, or a rental was recorded after a stop) starts its
 * teardown afresh, so no gone read or terminate of an earlier teardown counts toward this one.
 */
export function loopFor(lease: Pick<LeaseRow, "status" | "stop_requested_at">, stored: LoopState): LoopState {
  if (lease.status !== "stopping" || stored.teardownOf === lease.stop_requested_at) return stored;
  return {
    ...stored,
    terminateSentAt: null,
    terminatesSent: 0,
    lastSeen: null,
    unverifiedFlagged: false,
    errorBeforeFlag: null,
    goneReads: 0,
    machineGoneAt: null,
    teardownOf: lease.stop_requested_at,
  };
}

/** A lease status change, with the events that explain it. */
export interface Decision {
  /** applied only while the lease still has the status it had when read */
  patch: LeasePatch;
  events: NewEvent[];
  loop: LoopState;
  /** when the next alarm should run; null when the lease is done */
  nextAlarmAt: number | null;
  /** the lease went to `stopping` in this step: start the teardown right away */
  teardownNow: boolean;
}

export interface StopCause {
  reason: StopReason | null;
  /** stored in `error` (failed start, machine died); null for a normal stop */
  error: string | null;
  detail: string;
}

/** The patch that moves an active lease to `stopping`, cost frozen at this moment. */
export function stoppingPatch(lease: LeaseRow, loop: LoopState, cause: StopCause, now: number): LeasePatch {
  const patch: LeasePatch = {
    status: "stopping",
    stop_reason: cause.reason,
    stop_requested_at: iso(now),
    cost: currentCost(lease, loop, now),
  };
  if (cause.error !== null) patch.error = cause.error;
  return patch;
}

/** The lease's cost so far in its currency: never less than what was already recorded. */
export function currentCost(lease: LeaseRow, loop: LoopState, now: number, reportedCost: number | null = null): number {
  return roundMoney(Math.max(lease.cost, billedCost(timeCost(lease, now), reportedCost, loop.trafficCost)));
}

/**
 * When a provisioning lease gives up: START_TIMEOUT_MIN after it was written, plus the time its
 * model's weights take to arrive at the rented offer (a 40 GB download is not a stuck start).
 */
export function startDeadline(
  lease: Pick<LeaseRow, "created_at" | "spec">,
  s: Pick<KeeperSettings, "startTimeoutMs">,
): number {
  return ms(lease.created_at) + s.startTimeoutMs + (lease.spec.download_s ?? 0) * 1000;
}

/** The first cap moment of an active lease (time, cost, or the start timeout). */
export function nextCapAt(lease: LeaseRow, loop: LoopState, s: KeeperSettings): number | null {
  const moments = [costCapAt(lease, chargedBesidesTime(lease, loop), s.eurUsd)];
  if (lease.status === "running") moments.push(timeCapAt(lease));
  if (lease.status === "provisioning") moments.push(startDeadline(lease, s));
  const known = moments.filter((m): m is number => m !== null);
  return known.length ? Math.min(...known) : null;
}

/**
 * What the lease is charged besides its own machine's time, in its currency: traffic, and its
 * other machines (strays), so `max_cost` counts everything the lease costs.
 */
export function chargedBesidesTime(lease: Pick<LeaseRow, "strays_cost">, loop: Pick<LoopState, "trafficCost">): number {
  return loop.trafficCost + (lease.strays_cost ?? 0);
}

/** A cap (or the start timeout) reached at `now`, before asking the provider anything. */
export function capReached(lease: LeaseRow, loop: LoopState, now: number, s: KeeperSettings): StopCause | null {
  if (lease.status === "running") {
    const timeCap = timeCapAt(lease);
    if (timeCap !== null && now >= timeCap) {
      return { reason: "max_minutes", error: null, detail: `max_minutes (${lease.max_minutes}) reached` };
    }
  }
  if (lease.status === "provisioning" && now >= startDeadline(lease, s)) {
    return {
      reason: "start_timeout",
      error: `the machine did not start within ${Math.round((startDeadline(lease, s) - ms(lease.created_at)) / 60_000)} minutes`,
      detail: "start timeout reached",
    };
  }
  const costCap = costCapAt(lease, chargedBesidesTime(lease, loop), s.eurUsd);
  if (costCap !== null && now >= costCap) {
    return { reason: "max_cost", error: null, detail: `max_cost (${lease.max_cost} USD) reached` };
  }
  return null;
}

/** The decision for a cap reached before polling. */
export function decideCap(lease: LeaseRow, loop: LoopState, cause: StopCause, now: number): Decision {
  return {
    patch: stoppingPatch(lease, loop, cause, now),
    events: [{ kind: "stop_requested", detail: `${cause.reason ?? "error"}: ${cause.detail}`, reason: cause.reason }],
    loop,
    nextAlarmAt: now,
    teardownNow: true,
  };
}

/** What a status poll of a provisioning or running lease returned. */
export type PollResult =
  | {
      ok: true;
      status: MachineStatus;
      /** how far the Ollama server is; null when not asked (not running yet, or not Ollama) */
      probe: OllamaProbe | null;
    }
  | { ok: false; error: string };

/**
 * Money truth: the provider's own price for the machine replaces the offer's as soon as a status
 * read of a live machine reports one (a 0 for a stopping or gone machine is not a price).
 */
export function reportedPrice(lease: LeaseRow, status: MachineStatus): number | null {
  const price = status.price_per_hour;
  if (price === null || !(price > 0)) return null;
  if (status.state !== "running" && status.state !== "booting") return null;
  return price === lease.price_per_hour ? null : price;
}

/** Provisioning or running: decide from one status poll. */
export function decideAfterPoll(
  lease: LeaseRow,
  loop: LoopState,
  poll: PollResult,
  now: number,
  s: KeeperSettings,
): Decision {
  const price = poll.ok ? reportedPrice(lease, poll.status) : null;
  if (price === null) return decideFromPoll(lease, loop, poll, now, s);
  // From here on cost and caps use the provider's price.
  const decision = decideFromPoll({ ...lease, price_per_hour: price }, loop, poll, now, s);
  return {
    ...decision,
    // The budget's reservation follows the provider's price.
    patch: {
      price_per_hour: price,
      expected_cost: reservationUsd(lease, price, s.startTimeoutMin, s.eurUsd),
      ...decision.patch,
    },
    events: [
      {
        kind: "price_updated",
        detail:
          `${lease.price_per_hour ?? "no price"} → ${price} ${lease.currency ?? ""}/h: the provider's own price for this machine`.trim(),
      },
      ...decision.events,
    ],
  };
}

/**
 * How long after its rent a machine that no read has shown yet may read "gone" without being
 * taken for gone: vast-cli's wait for a new instance retries an empty answer for its whole 900 s
 * (docs/architecture.md#fresh-machine-grace). A machine that never existed bills nothing meanwhile.
 */
export const FRESH_MACHINE_GRACE_MS = 15 * 60_000;
const NOT_SHOWN_YET = "the provider does not show the new machine yet; waiting for it";

/** The grace's end; never past the start timeout, which ends a machine that does not come up anyway. */
function freshUntil(lease: LeaseRow, s: KeeperSettings): number {
  const rentedAt = Date.parse(lease.rented_at ?? lease.created_at);
  return Number.isFinite(rentedAt) ? rentedAt + Math.min(FRESH_MACHINE_GRACE_MS, s.startTimeoutMs) : 0;
}

function decideFromPoll(lease: LeaseRow, loop: LoopState, poll: PollResult, now: number, s: KeeperSettings): Decision {
  const events: NewEvent[] = [];
  const seen = (summary: string, event: NewEvent) => {
    if (loop.lastSeen !== summary) events.push(event);
    return summary;
  };

  if (!poll.ok) {
    const nextLoop = {
      ...loop,
      lastSeen: seen(`status_failed:${poll.error}`, { kind: "status_failed", detail: poll.error }),
    };
    return { patch: {}, events, loop: nextLoop, nextAlarmAt: nextPollAt(lease, nextLoop, now, s), teardownNow: false };
  }

  const status = poll.status;
  const trafficCost = Math.max(loop.trafficCost, status.traffic_cost ?? 0);
  let nextLoop: LoopState = {
    ...loop,
    trafficCost,
    goneReads: status.state === "gone" ? (loop.goneReads ?? 0) + 1 : 0,
  };
  const cost = currentCost(lease, nextLoop, now, status.cost);

  if (status.state === "gone" && !loop.machineSeen && lease.status === "provisioning" && now < freshUntil(lease, s)) {
    // Vast shows `{"instances": null}` for an instance it has just made; vast-cli retries it
    // (docs/architecture.md#fresh-machine-grace): not gone before it was ever seen, within the grace.
    return {
      patch: cost !== lease.cost ? { cost } : {},
      events,
      loop: { ...nextLoop, goneReads: 0, lastSeen: seen("not_shown_yet", { kind: "booting", detail: NOT_SHOWN_YET }) },
      nextAlarmAt: nextPollAt(lease, nextLoop, now, s),
      teardownNow: false,
    };
  }
  if (status.state !== "gone") nextLoop.machineSeen = true;

  if (status.state === "gone" && nextLoop.goneReads < 2) {
    // A status that flaps between running and gone would otherwise kill a healthy machine's
    // job: look once more, soon, before concluding the machine died.
    return {
      patch: cost !== lease.cost ? { cost } : {},
      events: [
        { kind: "gone_unconfirmed", detail: "the provider reports the machine gone; checking again before stopping" },
      ],
      loop: nextLoop,
      nextAlarmAt: now + s.verifyIntervalMs,
      teardownNow: false,
    };
  }

  if (status.state === "gone" || status.state === "exited") {
    const what = status.state === "gone" ? "the machine is gone" : "the machine exited";
    const when = lease.status === "provisioning" ? " before it ran" : " on its own";
    const error = status.error ? `${what}${when}: ${status.error}` : `${what}${when}`;
    const cause: StopCause = { reason: null, error, detail: error };
    return {
      patch: { ...stoppingPatch(lease, nextLoop, cause, now), cost },
      events: [{ kind: lease.status === "provisioning" ? "start_failed" : "machine_died", detail: error }],
      loop: nextLoop,
      nextAlarmAt: now,
      teardownNow: true,
    };
  }

  const patch: LeasePatch = {};
  if (cost !== lease.cost) patch.cost = cost;
  if (status.access && JSON.stringify(status.access) !== JSON.stringify(lease.access)) patch.access = status.access;

  if (lease.status === "provisioning") {
    const probe = lease.template === "ollama" && status.state === "running" ? poll.probe : null;
    const unusable = probe ? modelFailure(probe) : null;
    if (unusable) {
      // The model cannot serve from this machine: nothing more is paid for it.
      const cause: StopCause = { reason: "start_failed", error: unusable, detail: unusable };
      return {
        patch: { ...patch, ...stoppingPatch(lease, nextLoop, cause, now), cost },
        events: [{ kind: "start_failed", detail: unusable }],
        loop: nextLoop,
        nextAlarmAt: now,
        teardownNow: true,
      };
    }
    const up = status.state === "running" && (lease.template !== "ollama" || probe?.phase === "ready");
    if (up) {
      patch.status = "running";
      patch.running_at = iso(now);
      if (lease.spec.model && probe?.phase === "ready")
        patch.spec = {
          ...lease.spec,
          // The server's own digest of what it loaded (`/api/tags` gives the hex alone).
          model: {
            ...lease.spec.model,
            digest: probe.digest ? `sha256:${probe.digest.replace(/^sha256:/, "")}` : lease.spec.model.digest,
            // The server's own time of the load where it said one (providers/ollama-answer.ts).
            loaded_at: iso(loadedAtWithin(probe.loaded_at, Date.parse(lease.rented_at ?? lease.created_at), now)),
          },
        };
      // No URL in the event: every read token sees events, the machine's URL is the renter's (access).
      events.push({ kind: "running", detail: null });
      nextLoop = { ...nextLoop, lastSeen: "running" };
      const runningLease: LeaseRow = {
        ...lease,
        ...(patch as Partial<LeaseRow>),
        access: patch.access ?? lease.access,
      };
      return {
        patch,
        events,
        loop: nextLoop,
        nextAlarmAt: nextPollAt(runningLease, nextLoop, now, s),
        teardownNow: false,
      };
    }
    const phase = probe && probe.phase !== "down" ? modelPhase(probe) : null;
    if (phase) {
      nextLoop = { ...nextLoop, lastSeen: seen(phase.summary, phase.event) };
    } else {
      const summary: "waiting_for_ollama" | "booting" | `state:${string}` =
        status.state === "running"
          ? "waiting_for_ollama"
          : status.state === "booting"
            ? "booting"
            : `state:${status.state}`;
      const detail =
        summary === "waiting_for_ollama"
          ? "the container runs; waiting for the Ollama server to answer"
          : status.state === "booting"
            ? "the provider accepted the machine; waiting for the container"
            : "the provider's status is unclear; still waiting";
      nextLoop = {
        ...nextLoop,
        // An unclear status while coming up is a `machine_state` event, as it is once running.
        lastSeen: seen(summary, {
          kind: summary === "waiting_for_ollama" || summary === "booting" ? summary : "machine_state",
          detail,
        }),
      };
    }
  } else {
    nextLoop = {
      ...nextLoop,
      lastSeen:
        status.state === "running"
          ? "running"
          : seen(`state:${status.state}`, { kind: "machine_state", detail: `the provider reports ${status.state}` }),
    };
  }

  const updated: LeaseRow = { ...lease, cost: patch.cost ?? lease.cost };
  const cause = capReached(updated, nextLoop, now, s);
  if (cause) {
    return {
      patch: { ...patch, ...stoppingPatch(updated, nextLoop, cause, now) },
      events: [...events, { kind: "stop_requested", detail: `${cause.reason}: ${cause.detail}`, reason: cause.reason }],
      loop: nextLoop,
      nextAlarmAt: now,
      teardownNow: true,
    };
  }
  if (lease.max_cost !== null && toUsd(cost + (lease.strays_cost ?? 0), lease.currency, s.eurUsd) >= lease.max_cost) {
    const costCause: StopCause = {
      reason: "max_cost",
      error: null,
      detail: `max_cost (${lease.max_cost} USD) reached`,
    };
    return {
      patch: { ...patch, ...stoppingPatch(updated, nextLoop, costCause, now), cost },
      events: [...events, { kind: "stop_requested", detail: `max_cost: ${costCause.detail}`, reason: "max_cost" }],
      loop: nextLoop,
      nextAlarmAt: now,
      teardownNow: true,
    };
  }
  return { patch, events, loop: nextLoop, nextAlarmAt: nextPollAt(updated, nextLoop, now, s), teardownNow: false };
}

/** A probe that ends the lease: the pull failed, or the model spilled out of GPU memory. */
export function modelFailure(probe: OllamaProbe): string | null {
  if (probe.phase === "failed") return `the model could not be pulled or loaded: ${probe.error}`;
  if (probe.phase === "spilled") {
    const gb = (bytes: number) => (bytes / 1e9).toFixed(1);
    return `the model does not fit in GPU memory: ${gb(probe.size_vram)} of ${gb(probe.size)} GB on the GPU, the rest on the CPU`;
  }
  return null;
}

/** The event for a model on its way (pulling with progress in 10 % steps, loading), or null. */
export function modelPhase(probe: OllamaProbe): { summary: string; event: NewEvent } | null {
  if (probe.phase === "pulling") {
    const share = probe.total ? Math.min(1, (probe.completed ?? 0) / probe.total) : null;
    const step = share === null ? "?" : String(Math.floor(share * 10) * 10);
    const detail =
      share === null
        ? "the server is pulling the model"
        : `${((probe.completed ?? 0) / 1e9).toFixed(1)} of ${((probe.total ?? 0) / 1e9).toFixed(1)} GB (${step} %)`;
    return { summary: `pulling:${step}`, event: { kind: "pulling", detail } };
  }
  if (probe.phase === "loading")
    return {
      summary: "loading",
      event: { kind: "loading", detail: "the model is pulled; loading it into GPU memory" },
    };
  return null;
}

/** The next look at an active lease: the poll or the beat, or a cap moment if sooner. */
export function nextPollAt(lease: LeaseRow, loop: LoopState, now: number, s: KeeperSettings): number {
  const pace = lease.status === "provisioning" ? s.pollIntervalMs : s.beatMs;
  const cap = nextCapAt(lease, loop, s);
  return cap === null ? now + pace : Math.max(now, Math.min(now + pace, cap));
}

/** Stopping: which provider calls this step makes. */
export interface TeardownPlan {
  terminate: boolean;
}

/** The first re-send of an ignored terminate; each further one waits twice as long. */
export const FIRST_RETERMINATE_MS = 5_000;

/**
 * How long after the last terminate the next is sent while the machine is still there: ~5 s,
 * doubling up to RETERMINATE_INTERVAL_S. An ignored terminate then costs seconds of billing,
 * not a whole interval, and a provider that keeps ignoring is not hammered.
 */
export function reterminateAfterMs(
  loop: Pick<LoopState, "terminatesSent">,
  s: Pick<KeeperSettings, "reterminateIntervalMs">,
): number {
  // 5 s, 5 s, 10 s, 20 s, ...: the first two re-sends come quickly (most ignored terminates are one-offs).
  const doublings = Math.max(0, (loop.terminatesSent ?? 1) - 2);
  return Math.min(FIRST_RETERMINATE_MS * 2 ** Math.min(doublings, 20), s.reterminateIntervalMs);
}

export function planTeardown(_lease: LeaseRow, loop: LoopState, now: number, s: KeeperSettings): TeardownPlan {
  const due = loop.terminateSentAt === null || now - loop.terminateSentAt >= reterminateAfterMs(loop, s);
  return { terminate: due };
}

/** What the teardown step saw. */
export interface TeardownResult {
  terminate?: { ok: true } | { ok: false; error: string };
  /** the verifying status read; absent when the call budget ran out */
  status?: { ok: true; status: MachineStatus } | { ok: false; error: string };
}

/**
 * Stopping: `stopped` only on two status reads in a row that say gone, and only once nothing
 * else of the lease is open (`open`: unresolved creates and other machines not verified gone).
 * The cost runs until that moment: the teardown's time is billed.
 */
export function decideTeardown(
  lease: LeaseRow,
  loop: LoopState,
  result: TeardownResult,
  now: number,
  s: KeeperSettings,
  open = 0,
): Decision {
  const events: NewEvent[] = [];
  const nextLoop = { ...loop };
  const patch: LeasePatch = {};

  if (result.terminate) {
    if (result.terminate.ok) {
      nextLoop.terminateSentAt = now;
      nextLoop.terminatesSent = (loop.terminatesSent ?? 0) + 1;
      events.push({ kind: "terminate_sent", detail: null });
    } else {
      events.push({ kind: "terminate_failed", detail: result.terminate.error });
    }
  }
  const gone = result.status?.ok === true && result.status.status.state === "gone";
  nextLoop.goneReads = gone ? (loop.goneReads ?? 0) + 1 : result.status ? 0 : (loop.goneReads ?? 0);
  // What the provider reports it billed for the machine (and its traffic), on every read, gone too.
  const reported = result.status?.ok ? result.status.status.cost : null;
  if (result.status?.ok) nextLoop.trafficCost = Math.max(loop.trafficCost, result.status.status.traffic_cost ?? 0);
  // Two "gone" reads in a row: a status that flaps to gone while an ignored terminate leaves the
  // machine running must not end the teardown.
  if (result.status?.ok && !gone) {
    // Still there: the cost runs on (spend of a stopping lease is this figure, so it never goes
    // down), at the provider's own price when the read reports one.
    const price = reportedPrice(lease, result.status.status);
    if (price !== null) patch.price_per_hour = price;
    const cost = currentCost({ ...lease, price_per_hour: price ?? lease.price_per_hour }, nextLoop, now, reported);
    if (cost !== lease.cost) patch.cost = cost;
    nextLoop.machineGoneAt = null;
  }
  if (gone && nextLoop.goneReads >= 2 && (loop.machineGoneAt ?? null) === null) {
    // Verified gone now: billing ran until this moment.
    const priced = { ...lease, price_per_hour: patch.price_per_hour ?? lease.price_per_hour };
    const cost = currentCost(priced, nextLoop, now, reported);
    if (cost !== lease.cost) patch.cost = cost;
    nextLoop.machineGoneAt = now;
  }
  if (result.status?.ok && (reported !== null || result.status.status.traffic_cost !== null)) {
    const floor = billedCost(0, reported, nextLoop.trafficCost);
    if (floor > (patch.cost ?? lease.cost)) patch.cost = floor;
  }
  if (gone && nextLoop.goneReads >= 2 && open === 0) {
    return stoppedDecision(
      nextLoop,
      patch,
      [...events, { kind: "stopped", detail: "the provider confirms the machine is gone" }],
      now,
    );
  }
  if (gone && nextLoop.goneReads >= 2) {
    // This machine is verified gone; the lease waits for its other creates and machines.
    const summary = `waiting_for_creates:${open}`;
    if (loop.lastSeen !== summary)
      events.push({
        kind: "teardown_waiting",
        detail: `the machine is gone; ${open} other create(s) or machine(s) of this lease are still open`,
      });
    nextLoop.lastSeen = summary;
    // Flagged like a machine that never reads gone: whatever keeps the lease open is not verified.
    const since = lease.stop_requested_at ? ms(lease.stop_requested_at) : now;
    flagUnverified(
      lease,
      nextLoop,
      patch,
      events,
      now - since,
      s,
      `${open} create(s) or machine(s) are not confirmed gone`,
      "still trying",
    );
    const pace = nextLoop.unverifiedFlagged ? s.slowVerifyMs : s.verifyIntervalMs;
    return { patch, events, loop: nextLoop, nextAlarmAt: now + pace, teardownNow: false };
  }
  if (result.status && !result.status.ok) {
    const summary = `verify_failed:${result.status.error}`;
    if (loop.lastSeen !== summary)
      events.push({ kind: "verify_failed", detail: `${result.status.error} (counts as still there)` });
    nextLoop.lastSeen = summary;
  } else if (result.status?.ok) {
    nextLoop.lastSeen = `teardown:${result.status.status.state}`;
  }

  const since = lease.stop_requested_at ? ms(lease.stop_requested_at) : now;
  flagUnverified(lease, nextLoop, patch, events, now - since, s, "the machine is not confirmed gone", "still trying");
  // A first "gone" is confirmed a moment later, not a whole interval: billing runs until it is.
  const pace = gone ? CONFIRM_GONE_MS : nextLoop.unverifiedFlagged ? s.slowVerifyMs : s.verifyIntervalMs;
  return { patch, events, loop: nextLoop, nextAlarmAt: now + pace, teardownNow: false };
}

/** The confirming read after a first "gone": a second read, not a second interval. */
export const CONFIRM_GONE_MS = 1_000;

export function stoppedDecision(loop: LoopState, patch: LeasePatch, events: NewEvent[], now: number): Decision {
  const verified: LeasePatch = {
    status: "stopped",
    stopped_at: iso(now),
    teardown_verified_at: iso(now),
    // A stopped lease's key opens nothing: the sealed copy for its webhook has no use left.
    inference_key_sealed: null,
  };
  // Verified at last: the flag has done its job; the error that led to the teardown comes back.
  if (loop.unverifiedFlagged) verified.error = loop.errorBeforeFlag;
  return {
    patch: { ...patch, ...verified },
    events,
    loop,
    nextAlarmAt: null,
    teardownNow: false,
  };
}

/**
 * Once a teardown has gone unverified past its window: flag the lease (the error it had comes back
 * when the teardown verifies) and say so once. The keeper goes on at a slower pace.
 */
export function flagUnverified(
  lease: LeaseRow,
  loop: LoopState,
  patch: LeasePatch,
  events: NewEvent[],
  elapsedMs: number,
  s: KeeperSettings,
  what: string,
  goingOn: string,
): void {
  if (loop.unverifiedFlagged || elapsedMs < s.unverifiedAfterMs) return;
  loop.unverifiedFlagged = true;
  loop.errorBeforeFlag = lease.error;
  patch.error = "teardown_unverified";
  events.push({
    kind: "teardown_unverified",
    detail: `${what} after ${Math.round(s.unverifiedAfterMs / 60_000)} minutes; ${goingOn}`,
  });
}
