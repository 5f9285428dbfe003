import { describe, expect, it } from "vitest";
import type { CreateRecord } from "../../src/leases/create-records";
import type { LeaseRow } from "../../src/leases/ledger";
import { type WorstCaseBilling, worstCaseMinutes } from "../../src/leases/pricing";
import { RentRefusal } from "../../src/leases/refusal";
import {
  attemptsOf,
  planRental,
  type RentalFacts,
  type RentEnd,
  rentalConcluded,
  settleRental,
} from "../../src/leases/rental";
import { rankOffer } from "../../src/offers/rank";
import type { ProviderName } from "../../src/providers/types";
import { createRecord, machineCreate, noneCreate } from "../support/create-record";
import { leaseRow } from "../support/lease-row";
import { providerOffer } from "../support/provider-fixtures";

const T0 = Date.parse("2031-03-01T00:00:00Z");
const at = (seconds: number) => T0 + seconds * 1000;
const iso = (seconds: number) => new Date(at(seconds)).toISOString();

const EUR_USD = 1.08;
const RENT_WINDOW_MS = 120_000;
const settle = { startTimeoutMin: 20, eurUsd: EUR_USD };

/** A ranked offer of `provider` at `price` an hour (EUR at VRAMfarm). */
const offer = (id: string, price: number, provider: ProviderName = "runpod") =>
  rankOffer(
    providerOffer({
      offer_id: id,
      provider,
      price_per_hour: price,
      currency: provider === "vramfarm" ? "EUR" : "USD",
      min_billed_minutes: provider === "vramfarm" ? 15 : 0,
    }),
    { weightsGb: 0, eurUsd: EUR_USD },
  );

const accepted: WorstCaseBilling = { startsAt: "accepted", minimumMinutes: 0, startTimeoutMin: 20 };
/** VRAMfarm's billing: from running, 15 minutes at least. */
const fromRunning: WorstCaseBilling = { startsAt: "running", minimumMinutes: 15, startTimeoutMin: 20 };

const facts = (over: Partial<RentalFacts> = {}): RentalFacts => ({
  candidates: [],
  billing: (o) => (o.provider === "vramfarm" ? fromRunning : accepted),
  caps: { max_minutes: 60 },
  spend: null,
  budget: { daily: null, monthly: null },
  maxAttempts: 3,
  ...over,
});

const spent = (today: number, month = today) => ({ committedToday: today, committedMonth: month });
const idsOf = (plan: ReturnType<typeof planRental>) => (plan.ok ? plan.offers.map((o) => o.offer.offer_id) : null);

describe("planRental", () => {
  it("drops the offers whose worst case would cross the budget, keeps the rest in order", () => {
    // 60 minutes + 20 of boot at the accepted rental: 3 USD/h → 4, 1.2 → 1.6, 0.6 → 0.8 USD.
    const plan = planRental(
      facts({
        candidates: [offer("runpod:a", 1.2), offer("runpod:pricey", 3), offer("runpod:c", 0.6)],
        spend: spent(8),
        budget: { daily: 10, monthly: null },
      }),
    );
    expect(plan).toMatchObject({ ok: true, reservationUsd: 1.6 });
    expect(plan.ok && plan.offers.map((o) => [o.offer.offer_id, o.worstCaseUsd])).toEqual([
      ["runpod:a", 1.6],
      ["runpod:c", 0.8],
    ]);
  });

  it("reaching the budget exactly is allowed; crossing it is not", () => {
    // 1.5 USD/h for 80 minutes is 2 USD: 8 + 2 = the budget of 10.
    const exact = planRental(
      facts({ candidates: [offer("runpod:a", 1.5)], spend: spent(8), budget: { daily: 10, monthly: null } }),
    );
    expect(idsOf(exact)).toEqual(["runpod:a"]);
    const over = planRental(
      facts({ candidates: [offer("runpod:a", 1.5)], spend: spent(8.01), budget: { daily: 10, monthly: null } }),
    );
    expect(over.ok).toBe(false);
  });

  it("refuses with a value when every offer is over: budget_exceeded, naming the period and the amounts", () => {
    const daily = planRental(
      facts({
        candidates: [offer("runpod:a", 1.2), offer("runpod:b", 3)],
        spend: spent(8),
        budget: { daily: 9, monthly: null },
      }),
    );
    expect(daily.ok).toBe(false);
    if (daily.ok) return;
    expect(daily.refusal).toBeInstanceOf(RentRefusal);
    expect(daily.refusal.code).toBe("budget_exceeded");
    // The first offer's figures: the one the request would have rented.
    expect(daily.refusal.message).toBe(
      "this rental may cost up to 1.6 USD, which would take today's committed spend to 9.6 USD, over the daily budget of 9 USD",
    );
    const monthly = planRental(
      facts({
        candidates: [offer("runpod:a", 1.2)],
        spend: spent(0, 99.5),
        budget: { daily: 50, monthly: 100 },
      }),
    );
    expect(!monthly.ok && monthly.refusal.message).toBe(
      "this rental may cost up to 1.6 USD, which would take this month's committed spend to 101.1 USD, over the monthly budget of 100 USD",
    );
  });

  it("reserves the largest worst case of the offers kept, wherever it is in the order", () => {
    const plan = planRental(
      facts({
        candidates: [offer("runpod:c", 0.6), offer("runpod:a", 1.2), offer("runpod:d", 0.9)],
        spend: spent(1),
        budget: { daily: 100, monthly: 1000 },
      }),
    );
    expect(plan).toMatchObject({ ok: true, reservationUsd: 1.6 });
    expect(idsOf(plan)).toEqual(["runpod:c", "runpod:a", "runpod:d"]);
  });

  it("without a budget keeps every offer, however dear", () => {
    const candidates = [offer("runpod:a", 30), offer("runpod:b", 1)];
    const noSpend = planRental(facts({ candidates, spend: null, budget: { daily: 1, monthly: 1 } }));
    expect(noSpend).toMatchObject({ ok: true, reservationUsd: 40 });
    expect(idsOf(noSpend)).toEqual(["runpod:a", "runpod:b"]);
    const noLimits = planRental(facts({ candidates, spend: spent(1000) }));
    expect(idsOf(noLimits)).toEqual(["runpod:a", "runpod:b"]);
  });

  it("tries at most maxAttempts offers, the best first", () => {
    const candidates = ["a", "b", "c", "d", "e"].map((id) => offer(`runpod:${id}`, 1));
    expect(idsOf(planRental(facts({ candidates, maxAttempts: 3 })))).toEqual(["runpod:a", "runpod:b", "runpod:c"]);
    expect(idsOf(planRental(facts({ candidates, maxAttempts: 1 })))).toEqual(["runpod:a"]);
  });

  it("bills the worst case from the accepted rental (boot included) or from running (its minimum), within max_cost", () => {
    expect(worstCaseMinutes(accepted, 90)).toBe(110);
    expect(worstCaseMinutes(fromRunning, 90)).toBe(90);
    expect(worstCaseMinutes(fromRunning, 10)).toBe(15);
    const worst = (max_minutes: number, max_cost?: number) => {
      const plan = planRental(
        facts({
          candidates: [offer("vramfarm:x", 0.5, "vramfarm"), offer("runpod:a", 1.2)],
          caps: { max_minutes, max_cost },
        }),
      );
      return plan.ok ? { each: plan.offers.map((o) => o.worstCaseUsd), reservation: plan.reservationUsd } : null;
    };
    // VRAMfarm 0.5 EUR = 0.54 USD/h from running; RunPod 1.2 USD/h from the accepted rental.
    expect(worst(90)).toEqual({ each: [0.81, 2.2], reservation: 2.2 }); // 0.54 × 90/60; 1.2 × 110/60
    expect(worst(10)).toEqual({ each: [0.135, 0.6], reservation: 0.6 }); // 0.54 × 15/60; 1.2 × 30/60
    expect(worst(90, 0.5)).toEqual({ each: [0.5, 0.5], reservation: 0.5 });
    expect(worst(90, 1)).toEqual({ each: [0.81, 1], reservation: 1 });
  });
});

/** A lease written by the rent path, no machine yet. */
const renting = (over: Partial<LeaseRow> = {}): LeaseRow =>
  leaseRow({
    status: "provisioning",
    provider: null,
    provider_ref: null,
    price_per_hour: null,
    currency: null,
    gpu_count: null,
    vram_gb: null,
    expected_cost: 1.6,
    created_at: iso(0),
    ...over,
  });

const answered = (error: string | null = null): RentEnd => ({ kind: "answered", error });
const NOTHING = { patch: {}, events: [], teardownNow: false };
const farmOffer = {
  gpu: "RTX 4090",
  price_per_hour: 0.5,
  currency: "EUR" as const,
  min_billed_minutes: 15,
  billing_starts_at: "running" as const,
};

describe("settleRental", () => {
  it("a provisioning lease takes the machine its create made, at the provider's price", () => {
    const lease = renting();
    const creates = [
      noneCreate("no_capacity: no RTX 4090 left", { seq: 1, provider: "vast", offer_id: "vast:1" }),
      machineCreate("pod2", {
        seq: 2,
        sent_at: iso(5),
        billed_from: iso(6),
        resolved_at: iso(8),
        price_per_hour: 0.74,
      }),
    ];
    const settled = settleRental(lease, creates, answered(), at(10), settle);
    expect(settled).toEqual({
      patch: {
        provider: "runpod",
        provider_ref: "pod2",
        offer_id: "runpod:SECURE:RTX 4090:1",
        gpu: "RTX 4090",
        gpu_count: 1,
        vram_gb: 24,
        price_per_hour: 0.74,
        currency: "USD",
        spec: { ...lease.spec, min_billed_minutes: 0 },
        // The reservation at the provider's 0.74, not the listed 0.69: 0.74 × (20 + 60) / 60.
        expected_cost: 0.986667,
        billing_starts_at: "accepted",
        rented_at: iso(6),
        attempts: JSON.stringify([{ offer_id: "vast:1", error: "no_capacity: no RTX 4090 left" }]),
      },
      events: [{ kind: "rented", detail: "runpod:SECURE:RTX 4090:1 as pod2" }],
      teardownNow: false,
    });
  });

  it("takes the latest machine that is not gone", () => {
    const two = [machineCreate("pod1", { seq: 1 }), machineCreate("pod2", { seq: 2, sent_at: iso(5) })];
    expect(settleRental(renting(), two, answered(), at(10), settle).patch.provider_ref).toBe("pod2");
    const latestGone = [
      machineCreate("pod1", { seq: 1 }),
      machineCreate("v7", { seq: 2, provider: "vast", offer_id: "vast:7", gone_at: iso(9) }),
      noneCreate("rejected", { seq: 3 }),
    ];
    expect(settleRental(renting(), latestGone, answered(), at(10), settle).patch.provider_ref).toBe("pod1");
  });

  it("without a price from the provider, reserves at the listed one; rented_at falls back to the answer", () => {
    const settled = settleRental(
      renting(),
      [machineCreate("pod1", { billed_from: null, resolved_at: iso(9) })],
      answered(),
      at(10),
      settle,
    );
    // 0.69 × 80/60; one create: no attempts.
    expect(settled.patch).toMatchObject({
      price_per_hour: 0.69,
      expected_cost: 0.92,
      rented_at: iso(9),
      attempts: null,
    });
  });

  it("takes the offer's facts: VRAMfarm bills from running, 15 minutes at least, in EUR", () => {
    const lease = renting();
    const settled = settleRental(
      lease,
      [
        machineCreate("srv1", {
          provider: "vramfarm",
          offer_id: "vramfarm:4090",
          offer: farmOffer,
          price_per_hour: 0.55,
        }),
      ],
      answered(),
      at(10),
      settle,
    );
    expect(settled.patch).toMatchObject({
      provider: "vramfarm",
      currency: "EUR",
      price_per_hour: 0.55,
      billing_starts_at: "running",
      spec: { ...lease.spec, min_billed_minutes: 15 },
      // 0.55 EUR = 0.594 USD an hour, for max(60, 15) minutes.
      expected_cost: 0.594,
    });
    expect(settled.events.map((e) => e.kind)).toEqual(["rented"]);
  });

  it("a stopping lease adopts a machine found for it, billed from its creation, and tears it down at once", () => {
    const lease = renting({ status: "stopping", stop_reason: "requested", stop_requested_at: iso(30) });
    const settled = settleRental(
      lease,
      [
        machineCreate("srv9", {
          provider: "vramfarm",
          offer_id: "vramfarm:4090",
          offer: farmOffer,
          price_per_hour: 0.5,
          billed_from: iso(4),
        }),
      ],
      answered(),
      at(40),
      settle,
    );
    expect(settled.patch).toMatchObject({
      provider: "vramfarm",
      provider_ref: "srv9",
      // It never gets a running_at: billed from the accepted rental whatever the offer said.
      billing_starts_at: "accepted",
      rented_at: iso(4),
      // 0.54 USD/h × (20 + 60) minutes.
      expected_cost: 0.72,
    });
    expect(settled.patch.status).toBeUndefined();
    expect(settled.events).toEqual([{ kind: "machine_found", detail: "found srv9 at vramfarm" }]);
    expect(settled.teardownNow).toBe(true);
  });

  it("an answered rent whose every create made nothing is stopped and verified, with its attempts", () => {
    const creates = [
      noneCreate("no_capacity: none left", { seq: 1, offer_id: "runpod:a" }),
      noneCreate("rejected: HTTP 400", { seq: 2, provider: "vast", offer_id: "vast:2" }),
    ];
    expect(settleRental(renting(), creates, answered(), at(12), settle)).toEqual({
      patch: {
        status: "stopped",
        stop_reason: "rent_failed",
        stop_requested_at: iso(12),
        error: "no offer could be rented",
        stopped_at: iso(12),
        teardown_verified_at: iso(12),
        inference_key_sealed: null,
        attempts: JSON.stringify([
          { offer_id: "runpod:a", error: "no_capacity: none left" },
          { offer_id: "vast:2", error: "rejected: HTTP 400" },
        ]),
      },
      events: [
        {
          kind: "stopped",
          detail: "rent_failed: no offer could be rented; every create was answered, none made a machine",
          reason: "rent_failed",
        },
      ],
      teardownNow: false,
    });
  });

  it("with a create unresolved, the lease is stopping: its keeper looks for the machine", () => {
    const error = "the rental's outcome is unknown: HTTP 502; the label lookup failed: HTTP 500";
    const creates = [
      noneCreate("no_capacity: none left", { seq: 1, offer_id: "runpod:a" }),
      createRecord({ seq: 2, offer_id: "runpod:b", detail: "ambiguous: HTTP 502" }),
    ];
    expect(settleRental(renting(), creates, answered(error), at(12), settle)).toEqual({
      patch: {
        status: "stopping",
        stop_reason: "rent_failed",
        stop_requested_at: iso(12),
        error,
        attempts: JSON.stringify([
          { offer_id: "runpod:a", error: "no_capacity: none left" },
          { offer_id: "runpod:b", error: "unresolved: ambiguous: HTTP 502" },
        ]),
      },
      events: [
        {
          kind: "stop_requested",
          detail: `rent_failed: ${error}; 1 create(s) unresolved: the keeper looks for their machines`,
          reason: "rent_failed",
        },
      ],
      teardownNow: false,
    });
  });

  it("is never stopped while any create is unresolved, wherever it is and however the rent ended", () => {
    const ends: RentEnd[] = [answered(), answered("no offer could be rented"), { kind: "timed_out" }];
    for (const count of [1, 2, 3]) {
      for (let open = 0; open < count; open++) {
        const creates = Array.from({ length: count }, (_, i) =>
          i === open ? createRecord({ seq: i + 1 }) : noneCreate("no capacity", { seq: i + 1 }),
        );
        for (const end of ends) {
          const settled = settleRental(renting(), creates, end, at(200), settle);
          expect(settled.patch.status, `${count} creates, #${open + 1} unresolved, ${end.kind}`).toBe("stopping");
          expect(settled.patch.teardown_verified_at).toBeUndefined();
        }
      }
    }
  });

  it("while the request is still renting, nothing changes", () => {
    const creates = [noneCreate("no capacity"), createRecord({ seq: 2 })];
    expect(settleRental(renting(), creates, { kind: "renting" }, at(10), settle)).toEqual(NOTHING);
    expect(settleRental(renting(), [noneCreate("no capacity")], { kind: "renting" }, at(10), settle)).toEqual(NOTHING);
  });

  it("a rent that died with a machine on record: recorded, and torn down because the rental did not complete", () => {
    const settled = settleRental(
      renting(),
      [machineCreate("srv3", { provider: "vramfarm", offer_id: "vramfarm:4090", offer: farmOffer })],
      { kind: "timed_out" },
      at(130),
      settle,
    );
    expect(settled.patch).toMatchObject({
      provider: "vramfarm",
      provider_ref: "srv3",
      billing_starts_at: "accepted",
      status: "stopping",
      stop_reason: "rent_failed",
      stop_requested_at: iso(130),
      error: "the rental did not complete",
    });
    expect(settled.events).toEqual([
      { kind: "machine_found", detail: "found srv3 at vramfarm" },
      {
        kind: "stop_requested",
        detail: "rent_failed: the rental did not complete; tearing its machine down",
        reason: "rent_failed",
      },
    ]);
    expect(settled.teardownNow).toBe(true);
  });

  it("a rent that died with nothing on record goes to stopping, not stopped (rentalConcluded ends it)", () => {
    const settled = settleRental(renting(), [noneCreate("no capacity")], { kind: "timed_out" }, at(130), settle);
    expect(settled.patch).toMatchObject({ status: "stopping", error: "the rental did not complete" });
    expect(settled.patch.stopped_at).toBeUndefined();
  });

  it("a lease that already has its machine, or is stopped, is left alone", () => {
    const creates = [machineCreate("pod1"), machineCreate("pod2", { seq: 2 })];
    const rented = leaseRow({ status: "running", provider: "runpod", provider_ref: "pod1" });
    expect(settleRental(rented, creates, answered(), at(10), settle)).toEqual(NOTHING);
    const stopping = leaseRow({ status: "stopping", provider: "runpod", provider_ref: "pod1" });
    expect(settleRental(stopping, creates, { kind: "timed_out" }, at(10), settle)).toEqual(NOTHING);
    expect(settleRental(renting({ status: "stopped" }), creates, answered(), at(10), settle)).toEqual(NOTHING);
  });

  // The request answered that nothing was rented ("the lease is being torn down"), yet a machine
  // of one of its creates is on record by then (the reaper handed a labelled machine to the
  // keeper while the request was still trying offers): it is recorded and torn down, as the
  // caller was told, never run behind a refusal (a retrying caller would pay twice).
  it("a request that answered 'not rented' while a create's machine is on record: the machine is torn down", () => {
    const error = "the rental's outcome is unknown: HTTP 502; the label lookup failed: HTTP 500";
    const creates = [
      machineCreate("pod1", { seq: 1, detail: "found by the keeper's lookup" }),
      createRecord({ seq: 2, provider: "vast", offer_id: "vast:2", detail: "ambiguous: HTTP 502" }),
    ];
    const settled = settleRental(renting(), creates, answered(error), at(60), settle);
    expect(settled.patch.provider_ref).toBe("pod1");
    expect(settled.patch).toMatchObject({ status: "stopping", stop_reason: "rent_failed", error });
    expect(settled.teardownNow).toBe(true);
  });
});

describe("rentalConcluded", () => {
  const stopping = renting({ status: "stopping", stop_reason: "rent_failed", stop_requested_at: iso(10) });

  it("not while a create is unresolved", () => {
    const creates = [noneCreate("no capacity"), createRecord({ seq: 2 })];
    expect(rentalConcluded(stopping, creates, at(600), RENT_WINDOW_MS)).toBe(false);
    const resolved = [noneCreate("no capacity"), noneCreate("no machine carries this lease's label", { seq: 2 })];
    expect(rentalConcluded(stopping, resolved, at(600), RENT_WINDOW_MS)).toBe(true);
  });

  it("not before the rent window since the lease was written (a request may still be renting)", () => {
    const resolved = [noneCreate("no capacity")];
    expect(rentalConcluded(stopping, resolved, at(119), RENT_WINDOW_MS)).toBe(false);
    expect(rentalConcluded(stopping, resolved, at(120), RENT_WINDOW_MS)).toBe(true);
    expect(rentalConcluded(stopping, [], at(120), RENT_WINDOW_MS)).toBe(true);
  });

  it("not for a lease with a machine (its teardown decides, other machines open or not), nor one still provisioning", () => {
    const withMachine = { ...stopping, provider: "runpod" as const, provider_ref: "pod1" };
    const openStray = [machineCreate("pod1"), machineCreate("pod2", { seq: 2 })];
    expect(rentalConcluded(withMachine, openStray, at(600), RENT_WINDOW_MS)).toBe(false);
    const goneStray = [machineCreate("pod1"), machineCreate("pod2", { seq: 2, gone_at: iso(300) })];
    expect(rentalConcluded(withMachine, goneStray, at(600), RENT_WINDOW_MS)).toBe(false);
    expect(rentalConcluded(renting(), [noneCreate("no capacity")], at(600), RENT_WINDOW_MS)).toBe(false);
  });
});

describe("attemptsOf", () => {
  it("lists the rent's creates that made no machine, with why", () => {
    const creates: CreateRecord[] = [
      noneCreate("no_capacity: none left", { seq: 1, offer_id: "runpod:a" }),
      machineCreate("pod2", { seq: 2, offer_id: "runpod:b" }),
      createRecord({ seq: 3, offer_id: "vast:3", provider: "vast", detail: "ambiguous: HTTP 502" }),
      createRecord({ seq: 4, offer_id: "vast:4", provider: "vast" }),
      noneCreate("", { seq: 5, offer_id: "runpod:e", detail: null }),
      machineCreate("pod6", { seq: 6, offer_id: "runpod:found", origin: "found" }),
      noneCreate("found nothing", { seq: 7, offer_id: "runpod:found", origin: "found" }),
    ];
    expect(attemptsOf(creates)).toEqual([
      { offer_id: "runpod:a", error: "no_capacity: none left" },
      { offer_id: "vast:3", error: "unresolved: ambiguous: HTTP 502" },
      { offer_id: "vast:4", error: "unresolved: no answer yet" },
      { offer_id: "runpod:e", error: "no machine" },
    ]);
    expect(attemptsOf([])).toEqual([]);
  });
});
