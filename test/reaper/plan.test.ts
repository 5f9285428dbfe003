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

const diff = (
  machines: OwnMachine[],
  leases: LeaseRow[],
  createRecords = new Map<string, { leaseId: string; goneAt: string | null }>(),
  provider: "runpod" | "vast" = "runpod",
) =>
  diffListing({
    provider,
    prefix: "gpulease",
    machines,
    leasesById: new Map(leases.map((l) => [l.id, l])),
    leasesByRef: new Map(),
    activeLeases: leases.filter((l) => l.status !== "stopped"),
    createRecords,
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

  it("hands a second machine under a lease's label to that lease's keeper, after the grace period", () => {
    // A late ambiguous create: torn down by the lease's keeper and billed to the lease.
    const actions = diff([machine({}), machine({ ref: "m2" })], [lease({})]).actions;
    expect(actions).toEqual([expect.objectContaining({ kind: "claim", provider_ref: "m2", lease_id: ID })]);
    expect(diff([machine({}), machine({ ref: "m2", created_at: ago(5) })], [lease({})]).actions).toEqual([]);
  });

  it("claims a labelled machine at another provider than the lease's, whatever the lease's status", () => {
    for (const status of ["running", "stopping", "stopped"] as const) {
      const actions = diff(
        [machine({ ref: "v9" })],
        [lease({ status, stopped_at: ago(60) })],
        undefined,
        "vast",
      ).actions;
      expect(actions.filter((a) => a.kind === "claim")).toEqual([
        expect.objectContaining({ provider: "vast", provider_ref: "v9", lease_id: ID }),
      ]);
    }
  });

  it("leaves a machine alone that the lease's create records hold and its keeper is tearing down", () => {
    const held = new Map([["m2", { leaseId: ID, goneAt: null }]]);
    expect(diff([machine({}), machine({ ref: "m2" })], [lease({})], held).actions).toEqual([]);
    // Verified gone once, listed alive again past the grace period: handed over again.
    const gone = new Map([["m2", { leaseId: ID, goneAt: ago(30) }]]);
    expect(diff([machine({}), machine({ ref: "m2" })], [lease({})], gone).actions).toMatchObject([{ kind: "claim" }]);
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
