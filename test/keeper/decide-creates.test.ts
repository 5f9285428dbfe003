import { describe, expect, it } from "vitest";
import {
  decideStray,
  LOOKUP_RETRY_MS,
  lookupsDue,
  nextCreateWorkAt,
  openStrays,
  straysCostIn,
  strayTerminateDue,
} from "../../src/keeper/decide-creates";
import { type CreateRecord, isStray } from "../../src/leases/create-records";
import type { MachineStatus, ProviderName } from "../../src/providers/types";
import { createRecord, machineCreate, noneCreate } from "../support/create-record";
import { keeperTestSettings } from "../support/keeper-settings";
import { leaseRow } from "../support/lease-row";

const T0 = Date.parse("2031-03-01T00:00:00Z");
const at = (seconds: number) => T0 + seconds * 1000;
const iso = (seconds: number) => new Date(at(seconds)).toISOString();

const settings = keeperTestSettings;

/** A running lease at RunPod on machine m1. */
const lease = leaseRow({ provider: "runpod", provider_ref: "m1", currency: "USD" });
const seqs = (creates: readonly CreateRecord[]) => creates.map((c) => c.seq);

const status = (state: MachineStatus["state"], price: number | null = null): MachineStatus => ({
  state,
  access: null,
  cost: null,
  traffic_cost: null,
  price_per_hour: price,
  error: null,
});
const read = (state: MachineStatus["state"], price: number | null = null) => ({
  ok: true as const,
  status: status(state, price),
});

describe("lookupsDue", () => {
  // RunPod and Vast find a lease's machines by label; VRAMfarm matches each create on its own.
  const labelled = (p: ProviderName) => p !== "vramfarm";
  const creates = [
    createRecord({ seq: 1, provider: "runpod", sent_at: iso(0) }),
    createRecord({ seq: 2, provider: "runpod", sent_at: iso(10) }),
    machineCreate("pod3", { seq: 3, provider: "runpod", sent_at: iso(11) }),
    createRecord({ seq: 4, provider: "vramfarm", sent_at: iso(5) }),
    createRecord({ seq: 5, provider: "vramfarm", sent_at: iso(20) }),
    createRecord({ seq: 6, provider: "vast", sent_at: iso(100) }),
    noneCreate("no capacity", { seq: 7, provider: "vast", sent_at: iso(1) }),
  ];

  it("looks up every unresolved create at once, before its timeout too (a machine found is claimed at once)", () => {
    // Failed on the old code: nothing was looked up before sent_at + 2 min ([] at 119 s).
    expect(seqs(lookupsDue(creates, labelled))).toEqual([1, 4, 5, 6]);
  });

  it("one lookup per labelled provider (the oldest create), every create at one without labels", () => {
    expect(seqs(lookupsDue(creates, labelled))).toEqual([1, 4, 5, 6]);
    // Were every provider unlabelled, each create would be looked up on its own.
    expect(seqs(lookupsDue(creates, () => false))).toEqual([1, 2, 4, 5, 6]);
  });
});

describe("strays", () => {
  const creates = [
    machineCreate("m1", { seq: 1 }),
    machineCreate("m2", { seq: 2 }),
    // The same ref at another provider is another machine.
    machineCreate("m1", { seq: 3, provider: "vast", offer_id: "vast:1" }),
    machineCreate("m4", { seq: 4, gone_at: iso(300) }),
    createRecord({ seq: 5 }),
    noneCreate("no capacity", { seq: 6 }),
  ];

  it("the lease's current machine is not a stray; its other machines are until verified gone", () => {
    expect(creates.map((c) => isStray(lease, c))).toEqual([false, true, true, true, false, false]);
    expect(seqs(openStrays(lease, creates))).toEqual([2, 3]);
  });

  it("a lease without a current machine has no strays (the first machine found becomes its own)", () => {
    const bare = { ...lease, provider: null, provider_ref: null };
    expect(creates.some((c) => isStray(bare, c))).toBe(false);
    expect(openStrays(bare, creates)).toEqual([]);
  });
});

describe("strayTerminateDue", () => {
  const sent = (terminates_sent: number) => machineCreate("m2", { terminates_sent, terminate_sent_at: iso(1000) });

  it("terminates at once, then again after 5 s, 5 s, 10 s, 20 s, capped at RETERMINATE_INTERVAL_S", () => {
    expect(strayTerminateDue(machineCreate("m2"), at(0), settings)).toBe(true);
    const waits: Array<[number, number]> = [
      [1, 5],
      [2, 5],
      [3, 10],
      [4, 20],
      [5, 30],
      [12, 30],
    ];
    for (const [count, wait] of waits) {
      expect(strayTerminateDue(sent(count), at(1000 + wait) - 1, settings), `after ${count}`).toBe(false);
      expect(strayTerminateDue(sent(count), at(1000 + wait), settings), `after ${count}`).toBe(true);
    }
  });
});

describe("decideStray", () => {
  /** Another machine of the lease, 1.2 USD an hour from its creation at 0 s. */
  const stray = (over: Parameters<typeof machineCreate>[1] = {}) =>
    machineCreate("pod9", { seq: 2, price_per_hour: 1.2, billed_from: iso(0), ...over });

  it("records the terminate and bills the machine while it is there", () => {
    const first = decideStray(stray(), { terminate: { ok: true }, status: read("running") }, at(600));
    expect(first.patch).toEqual({ terminate_sent_at: iso(600), terminates_sent: 1, cost: 0.2 }); // 1.2 × 10 min
    expect(first.events).toEqual([{ kind: "terminate_sent", detail: "runpod pod9 (not the lease's machine)" }]);
    const again = decideStray(
      stray({ terminates_sent: 1, terminate_sent_at: iso(600), cost: 0.2 }),
      { terminate: { ok: true }, status: read("running") },
      at(900),
    );
    expect(again.patch).toEqual({ terminate_sent_at: iso(900), terminates_sent: 2, cost: 0.3 });
    expect(again.events).toEqual([]);
  });

  it("gone once: one gone read, billed up to it; gone twice: verified, and billed no further", () => {
    const sentOnce = stray({ terminates_sent: 1, terminate_sent_at: iso(600), cost: 0.2 });
    const once = decideStray(sentOnce, { status: read("gone") }, at(900));
    expect(once.patch).toEqual({ gone_reads: 1, cost: 0.3 });
    expect(once.events).toEqual([]);
    const twice = decideStray({ ...sentOnce, ...once.patch }, { status: read("gone") }, at(901));
    expect(twice.patch).toEqual({ gone_reads: 2, gone_at: iso(901) });
    expect(twice.events).toEqual([
      { kind: "machine_gone", detail: "runpod pod9 (not the lease's machine) is verified gone" },
    ]);
  });

  it("a read that says it runs resets the gone reads and takes the provider's price", () => {
    const goneOnce = stray({ terminates_sent: 1, terminate_sent_at: iso(600), gone_reads: 1, cost: 0.3 });
    const back = decideStray(goneOnce, { status: read("running", 1.5) }, at(1200));
    expect(back.patch).toEqual({ gone_reads: 0, price_per_hour: 1.5, cost: 0.5 }); // 1.5 × 20 min
    // A failed read counts as still there too; a 0 price (a machine stopping) is no price.
    const failed = decideStray(goneOnce, { status: { ok: false, error: "HTTP 502" } }, at(1200));
    expect(failed.patch).toEqual({ gone_reads: 0, cost: 0.4 });
    const zero = decideStray(stray(), { status: read("running", 0) }, at(600));
    expect(zero.patch.price_per_hour).toBeUndefined();
  });

  it("a failed terminate is logged while none was sent, and not once one was", () => {
    const failed = decideStray(
      stray(),
      { terminate: { ok: false, error: "HTTP 500" }, status: read("running") },
      at(60),
    );
    expect(failed.events).toEqual([{ kind: "terminate_failed", detail: "runpod pod9: HTTP 500" }]);
    expect(failed.patch.terminate_sent_at).toBeUndefined();
    expect(failed.patch.terminates_sent).toBeUndefined();
    const later = decideStray(
      stray({ terminates_sent: 1, terminate_sent_at: iso(60), cost: 0.02 }),
      { terminate: { ok: false, error: "HTTP 500" }, status: read("running") },
      at(120),
    );
    expect(later.events).toEqual([]);
    expect(later.patch).toEqual({ cost: 0.04 });
  });

  it("its cost never goes down: a lower price or an earlier figure keeps the recorded cost", () => {
    const billed = stray({ cost: 5 });
    expect(decideStray(billed, { status: read("running") }, at(600)).patch.cost).toBeUndefined();
    const cheaper = decideStray(stray({ cost: 0.3 }), { status: read("running", 0.6) }, at(900));
    // 0.6 × 15 min = 0.15 < 0.3 already on record.
    expect(cheaper.patch).toEqual({ price_per_hour: 0.6 });
  });

  it("honours the minimum billed minutes, from the create's sending when no billing start is known", () => {
    const farm = stray({ billed_from: null, sent_at: iso(30), offer: { min_billed_minutes: 15 } });
    // Gone a minute after it was sent, billed 15 minutes at 1.2 an hour.
    expect(decideStray(farm, { status: read("gone") }, at(90)).patch).toEqual({ gone_reads: 1, cost: 0.3 });
    expect(decideStray(farm, { status: read("running") }, at(30 + 20 * 60)).patch.cost).toBe(0.4);
  });
});

describe("nextCreateWorkAt", () => {
  it("an unresolved create: within a poll interval until its timeout, at the timeout, then at the lookup pace", () => {
    const creates = [machineCreate("m1"), createRecord({ seq: 2, sent_at: iso(0) })];
    expect(nextCreateWorkAt(lease, creates, at(30), settings)).toBe(at(30) + settings.pollIntervalMs);
    expect(nextCreateWorkAt(lease, creates, at(115), settings)).toBe(at(120));
    expect(nextCreateWorkAt(lease, creates, at(200), settings)).toBe(at(200) + LOOKUP_RETRY_MS);
  });

  it("an open stray: a second after its first gone read, else at the verify interval", () => {
    const stray = machineCreate("m2", { seq: 2 });
    expect(nextCreateWorkAt(lease, [machineCreate("m1"), stray], at(500), settings)).toBe(at(505));
    const goneOnce = { ...stray, gone_reads: 1 };
    expect(nextCreateWorkAt(lease, [machineCreate("m1"), goneOnce], at(500), settings)).toBe(at(501));
    // The soonest of them.
    const pending = createRecord({ seq: 3, sent_at: iso(400) });
    expect(nextCreateWorkAt(lease, [machineCreate("m1"), stray, pending], at(500), settings)).toBe(at(505));
    expect(nextCreateWorkAt(lease, [machineCreate("m1"), goneOnce, pending], at(500), settings)).toBe(at(501));
  });

  it("null when nothing is open", () => {
    const done = [
      machineCreate("m1"),
      machineCreate("m2", { seq: 2, gone_at: iso(300) }),
      noneCreate("no capacity", { seq: 3 }),
    ];
    expect(nextCreateWorkAt(lease, done, at(500), settings)).toBeNull();
    expect(nextCreateWorkAt(lease, [], at(500), settings)).toBeNull();
  });
});

describe("straysCostIn", () => {
  const currencyOf = (c: CreateRecord) => c.offer.currency ?? "USD";
  const creates = [
    machineCreate("m1", { seq: 1, cost: 9 }),
    machineCreate("srv2", { seq: 2, provider: "vramfarm", offer: { currency: "EUR" }, cost: 1 }),
    // Verified gone: its billed time stays on the lease.
    machineCreate("pod3", { seq: 3, cost: 0.5, gone_at: iso(100) }),
    createRecord({ seq: 4 }),
  ];

  it("a USD lease: EUR strays converted, the lease's own machine not counted", () => {
    expect(straysCostIn(lease, creates, currencyOf, 1.08)).toBe(1.58); // 1 EUR × 1.08 + 0.5
  });

  it("an EUR lease: USD strays converted back", () => {
    const farmLease = { ...lease, provider: "vramfarm" as const, provider_ref: "srv2", currency: "EUR" as const };
    // (9 + 0.5) USD / 1.08
    expect(straysCostIn(farmLease, creates, currencyOf, 1.08)).toBe(8.796296);
    const oneUsd = [machineCreate("srv2", { provider: "vramfarm" }), machineCreate("pod5", { seq: 2, cost: 1.08 })];
    expect(straysCostIn(farmLease, oneUsd, currencyOf, 1.08)).toBe(1);
  });

  it("nothing without a current machine, or without strays", () => {
    expect(straysCostIn({ ...lease, provider: null, provider_ref: null }, creates, currencyOf, 1.08)).toBe(0);
    expect(straysCostIn(lease, [machineCreate("m1", { cost: 3 })], currencyOf, 1.08)).toBe(0);
  });
});
