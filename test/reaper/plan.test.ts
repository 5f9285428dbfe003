import { describe, expect, it } from "vitest";
import type { LeaseRow } from "../../src/leases/ledger";
import { newId } from "../../src/lib/ids";
import type { OwnMachine } from "../../src/providers/types";
import { diffListing, leaseIdFromLabel, overdue } from "../../src/reaper/plan";
import { leaseRow } from "../support/lease-row";

const ID = newId("lse", Date.parse("2031-03-01T11:00:00Z"));
const now = Date.parse("2031-03-01T12:00:00Z");
const ago = (minutes: number) => new Date(now - minutes * 60_000).toISOString();

function machine(over: Partial<OwnMachine>): OwnMachine {
  return { ref: "m1", label: `gpulease-${ID}`, state: "running", created_at: ago(60), price_per_hour: 1, ...over };
}

const lease = (over: Partial<LeaseRow>): LeaseRow =>
  leaseRow({ id: ID, created_at: ago(30), rented_at: ago(30), running_at: ago(29), ...over });

const diff = (machines: OwnMachine[], leases: LeaseRow[]) =>
  diffListing({
    provider: "runpod",
    prefix: "gpulease",
    machines,
    leasesById: new Map(leases.map((l) => [l.id, l])),
    leasesByRef: new Map(),
    activeLeases: leases.filter((l) => l.status !== "stopped"),
    now,
    graceMs: 15 * 60_000,
  });

describe("leaseIdFromLabel", () => {
  it("reads our labels only", () => {
    expect(leaseIdFromLabel(`gpulease-${ID}`, "gpulease")).toBe(ID);
    expect(leaseIdFromLabel(`gpulease-staging-${ID}`, "gpulease")).toBeNull();
    expect(leaseIdFromLabel("my-pod", "gpulease")).toBeNull();
    expect(leaseIdFromLabel(null, "gpulease")).toBeNull();
  });
});

describe("diffListing", () => {
  it("adopts a labelled machine without a lease once it is older than the grace period", () => {
    expect(diff([machine({})], []).actions).toMatchObject([{ kind: "adopt", lease_id: ID, provider_ref: "m1" }]);
    expect(diff([machine({ created_at: ago(5) })], []).actions).toEqual([]);
  });

  it("leaves unlabelled and gone machines alone", () => {
    const result = diff([machine({ label: "mine" }), machine({ ref: "m2", state: "gone" })], []);
    expect(result).toEqual({ actions: [], ignored: 2 });
  });

  it("reopens a stopped lease whose machine is listed, after the grace period", () => {
    expect(diff([machine({})], [lease({ status: "stopped", stopped_at: ago(60) })]).actions).toMatchObject([
      { kind: "reopen" },
    ]);
    expect(diff([machine({})], [lease({ status: "stopped", stopped_at: ago(1) })]).actions).toEqual([]);
  });

  it("adopts a second machine under an active lease's label (a late ambiguous create), after the grace period", () => {
    const actions = diff([machine({}), machine({ ref: "m2" })], [lease({})]).actions;
    expect(actions).toHaveLength(1);
    expect(actions[0]).toMatchObject({ kind: "adopt", provider_ref: "m2", machine: { label: `gpulease-${ID}~m2` } });
    expect(actions[0]?.lease_id).not.toBe(ID);
    expect(diff([machine({}), machine({ ref: "m2", created_at: ago(5) })], [lease({})]).actions).toEqual([]);
  });

  it("hands an active lease whose machine is missing to its keeper, and leaves a listed one alone", () => {
    expect(diff([], [lease({})]).actions).toMatchObject([{ kind: "reconcile", lease_id: ID }]);
    expect(diff([machine({})], [lease({})]).actions).toEqual([]);
    expect(diff([], [lease({ status: "stopping" })]).actions).toEqual([]);
  });
});

describe("overdue", () => {
  const settings = { now, slackMs: 5 * 60_000, startTimeoutMs: 20 * 60_000, spentUsd: () => 0 };
  it("finds leases past their caps", () => {
    expect(overdue(lease({ running_at: ago(70), max_minutes: 60 }), settings)).toMatchObject({ reason: "max_minutes" });
    expect(overdue(lease({ running_at: ago(62), max_minutes: 60 }), settings)).toBeNull();
    expect(overdue(lease({ status: "provisioning", running_at: null, created_at: ago(30) }), settings)).toMatchObject({
      reason: "start_timeout",
    });
    expect(overdue(lease({ max_cost: 1 }), { ...settings, spentUsd: () => 2 })).toMatchObject({ reason: "max_cost" });
    expect(overdue(lease({ status: "stopping", running_at: ago(500) }), settings)).toBeNull();
  });
});
