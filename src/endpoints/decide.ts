import type { ProviderName } from "../providers/types";
/**
 * The decisions of a model endpoint, pure: which replica a request goes to, when to rent
 * another, which replicas to drain and stop, what a lost replica means. The endpoint's Durable
 * Object (src/endpoints/endpoint-do.ts) keeps this state, performs the actions and arms alarms.
 */

/** A replica's life as the endpoint sees it; its lease has its own status in the ledger. */
export type ReplicaPhase = "renting" | "starting" | "running" | "draining" | "stopping";

export interface Replica {
  /** the rental's idempotency key suffix: a retried rental after a crash finds the same lease */
  rentKey: string;
  /** null while its rental is being sent */
  leaseId: string | null;
  phase: ReplicaPhase;
  inFlight: number;
  lastRequestAt: number | null;
  rentedAt: number;
  runningAt: number | null;
  /** the machine's Ollama URL and provider, once running */
  base: string | null;
  provider: ProviderName | null;
  /** the context its model was sized for (a request may not ask for more); absent in loops stored before */
  contextLength?: number | null;
}

export interface EndpointLoop {
  replicas: Replica[];
  /** failed starts in a row (a rental refused, a lease that ended before running) */
  failedStarts: number;
  breakerOpenedAt: number | null;
  /** since when requests in flight per running replica have been above the target */
  overloadSince: number | null;
  /** the first request that found no running replica, not yet served by one */
  waitingSince: number | null;
  /** the last request that arrived (routed or waiting) */
  lastRequestAt: number | null;
  coldStarts: { at: number; durationMs: number }[];
  /** providers whose replicas were lost lately, tried last for a replacement */
  avoidProviders: string[];
  /** today's spend of the replicas reached budget_daily_usd (at the last look) */
  budgetExhausted: boolean;
  /** why the last rental was refused */
  lastError: string | null;
  /** replicas lost while in use, to be rented again (on another provider where one is configured) */
  replace: number;
}

export interface EndpointPolicy {
  minReplicas: number;
  maxReplicas: number;
  idleMinutes: number;
  targetInFlight: number;
  budgetExhausted: boolean;
}

/** Failed starts in a row that open the breaker, and how long it stays open. */
export const BREAKER_FAILURES = 3;
export const BREAKER_OPEN_MS = 15 * 60_000;
/** Requests in flight per replica above the target this long rent another replica. */
export const OVERLOAD_WINDOW_MS = 30_000;
/** A rental not on record after this long was lost with its request: sent again (same key). */
export const RENTING_STALE_MS = 60_000;
const COLD_STARTS_KEPT = 50;

export function initialLoop(): EndpointLoop {
  return {
    replicas: [],
    failedStarts: 0,
    breakerOpenedAt: null,
    overloadSince: null,
    waitingSince: null,
    lastRequestAt: null,
    coldStarts: [],
    avoidProviders: [],
    budgetExhausted: false,
    lastError: null,
    replace: 0,
  };
}

export function breakerOpen(loop: EndpointLoop, now: number): boolean {
  return loop.breakerOpenedAt !== null && now - loop.breakerOpenedAt < BREAKER_OPEN_MS;
}

/** The running replica with the fewest requests in flight (the longest unused among equals); null if none. */
export function pickReplica(replicas: readonly Replica[]): Replica | null {
  let best: Replica | null = null;
  for (const replica of replicas) {
    if (replica.phase !== "running" || !replica.base) continue;
    if (
      !best ||
      replica.inFlight < best.inFlight ||
      (replica.inFlight === best.inFlight && (replica.lastRequestAt ?? 0) < (best.lastRequestAt ?? 0))
    )
      best = replica;
  }
  return best;
}

/** Replicas that serve or will: not draining or stopping. */
const live = (replicas: readonly Replica[]) =>
  replicas.filter((r) => r.phase === "renting" || r.phase === "starting" || r.phase === "running");

/** Re-reads whether the running replicas are over the target (called after every change of in-flight counts). */
export function trackOverload(loop: EndpointLoop, targetInFlight: number, now: number): EndpointLoop {
  const running = loop.replicas.filter((r) => r.phase === "running");
  const inFlight = running.reduce((sum, r) => sum + r.inFlight, 0);
  const over = running.length > 0 && inFlight / running.length > targetInFlight;
  return { ...loop, overloadSince: over ? (loop.overloadSince ?? now) : null };
}

/** What a replica's lease in the ledger says now. */
export interface LeaseSeen {
  status: "provisioning" | "running" | "stopping" | "stopped" | "missing";
  base: string | null;
  provider: ProviderName | null;
  contextLength?: number | null;
}

export type EndpointEvent =
  | { kind: "replica_started"; leaseId: string; coldStartMs: number | null }
  | { kind: "replica_lost"; leaseId: string; everRan: boolean; provider: ProviderName | null }
  | { kind: "replica_stopped"; leaseId: string; reason: string }
  | { kind: "breaker_open"; failedStarts: number };

/**
 * Folds what the ledger says about each replica's lease into the loop: a lease that runs makes
 * its replica routable (a cold start ends there); one that ended while the endpoint still wanted
 * it is lost (and a failed start when it never ran); one the endpoint stopped is dropped when stopped.
 */
export function observe(
  loop: EndpointLoop,
  seen: ReadonlyMap<string, LeaseSeen>,
  now: number,
  idleMs: number,
): { loop: EndpointLoop; events: EndpointEvent[] } {
  const events: EndpointEvent[] = [];
  let failedStarts = loop.failedStarts;
  let breakerOpenedAt = loop.breakerOpenedAt;
  // Its window over, the breaker is half-open: a rental is tried again, and one more failed start
  // (not the count that opened it) opens it again.
  if (breakerOpenedAt !== null && !breakerOpen(loop, now)) {
    breakerOpenedAt = null;
    failedStarts = Math.min(failedStarts, BREAKER_FAILURES - 1);
  }
  let replace = loop.replace;
  let waitingSince = loop.waitingSince;
  const coldStarts = [...loop.coldStarts];
  const avoid = new Set(loop.avoidProviders);
  const replicas: Replica[] = [];
  for (const replica of loop.replicas) {
    const lease = replica.leaseId ? seen.get(replica.leaseId) : undefined;
    if (!replica.leaseId || !lease) {
      replicas.push(replica);
      continue;
    }
    const ended = lease.status === "stopping" || lease.status === "stopped" || lease.status === "missing";
    if (replica.phase === "stopping") {
      if (lease.status !== "stopped" && lease.status !== "missing") replicas.push(replica);
      continue;
    }
    if (ended) {
      const everRan = replica.runningAt !== null;
      if (!everRan) failedStarts += 1;
      // In use (or starting for a request) when lost: another takes its place; a quiet one is not missed.
      const activeAt = replica.lastRequestAt ?? replica.runningAt ?? replica.rentedAt;
      if (replica.phase !== "draining" && now - activeAt < idleMs) replace += 1;
      if (replica.provider ?? lease.provider) avoid.add((replica.provider ?? lease.provider) as string);
      events.push({ kind: "replica_lost", leaseId: replica.leaseId, everRan, provider: lease.provider });
      // A draining replica that ended on its own was going anyway; its requests are done for.
      continue;
    }
    if (lease.status === "running" && replica.phase === "starting" && lease.base) {
      failedStarts = 0;
      const coldStartMs = waitingSince === null ? null : Math.max(0, now - waitingSince);
      if (coldStartMs !== null) {
        coldStarts.push({ at: now, durationMs: coldStartMs });
        waitingSince = null;
      }
      events.push({ kind: "replica_started", leaseId: replica.leaseId, coldStartMs });
      replicas.push({
        ...replica,
        phase: "running",
        runningAt: now,
        base: lease.base,
        provider: lease.provider,
        contextLength: lease.contextLength ?? null,
      });
      continue;
    }
    replicas.push(replica);
  }
  if (failedStarts >= BREAKER_FAILURES && breakerOpenedAt === null) {
    breakerOpenedAt = now;
    events.push({ kind: "breaker_open", failedStarts });
  }
  return {
    loop: {
      ...loop,
      replicas,
      failedStarts,
      replace,
      breakerOpenedAt,
      waitingSince,
      coldStarts: coldStarts.slice(-COLD_STARTS_KEPT),
      avoidProviders: [...avoid].slice(-8),
    },
    events,
  };
}

/** What the endpoint's object does next: rent, drain, stop; `nextAt` the next look. */
export interface Plan {
  rent: number;
  /** running replicas that take no new request from now on */
  drain: string[];
  /** replicas to stop now (drained and quiet, or the budget's) */
  stop: { leaseId: string; reason: "idle" | "budget" | "deleted" }[];
}

/**
 * One look at the endpoint: how many replicas it wants (min_replicas; one while a request waits;
 * one more while the running ones are over the target for OVERLOAD_WINDOW_MS; never above
 * max_replicas, nothing while the budget is spent or the breaker is open), which running
 * replicas have been idle for idle_minutes (drained first, never below min_replicas), and
 * which drained ones have no request left and are stopped.
 */
export function plan(loop: EndpointLoop, policy: EndpointPolicy, now: number): Plan {
  const stop: Plan["stop"] = [];
  if (policy.budgetExhausted) {
    for (const r of loop.replicas)
      if (r.leaseId && r.phase !== "stopping") stop.push({ leaseId: r.leaseId, reason: "budget" });
    return { rent: 0, drain: [], stop };
  }
  const serving = live(loop.replicas);
  const idleMs = policy.idleMinutes * 60_000;
  // Idle running replicas, the longest idle first; the endpoint keeps min_replicas (and one if a request waits).
  const keep = Math.max(policy.minReplicas, loop.waitingSince !== null ? 1 : 0);
  const idle = serving
    .filter(
      (r) =>
        r.phase === "running" && r.inFlight === 0 && now - (r.lastRequestAt ?? r.runningAt ?? r.rentedAt) >= idleMs,
    )
    .sort((a, b) => (a.lastRequestAt ?? a.runningAt ?? 0) - (b.lastRequestAt ?? b.runningAt ?? 0));
  const drain: string[] = [];
  let remaining = serving.length;
  for (const r of idle) {
    if (remaining <= keep || !r.leaseId) break;
    drain.push(r.leaseId);
    remaining -= 1;
  }
  for (const r of loop.replicas) {
    if (r.leaseId && (r.phase === "draining" || drain.includes(r.leaseId)) && r.inFlight === 0)
      stop.push({ leaseId: r.leaseId, reason: "idle" });
  }
  if (breakerOpen(loop, now)) return { rent: 0, drain, stop };
  const overloaded = loop.overloadSince !== null && now - loop.overloadSince >= OVERLOAD_WINDOW_MS;
  const inRental = serving.some((r) => r.phase === "renting" || r.phase === "starting");
  let want = Math.max(keep, remaining + loop.replace);
  if (overloaded && !inRental) want = Math.max(want, remaining + 1);
  want = Math.min(want, policy.maxReplicas);
  return { rent: Math.max(0, want - remaining), drain, stop };
}

/** When the object should look again: soon while something changes, else at the next idle deadline. */
export function nextLookAt(loop: EndpointLoop, policy: EndpointPolicy, now: number, pollMs: number): number | null {
  const times: number[] = [];
  for (const r of loop.replicas) {
    if (r.phase === "running")
      times.push(Math.max(now + pollMs, (r.lastRequestAt ?? r.runningAt ?? now) + policy.idleMinutes * 60_000));
    else times.push(now + pollMs);
  }
  if (loop.overloadSince !== null) times.push(Math.max(now + 1000, loop.overloadSince + OVERLOAD_WINDOW_MS));
  if (loop.waitingSince !== null) times.push(now + pollMs);
  if (breakerOpen(loop, now) && (policy.minReplicas > 0 || loop.waitingSince !== null))
    times.push((loop.breakerOpenedAt ?? now) + BREAKER_OPEN_MS);
  // A running replica is also watched for loss (its machine vanishing) at the poll interval.
  if (loop.replicas.length > 0) times.push(now + pollMs * 3);
  if (policy.minReplicas > loop.replicas.length && !policy.budgetExhausted) times.push(now + pollMs);
  return times.length ? Math.min(...times) : null;
}

/** The endpoint's state as the API shows it. */
export function stateOf(
  loop: EndpointLoop,
  policy: EndpointPolicy,
  now: number,
): "idle" | "starting" | "serving" | "breaker_open" | "budget_exhausted" {
  if (policy.budgetExhausted) return "budget_exhausted";
  if (loop.replicas.some((r) => r.phase === "running")) return "serving";
  if (breakerOpen(loop, now)) return "breaker_open";
  if (loop.replicas.some((r) => r.phase === "renting" || r.phase === "starting")) return "starting";
  return "idle";
}

/** The providers to try for a new replica, in order: those not lost lately first. */
export function providerOrder(configured: readonly string[] | null, avoid: readonly string[]): (string | undefined)[] {
  if (!configured || configured.length === 0) return [undefined];
  const fresh = configured.filter((p) => !avoid.includes(p));
  const stale = configured.filter((p) => avoid.includes(p));
  return [...fresh, ...stale];
}
