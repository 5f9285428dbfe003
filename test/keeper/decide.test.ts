import { describe, expect, it } from "vitest";
import {
  capReached,
  decideAfterPoll,
  decideTeardown,
  FRESH_MACHINE_GRACE_MS,
  initialLoopState,
  type LoopState,
  loopFor,
  nextPollAt,
  planTeardown,
} from "../../src/keeper/decide";
import type { LeaseRow } from "../../src/leases/ledger";
import { billedFrom, costCapAt, timeCost } from "../../src/leases/pricing";
import type { MachineStatus } from "../../src/providers/types";
import { keeperTestSettings } from "../support/keeper-settings";
import { leaseRow } from "../support/lease-row";

const T0 = Date.parse("2030-05-01T10:00:00Z");
const at = (seconds: number) => T0 + seconds * 1000;
const iso = (seconds: number) => new Date(at(seconds)).toISOString();

const settings = keeperTestSettings;

/** A provisioning Ollama lease at RunPod, rented at 1 ms. */
const lease = (overrides: Partial<LeaseRow> = {}): LeaseRow =>
  leaseRow({
    status: "provisioning",
    provider_ref: "pod1",
    offer_id: "runpod:SECURE:x:1",
    gpu: "RTX 4090",
    price_per_hour: 0.72,
    template: "ollama",
    spec: {
      image: "ollama/ollama",
      cmd: null,
      env: {},
      ports: [11434],
      disk_gb: 40,
      weights_gb: 18,
      context_length: null,
      min_billed_minutes: 0,
      model: null,
      download_s: 0,
    },
    created_at: iso(0),
    rented_at: iso(1),
    ...overrides,
  });

const status = (state: MachineStatus["state"], extra: Partial<MachineStatus> = {}): MachineStatus => ({
  state,
  access: state === "running" ? { urls: ["https://pod1-11434.proxy.runpod.net"], ssh: null } : null,
  cost: null,
  traffic_cost: null,
  price_per_hour: null,
  error: null,
  ...extra,
});

const loop = (overrides: Partial<LoopState> = {}): LoopState => ({ ...initialLoopState, ...overrides });

describe("a model lease coming up", () => {
  const model = {
    name: "qwen2.5:32b",
    digest: "sha256:registry",
    weights_gb: 19.9,
    vram_need_gb: 24.3,
    context_length: 8192,
    loaded_at: null,
  };
  const modelLease = (over: Partial<LeaseRow> = {}) => lease({ spec: { ...lease().spec, model }, ...over });
  const probe = (p: NonNullable<Parameters<typeof decideAfterPoll>[2] & { ok: true }>["probe"]) =>
    ({ ok: true, status: status("running"), probe: p }) as const;

  it("logs pulling in 10 % steps, then loading, and runs once a one-token generation answered", () => {
    const half = decideAfterPoll(
      modelLease(),
      loop(),
      probe({ phase: "pulling", completed: 10e9, total: 19.9e9 }),
      at(60),
      settings,
    );
    expect(half.events).toEqual([{ kind: "pulling", detail: "10.0 of 19.9 GB (50 %)" }]);
    const same = decideAfterPoll(
      modelLease(),
      half.loop,
      probe({ phase: "pulling", completed: 11e9, total: 19.9e9 }),
      at(70),
      settings,
    );
    expect(same.events).toEqual([]);
    const loading = decideAfterPoll(
      modelLease(),
      same.loop,
      probe({ phase: "loading", digest: "sha256:d" }),
      at(80),
      settings,
    );
    expect(loading.events.map((e) => e.kind)).toEqual(["loading"]);
    expect(loading.patch.status).toBeUndefined();
    const ready = decideAfterPoll(
      modelLease(),
      loading.loop,
      probe({ phase: "ready", digest: "sha256:server" }),
      at(90),
      settings,
    );
    expect(ready.patch).toMatchObject({
      status: "running",
      running_at: iso(90),
      spec: { model: { ...model, digest: "sha256:server", loaded_at: iso(90) } },
    });
  });

  it("a failed pull and a model that spills to the CPU end the lease with start_failed and the reason", () => {
    const failed = decideAfterPoll(
      modelLease(),
      loop(),
      probe({ phase: "failed", error: "pull model manifest: file does not exist" }),
      at(60),
      settings,
    );
    expect(failed.patch).toMatchObject({
      status: "stopping",
      stop_reason: "start_failed",
      error: "the model could not be pulled or loaded: pull model manifest: file does not exist",
    });
    expect(failed.teardownNow).toBe(true);
    const spilled = decideAfterPoll(
      modelLease(),
      loop(),
      probe({ phase: "spilled", digest: "sha256:d", size: 26e9, size_vram: 23.5e9 }),
      at(60),
      settings,
    );
    expect(spilled.patch).toMatchObject({
      stop_reason: "start_failed",
      error: "the model does not fit in GPU memory: 23.5 of 26.0 GB on the GPU, the rest on the CPU",
    });
  });

  it("the start timeout grows with the weights' download time", () => {
    const slow = modelLease({ spec: { ...modelLease().spec, download_s: 1200 } });
    expect(capReached(slow, loop(), at(20 * 60), settings)).toBeNull();
    expect(capReached(slow, loop(), at(40 * 60), settings)).toMatchObject({
      reason: "start_timeout",
      error: "the machine did not start within 40 minutes",
    });
    expect(capReached(modelLease(), loop(), at(20 * 60), settings)?.reason).toBe("start_timeout");
  });
});

describe("billing", () => {
  it("RunPod, Vast and the sim bill from the accepted rental; VRAMfarm from running with its minimum", () => {
    expect(billedFrom(lease())).toBe(at(1));
    expect(timeCost(lease(), at(3601))).toBeCloseTo(0.72, 6);
    const farm = lease({
      provider: "vramfarm",
      billing_starts_at: "running",
      currency: "EUR",
      price_per_hour: 0.6,
      spec: { ...lease().spec, min_billed_minutes: 15 },
    });
    expect(billedFrom(farm)).toBeNull();
    expect(timeCost(farm, at(600))).toBe(0);
    const farmRunning = { ...farm, running_at: iso(300) };
    expect(timeCost(farmRunning, at(360))).toBeCloseTo(0.15, 6);
    expect(timeCost(farmRunning, at(300 + 1800))).toBeCloseTo(0.3, 6);
  });

  it("computes the moment the cost cap is reached, in USD, with traffic", () => {
    // 0.72 USD/h, 0.36 USD cap: 30 minutes after the rental.
    expect(costCapAt(lease({ max_cost: 0.36 }), 0, 1.08)).toBe(at(1) + 30 * 60_000);
    // EUR: 0.5 EUR/h = 0.54 USD/h; 0.27 USD - 0.054 USD traffic (0.05 EUR) = 0.216 USD → 24 min.
    const farm = lease({
      provider: "vramfarm",
      billing_starts_at: "running",
      currency: "EUR",
      price_per_hour: 0.5,
      running_at: iso(100),
      max_cost: 0.27,
      spec: { ...lease().spec, min_billed_minutes: 15 },
    });
    expect(costCapAt(farm, 0.05, 1.08)).toBe(at(100) + 24 * 60_000);
    // A cap below the minimum billing period is reached as soon as billing starts.
    expect(costCapAt({ ...farm, max_cost: 0.05 }, 0, 1.08)).toBe(at(100));
    expect(costCapAt(lease(), 0, 1.08)).toBeNull();
  });
});

describe("provisioning", () => {
  it("a new machine no read has shown yet is not gone within the grace; once seen, or after it, it is", () => {
    const gone = { ok: true, status: status("gone"), probe: null } as const;
    const waiting = decideAfterPoll(lease(), loop(), gone, at(20), settings);
    expect(waiting.patch.status).toBeUndefined();
    expect(waiting.teardownNow).toBe(false);
    expect(waiting.loop.goneReads).toBe(0);
    expect(waiting.nextAlarmAt).toBe(at(20) + settings.pollIntervalMs);
    // Seen once: a gone read counts as it always did.
    const shown = decideAfterPoll(
      lease(),
      waiting.loop,
      { ok: true, status: status("booting"), probe: null },
      at(30),
      settings,
    );
    expect(shown.loop.machineSeen).toBe(true);
    expect(decideAfterPoll(lease(), shown.loop, gone, at(40), settings).events.map((e) => e.kind)).toEqual([
      "gone_unconfirmed",
    ]);
    // Never seen, past the grace: gone counts.
    const graceEnd = at(1) + FRESH_MACHINE_GRACE_MS;
    const first = decideAfterPoll(lease(), loop(), gone, graceEnd, settings);
    expect(first.events.map((e) => e.kind)).toEqual(["gone_unconfirmed"]);
    const second = decideAfterPoll(lease(), first.loop, gone, graceEnd + 1, settings);
    expect(second.patch.status).toBe("stopping");
    expect(second.events.map((e) => e.kind)).toEqual(["start_failed"]);
  });

  it("keeps polling while booting and logs the observation once", () => {
    const first = decideAfterPoll(
      lease(),
      loop(),
      { ok: true, status: status("booting"), probe: null },
      at(10),
      settings,
    );
    expect(first.patch.status).toBeUndefined();
    expect(first.events.map((e) => e.kind)).toEqual(["booting"]);
    expect(first.nextAlarmAt).toBe(at(20));
    const second = decideAfterPoll(
      lease(),
      first.loop,
      { ok: true, status: status("booting"), probe: null },
      at(20),
      settings,
    );
    expect(second.events).toEqual([]);
  });

  it("is running only when the container runs and, for Ollama, the server answers", () => {
    const waiting = decideAfterPoll(
      lease(),
      loop(),
      { ok: true, status: status("running"), probe: { phase: "down" } },
      at(60),
      settings,
    );
    expect(waiting.patch.status).toBeUndefined();
    expect(waiting.events.map((e) => e.kind)).toEqual(["waiting_for_ollama"]);
    const up = decideAfterPoll(
      lease(),
      loop(),
      { ok: true, status: status("running"), probe: { phase: "ready", digest: "" } },
      at(70),
      settings,
    );
    expect(up.patch).toMatchObject({
      status: "running",
      running_at: iso(70),
      access: { urls: ["https://pod1-11434.proxy.runpod.net"] },
    });
    // The next look is the 60 s beat.
    expect(up.nextAlarmAt).toBe(at(130));
    const custom = decideAfterPoll(
      lease({ template: "custom" }),
      loop(),
      { ok: true, status: status("running"), probe: null },
      at(70),
      settings,
    );
    expect(custom.patch.status).toBe("running");
  });

  it("tears down a failed start with the provider's reason", () => {
    const failed = decideAfterPoll(
      lease(),
      loop(),
      { ok: true, status: status("exited", { error: "OCI runtime create failed" }), probe: null },
      at(40),
      settings,
    );
    expect(failed.teardownNow).toBe(true);
    expect(failed.patch).toMatchObject({ status: "stopping", stop_requested_at: iso(40) });
    expect(failed.patch.error).toContain("OCI runtime create failed");
  });

  it("a failed status read changes nothing and polls again", () => {
    const d = decideAfterPoll(lease(), loop(), { ok: false, error: "timeout" }, at(40), settings);
    expect(d.patch).toEqual({});
    expect(d.events.map((e) => e.kind)).toEqual(["status_failed"]);
    expect(d.nextAlarmAt).toBe(at(50));
  });

  it("reaches start_timeout START_TIMEOUT_MIN after creation", () => {
    expect(capReached(lease(), loop(), at(20 * 60 - 1), settings)).toBeNull();
    expect(capReached(lease(), loop(), at(20 * 60), settings)?.reason).toBe("start_timeout");
    // The poll never sleeps past the timeout.
    expect(nextPollAt(lease(), loop(), at(20 * 60 - 3), settings)).toBe(at(20 * 60));
  });
});

describe("running", () => {
  const running = lease({ status: "running", running_at: iso(100), max_minutes: 30 });

  it("sleeps until the earliest cap moment, never longer than the beat", () => {
    expect(nextPollAt(running, loop(), at(100 + 29 * 60 + 30), settings)).toBe(at(100 + 30 * 60));
    expect(nextPollAt(running, loop(), at(200), settings)).toBe(at(260));
    const capped = { ...running, max_cost: 0.012 }; // 1 minute at 0.72 USD/h
    expect(nextPollAt(capped, loop(), at(30), settings)).toBe(at(1) + 60_000);
  });

  it("stops at max_minutes and at max_cost", () => {
    expect(capReached(running, loop(), at(100 + 30 * 60), settings)?.reason).toBe("max_minutes");
    expect(capReached({ ...running, max_cost: 0.012 }, loop(), at(61), settings)?.reason).toBe("max_cost");
  });

  it("traffic reported on the beat can reach the cost cap at once", () => {
    const capped = { ...running, max_cost: 1 };
    const d = decideAfterPoll(
      capped,
      loop(),
      { ok: true, status: status("running", { traffic_cost: 0.99 }), probe: null },
      at(200),
      settings,
    );
    expect(d.teardownNow).toBe(true);
    expect(d.patch).toMatchObject({ status: "stopping", stop_reason: "max_cost" });
    expect(d.loop.trafficCost).toBe(0.99);
  });

  it("a machine that died on its own is torn down with why, once a second read confirms it", () => {
    const first = decideAfterPoll(
      running,
      loop(),
      { ok: true, status: status("gone"), probe: null },
      at(300),
      settings,
    );
    expect(first.patch.status).toBeUndefined();
    expect(first.teardownNow).toBe(false);
    expect(first.nextAlarmAt).toBe(at(300) + settings.verifyIntervalMs);
    expect(first.events.map((e) => e.kind)).toEqual(["gone_unconfirmed"]);
    // A flapping status: running again resets the count.
    const back = decideAfterPoll(
      running,
      first.loop,
      { ok: true, status: status("running"), probe: null },
      at(305),
      settings,
    );
    expect(back.loop.goneReads).toBe(0);
    const d = decideAfterPoll(
      running,
      first.loop,
      { ok: true, status: status("gone"), probe: null },
      at(305),
      settings,
    );
    expect(d.patch.status).toBe("stopping");
    expect(d.patch.error).toMatch(/gone on its own/);
  });

  it("keeps the cost monotonic and up to date", () => {
    const d = decideAfterPoll(
      running,
      loop(),
      { ok: true, status: status("running"), probe: null },
      at(3601),
      settings,
    );
    expect(d.patch.cost).toBeCloseTo(0.72, 6);
    const reported = decideAfterPoll(
      running,
      loop(),
      { ok: true, status: status("running", { cost: 5 }), probe: null },
      at(3601),
      settings,
    );
    expect(reported.patch.cost).toBe(5);
  });
});

describe("stopping", () => {
  const stopping = lease({
    status: "stopping",
    running_at: iso(100),
    stop_requested_at: iso(1000),
    stop_reason: "requested",
  });

  it("terminates at once, then re-sends after 5 s, 5 s, then doubling up to RETERMINATE_INTERVAL_S", () => {
    expect(planTeardown(stopping, loop(), at(1000), settings)).toEqual({ terminate: true });
    const sentBefore = (sent: number) => loop({ terminateSentAt: at(1000), terminatesSent: sent });
    expect(planTeardown(stopping, sentBefore(1), at(1004), settings).terminate).toBe(false);
    expect(planTeardown(stopping, sentBefore(1), at(1005), settings).terminate).toBe(true);
    expect(planTeardown(stopping, sentBefore(2), at(1005), settings).terminate).toBe(true);
    expect(planTeardown(stopping, sentBefore(3), at(1009), settings).terminate).toBe(false);
    expect(planTeardown(stopping, sentBefore(3), at(1010), settings).terminate).toBe(true);
    expect(planTeardown(stopping, sentBefore(4), at(1020), settings).terminate).toBe(true);
    // Capped at RETERMINATE_INTERVAL_S (30 s here), however many were ignored.
    expect(planTeardown(stopping, sentBefore(9), at(1029), settings).terminate).toBe(false);
    expect(planTeardown(stopping, sentBefore(9), at(1030), settings).terminate).toBe(true);
  });

  it("is stopped only on a status read that says gone", () => {
    const still = decideTeardown(
      stopping,
      loop(),
      { terminate: { ok: true }, status: { ok: true, status: status("running") } },
      at(1000),
      settings,
    );
    expect(still.patch.status).toBeUndefined();
    expect(still.nextAlarmAt).toBe(at(1005));
    expect(still.loop.terminateSentAt).toBe(at(1000));
    const failedRead = decideTeardown(
      stopping,
      loop(),
      { status: { ok: false, error: "HTTP 502" } },
      at(1005),
      settings,
    );
    expect(failedRead.patch.status).toBeUndefined();
    const unknown = decideTeardown(
      stopping,
      loop(),
      { status: { ok: true, status: status("unknown") } },
      at(1005),
      settings,
    );
    expect(unknown.patch.status).toBeUndefined();
    const noRead = decideTeardown(stopping, loop(), { terminate: { ok: true } }, at(1005), settings);
    expect(noRead.patch.status).toBeUndefined();
    // One "gone" read is not enough (a flapping status); a second read a moment later confirms
    // (a moment, not an interval: the teardown is billed until it verifies).
    const first = decideTeardown(
      stopping,
      loop(),
      { status: { ok: true, status: status("gone") } },
      at(1010),
      settings,
    );
    expect(first.patch.status).toBeUndefined();
    expect(first.nextAlarmAt).toBe(at(1011));
    const flapped = decideTeardown(
      stopping,
      first.loop,
      { status: { ok: true, status: status("running") } },
      at(1011),
      settings,
    );
    expect(flapped.patch.status).toBeUndefined();
    expect(flapped.loop.goneReads).toBe(0);
    const gone = decideTeardown(
      stopping,
      first.loop,
      { status: { ok: true, status: status("gone") } },
      at(1015),
      settings,
    );
    expect(gone.patch).toMatchObject({ status: "stopped", stopped_at: iso(1015), teardown_verified_at: iso(1015) });
    expect(gone.nextAlarmAt).toBeNull();
  });

  it("flags an unverified teardown after 10 minutes, slows down, and clears the flag once verified", () => {
    const late = decideTeardown(
      stopping,
      loop(),
      { status: { ok: false, error: "HTTP 500" } },
      at(1000 + 600),
      settings,
    );
    expect(late.patch.error).toBe("teardown_unverified");
    expect(late.events.map((e) => e.kind)).toContain("teardown_unverified");
    expect(late.nextAlarmAt).toBe(at(1600 + 60));
    const again = decideTeardown(
      { ...stopping, error: "teardown_unverified" },
      late.loop,
      { status: { ok: false, error: "HTTP 500" } },
      at(1700),
      settings,
    );
    expect(again.events.map((e) => e.kind)).not.toContain("teardown_unverified");
    const goneOnce = decideTeardown(
      { ...stopping, error: "teardown_unverified" },
      late.loop,
      { status: { ok: true, status: status("gone") } },
      at(1800),
      settings,
    );
    expect(goneOnce.patch.status).toBeUndefined();
    const gone = decideTeardown(
      { ...stopping, error: "teardown_unverified" },
      goneOnce.loop,
      { status: { ok: true, status: status("gone") } },
      at(1860),
      settings,
    );
    expect(gone.patch).toMatchObject({ status: "stopped", error: null });
  });

  it("a reopened teardown starts afresh: an earlier teardown's gone reads do not count", () => {
    const stored = loop({ goneReads: 2, terminateSentAt: at(1000), teardownOf: iso(1000) });
    const reopened = { ...stopping, stop_requested_at: iso(5000) };
    expect(loopFor(reopened, stored)).toMatchObject({ goneReads: 0, terminateSentAt: null, teardownOf: iso(5000) });
    expect(loopFor(stopping, stored)).toBe(stored);
  });
});

describe("teardown with other creates open", () => {
  const stopping = lease({
    status: "stopping",
    running_at: iso(100),
    stop_requested_at: iso(1000),
    stop_reason: "requested",
  });
  const read = (state: MachineStatus["state"], extra: Partial<MachineStatus> = {}) => ({
    status: { ok: true as const, status: status(state, extra) },
  });

  it("stays stopping while other creates are open, says so once, and is stopped once none is", () => {
    const first = decideTeardown(stopping, loop(), { terminate: { ok: true }, ...read("gone") }, at(1010), settings, 2);
    expect(first.patch).toEqual({});
    expect(first.nextAlarmAt).toBe(at(1011));
    const verified = decideTeardown(stopping, first.loop, read("gone"), at(1011), settings, 2);
    expect(verified.patch.status).toBeUndefined();
    expect(verified.events).toEqual([
      {
        kind: "teardown_waiting",
        detail: "the machine is gone; 2 other create(s) or machine(s) of this lease are still open",
      },
    ]);
    expect(verified.nextAlarmAt).toBe(at(1016));
    expect(verified.loop.machineGoneAt).toBe(at(1011));
    const waiting: LeaseRow = { ...stopping, ...verified.patch } as LeaseRow;
    const next = decideTeardown(waiting, verified.loop, read("gone"), at(1016), settings, 2);
    expect(next.events).toEqual([]);
    // Billed until its machine was verified gone, not until the lease stops.
    expect(next.patch).toEqual({});
    expect(next.nextAlarmAt).toBe(at(1021));
    const done = decideTeardown(waiting, next.loop, read("gone"), at(1021), settings, 0);
    expect(done.patch).toEqual({
      status: "stopped",
      stopped_at: iso(1021),
      teardown_verified_at: iso(1021),
      inference_key_sealed: null,
    });
    expect(done.events.map((e) => e.kind)).toEqual(["stopped"]);
    expect(done.nextAlarmAt).toBeNull();
  });

  it("bills until the verifying read: price × (verification − billing start) + traffic", () => {
    // RunPod bills from the rental (1 s): verified at 1801 s is 30 minutes at 0.72 USD/h.
    const first = decideTeardown(stopping, loop({ trafficCost: 0.05 }), read("gone"), at(1800), settings);
    expect(first.patch.cost).toBeUndefined();
    const verified = decideTeardown(stopping, first.loop, read("gone"), at(1801), settings);
    expect(verified.patch.status).toBe("stopped");
    expect(verified.patch.cost).toBeCloseTo(0.36 + 0.05, 6);
    // VRAMfarm bills from running (100 s): verified at 1900 s is 30 minutes at 0.6 EUR/h.
    const farm = lease({
      status: "stopping",
      provider: "vramfarm",
      billing_starts_at: "running",
      currency: "EUR",
      price_per_hour: 0.6,
      running_at: iso(100),
      stop_requested_at: iso(1000),
      cost: 0.15,
    });
    const farmFirst = decideTeardown(farm, loop(), read("gone"), at(1899), settings);
    const farmVerified = decideTeardown(farm, farmFirst.loop, read("gone"), at(1900), settings);
    expect(farmVerified.patch).toMatchObject({ status: "stopped", teardown_verified_at: iso(1900) });
    expect(farmVerified.patch.cost).toBeCloseTo(0.3, 6);
  });

  it("a machine still there bills on, at the provider's new price when the read reports one", () => {
    const sent = loop({ terminateSentAt: at(1000), terminatesSent: 1 });
    const repriced = decideTeardown(stopping, sent, read("running", { price_per_hour: 0.9 }), at(1501), settings);
    expect(repriced.patch).toEqual({ price_per_hour: 0.9, cost: 0.375 }); // 0.9 × 1500 s
    expect(repriced.patch.status).toBeUndefined();
    const same = decideTeardown(stopping, sent, read("running", { price_per_hour: 0.72 }), at(1501), settings);
    expect(same.patch).toEqual({ cost: 0.3 }); // 0.72 × 1500 s
    // A 0 reported by a machine shutting down is no price.
    const zero = decideTeardown(stopping, sent, read("running", { price_per_hour: 0 }), at(1501), settings);
    expect(zero.patch.price_per_hour).toBeUndefined();
  });

  it("a price the poll reports resets the budget's reservation at that price", () => {
    const running = lease({ status: "running", running_at: iso(100) });
    const poll = (price: number | null) => ({
      ok: true as const,
      status: status("running", { price_per_hour: price }),
      probe: null,
    });
    const d = decideAfterPoll(running, loop(), poll(0.9), at(200), settings);
    // 0.9 USD/h × (20 + 60) minutes, billed from the accepted rental.
    expect(d.patch).toMatchObject({ price_per_hour: 0.9, expected_cost: 1.2 });
    expect(d.patch.cost).toBeCloseTo((0.9 * 199) / 3600, 6);
    expect(d.events[0]).toEqual({
      kind: "price_updated",
      detail: "0.72 → 0.9 USD/h: the provider's own price for this machine",
    });
    expect(decideAfterPoll({ ...running, max_cost: 1 }, loop(), poll(0.9), at(200), settings).patch.expected_cost).toBe(
      1,
    );
    const unchanged = decideAfterPoll(running, loop(), poll(0.72), at(200), settings);
    expect(unchanged.patch.expected_cost).toBeUndefined();
    expect(unchanged.events.map((e) => e.kind)).not.toContain("price_updated");
    // VRAMfarm: 0.6 EUR = 0.648 USD/h, from running, 15 minutes at least for a 10-minute lease.
    const farm = lease({
      status: "running",
      provider: "vramfarm",
      billing_starts_at: "running",
      currency: "EUR",
      price_per_hour: 0.5,
      running_at: iso(100),
      max_minutes: 10,
      spec: { ...lease().spec, min_billed_minutes: 15 },
    });
    expect(decideAfterPoll(farm, loop(), poll(0.6), at(200), settings).patch.expected_cost).toBeCloseTo(0.162, 6);
  });
});
