import { describe, expect, it } from "vitest";
import {
  BREAKER_FAILURES,
  BREAKER_OPEN_MS,
  type EndpointLoop,
  type EndpointPolicy,
  initialLoop,
  type LeaseSeen,
  nextLookAt,
  OVERLOAD_WINDOW_MS,
  observe,
  pickReplica,
  plan,
  providerOrder,
  type Replica,
  stateOf,
  trackOverload,
} from "../../src/endpoints/decide";

const T0 = Date.parse("2031-03-01T12:00:00Z");
const MIN = 60_000;
const policy = (extra: Partial<EndpointPolicy> = {}): EndpointPolicy => ({
  minReplicas: 0,
  maxReplicas: 2,
  idleMinutes: 15,
  targetInFlight: 4,
  budgetExhausted: false,
  ...extra,
});
const replica = (leaseId: string, extra: Partial<Replica> = {}): Replica => ({
  rentKey: `k-${leaseId}`,
  leaseId,
  phase: "running",
  inFlight: 0,
  lastRequestAt: T0,
  rentedAt: T0 - 10 * MIN,
  runningAt: T0 - 9 * MIN,
  base: `http://${leaseId}`,
  provider: "sim",
  ...extra,
});
const loopWith = (replicas: Replica[], extra: Partial<EndpointLoop> = {}): EndpointLoop => ({
  ...initialLoop(),
  replicas,
  ...extra,
});
const seen = (entries: Record<string, LeaseSeen["status"]>) =>
  new Map(
    Object.entries(entries).map(([id, status]) => [id, { status, base: `http://${id}`, provider: "sim" as const }]),
  );

describe("pickReplica", () => {
  it("routes to the running replica with the fewest requests in flight, never to a draining or starting one", () => {
    const replicas = [
      replica("a", { inFlight: 3 }),
      replica("b", { inFlight: 1 }),
      replica("c", { inFlight: 0, phase: "draining" }),
      replica("d", { inFlight: 0, phase: "starting", base: null }),
    ];
    expect(pickReplica(replicas)?.leaseId).toBe("b");
    expect(pickReplica([replica("c", { phase: "draining" })])).toBeNull();
  });

  it("among equals, takes the one unused longest", () => {
    const replicas = [replica("a", { lastRequestAt: T0 }), replica("b", { lastRequestAt: T0 - MIN })];
    expect(pickReplica(replicas)?.leaseId).toBe("b");
  });
});

describe("plan", () => {
  it("rents one replica when a request waits and none is there, none at min_replicas 0 without one", () => {
    expect(plan(loopWith([]), policy(), T0).rent).toBe(0);
    expect(plan(loopWith([], { waitingSince: T0 }), policy(), T0).rent).toBe(1);
    // ... and not a second while the first is starting.
    const starting = replica("a", { phase: "starting", runningAt: null, base: null });
    expect(plan(loopWith([starting], { waitingSince: T0 }), policy(), T0).rent).toBe(0);
  });

  it("keeps min_replicas rented", () => {
    expect(plan(loopWith([]), policy({ minReplicas: 2 }), T0).rent).toBe(2);
  });

  it("scales up only after the overload lasted its window, and never above max_replicas", () => {
    const busy = loopWith([replica("a", { inFlight: 9 })]);
    const tracked = trackOverload(busy, 4, T0);
    expect(tracked.overloadSince).toBe(T0);
    expect(plan(tracked, policy(), T0 + OVERLOAD_WINDOW_MS - 1).rent).toBe(0);
    expect(plan(tracked, policy(), T0 + OVERLOAD_WINDOW_MS).rent).toBe(1);
    const full = trackOverload(loopWith([replica("a", { inFlight: 9 }), replica("b", { inFlight: 9 })]), 4, T0);
    expect(plan(full, policy(), T0 + 10 * OVERLOAD_WINDOW_MS).rent).toBe(0);
    // Load back under the target ends the overload.
    expect(trackOverload({ ...tracked, replicas: [replica("a", { inFlight: 4 })] }, 4, T0).overloadSince).toBeNull();
  });

  it("drains and stops a replica idle for idle_minutes, never one with requests in flight, never below min_replicas", () => {
    const idle = replica("a", { lastRequestAt: T0 - 15 * MIN });
    const streaming = replica("b", { lastRequestAt: T0 - 20 * MIN, inFlight: 1 });
    const decided = plan(loopWith([idle, streaming]), policy(), T0);
    expect(decided.drain).toEqual(["a"]);
    expect(decided.stop).toEqual([{ leaseId: "a", reason: "idle" }]);
    expect(plan(loopWith([idle]), policy(), T0 - 1).stop).toEqual([]);
    expect(plan(loopWith([replica("a", { lastRequestAt: T0 - 14 * MIN })]), policy(), T0).stop).toEqual([]);
    expect(plan(loopWith([idle]), policy({ minReplicas: 1 }), T0).stop).toEqual([]);
  });

  it("a draining replica is stopped once its last request ended", () => {
    const draining = replica("a", { phase: "draining", inFlight: 1 });
    expect(plan(loopWith([draining]), policy(), T0).stop).toEqual([]);
    expect(plan(loopWith([{ ...draining, inFlight: 0 }]), policy(), T0).stop).toEqual([
      { leaseId: "a", reason: "idle" },
    ]);
  });

  it("a spent budget stops every replica and rents nothing", () => {
    const decided = plan(
      loopWith([replica("a", { inFlight: 2 })], { waitingSince: T0 }),
      policy({ budgetExhausted: true }),
      T0,
    );
    expect(decided).toEqual({ rent: 0, drain: [], stop: [{ leaseId: "a", reason: "budget" }] });
  });
});

describe("observe", () => {
  it("a replica whose lease runs becomes routable; the waiting request's cold start is recorded", () => {
    const starting = replica("a", { phase: "starting", runningAt: null, base: null, rentedAt: T0 });
    const { loop, events } = observe(
      loopWith([starting], { waitingSince: T0 }),
      seen({ a: "running" }),
      T0 + 90_000,
      15 * MIN,
    );
    expect(loop.replicas[0]).toMatchObject({ phase: "running", base: "http://a", runningAt: T0 + 90_000 });
    expect(loop.waitingSince).toBeNull();
    expect(loop.coldStarts).toEqual([{ at: T0 + 90_000, durationMs: 90_000 }]);
    expect(events).toEqual([{ kind: "replica_started", leaseId: "a", coldStartMs: 90_000 }]);
  });

  it("a replica in use whose lease ended is lost and replaced; a quiet one is not replaced", () => {
    const { loop, events } = observe(loopWith([replica("a")]), seen({ a: "stopping" }), T0 + MIN, 15 * MIN);
    expect(loop.replicas).toEqual([]);
    expect(loop.replace).toBe(1);
    expect(loop.avoidProviders).toEqual(["sim"]);
    expect(events).toEqual([{ kind: "replica_lost", leaseId: "a", everRan: true, provider: "sim" }]);
    expect(plan(loop, policy(), T0 + MIN).rent).toBe(1);
    const quiet = observe(loopWith([replica("a")]), seen({ a: "stopped" }), T0 + 20 * MIN, 15 * MIN);
    expect(quiet.loop.replace).toBe(0);
  });

  it("a replica the endpoint stopped is dropped once stopped, and is no loss", () => {
    const stopping = replica("a", { phase: "stopping" });
    expect(observe(loopWith([stopping]), seen({ a: "stopping" }), T0, 15 * MIN).loop.replicas).toHaveLength(1);
    const done = observe(loopWith([stopping]), seen({ a: "stopped" }), T0, 15 * MIN);
    expect(done.loop.replicas).toEqual([]);
    expect(done.events).toEqual([]);
    expect(done.loop.replace).toBe(0);
  });

  it(`opens the breaker after ${BREAKER_FAILURES} failed starts in a row; it closes after its time`, () => {
    let loop = loopWith([], { waitingSince: T0 });
    const allEvents: string[] = [];
    for (let i = 0; i < BREAKER_FAILURES; i++) {
      const starting = replica(`r${i}`, { phase: "starting", runningAt: null, base: null, rentedAt: T0 });
      const result = observe({ ...loop, replicas: [starting] }, seen({ [`r${i}`]: "stopped" }), T0 + i, 15 * MIN);
      loop = result.loop;
      allEvents.push(...result.events.map((e) => e.kind));
    }
    expect(loop.failedStarts).toBe(BREAKER_FAILURES);
    expect(allEvents.filter((k) => k === "breaker_open")).toHaveLength(1);
    expect(stateOf(loop, policy(), T0 + 5)).toBe("breaker_open");
    expect(plan(loop, policy(), T0 + 5).rent).toBe(0);
    expect(plan(loop, policy(), T0 + BREAKER_OPEN_MS + 5).rent).toBeGreaterThan(0);
    // Every look observes before it plans: past the window the breaker stays closed for a rental
    // to be tried (half-open), and one more failed start opens it again.
    const after = T0 + BREAKER_OPEN_MS + 5;
    const halfOpen = observe(loop, new Map(), after, 15 * MIN);
    expect(halfOpen.events).toEqual([]);
    expect(stateOf(halfOpen.loop, policy(), after)).not.toBe("breaker_open");
    expect(plan(halfOpen.loop, policy(), after).rent).toBeGreaterThan(0);
    const trial = replica("trial", { phase: "starting", runningAt: null, base: null, rentedAt: after });
    const failedAgain = observe(
      { ...halfOpen.loop, replicas: [trial] },
      seen({ trial: "stopped" }),
      after + 1,
      15 * MIN,
    );
    expect(failedAgain.events.map((e) => e.kind)).toContain("breaker_open");
    expect(stateOf(failedAgain.loop, policy(), after + 2)).toBe("breaker_open");
    // A start that succeeds resets the count.
    const ok = replica("ok", { phase: "starting", runningAt: null, base: null });
    expect(observe({ ...loop, replicas: [ok] }, seen({ ok: "running" }), T0 + 6, 15 * MIN).loop.failedStarts).toBe(0);
  });
});

describe("nextLookAt and stateOf", () => {
  it("looks at the idle deadline of a quiet replica, and nothing when there is nothing to do", () => {
    const p = policy({ idleMinutes: 5 });
    expect(nextLookAt(loopWith([]), p, T0, 10_000)).toBeNull();
    const quiet = loopWith([replica("a", { lastRequestAt: T0 })]);
    expect(nextLookAt(quiet, p, T0 + 1000, 10_000)).toBeLessThanOrEqual(T0 + 5 * MIN);
    expect(stateOf(quiet, p, T0)).toBe("serving");
    expect(stateOf(loopWith([]), p, T0)).toBe("idle");
    expect(stateOf(quiet, { ...p, budgetExhausted: true }, T0)).toBe("budget_exhausted");
  });

  it("tries the providers not lost lately first", () => {
    expect(providerOrder(["runpod", "vast"], ["runpod"])).toEqual(["vast", "runpod"]);
    expect(providerOrder(null, ["runpod"])).toEqual([undefined]);
  });
});
