import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { api } from "../helpers";
import { Faulty } from "../robustness/faulty";
import { clock, driveUntil, fireCron, getLease, useFakeClock } from "../schedules/support";

// Billing reconciliation: the reaper run reads RunPod's own bill per pod (REST /v2/billing/pods),
// stores it per lease and UTC day, shows `billed` on the lease and `billing` in GET /v1/account,
// and records drift above 5 % as an event (docs/providers.md#runpod-billing).

const REAPER = "*/10 * * * *";
const HOUR = 3_600_000;

let runpod: RunpodFake;
let vast: VastFake;
let fakes: InstalledFakes;
let start = Date.parse("2032-02-01T08:00:00Z");

beforeEach(() => {
  start += 7 * 24 * HOUR;
  useFakeClock(start);
  runpod = new RunpodFake();
  vast = new VastFake();
  fakes = installFakes(runpod, vast);
});
afterEach(() => fakes.restore());

async function rentedAndStopped(hours: number, provider = "runpod"): Promise<Lease> {
  const res = await api("/v1/leases", { method: "POST", json: { provider, gpu: "4090", max_minutes: 600 } });
  expect(res.status).toBe(202);
  const lease = (await res.json()) as Lease;
  await driveUntil(lease.id, "running");
  clock.set(clock.now + hours * HOUR);
  expect((await api(`/v1/leases/${lease.id}/stop`, { method: "POST" })).status).toBe(200);
  return driveUntil(lease.id, "stopped");
}

interface BillingRow {
  provider: string;
  day: string;
  ledger: number;
  billed: number | null;
  drift: number | null;
  currency: string;
}

async function account(): Promise<{ billing: BillingRow[] }> {
  const res = await api("/v1/account");
  expect(res.status).toBe(200);
  return res.json();
}

async function events(leaseId: string): Promise<{ kind: string; detail: string | null }[]> {
  return (
    (await (await api(`/v1/leases/${leaseId}/events`)).json()) as { events: { kind: string; detail: string | null }[] }
  ).events;
}

describe("billing reconciliation", () => {
  it("stores what RunPod billed per lease and day, shows it on the lease and in the account, no drift event when it agrees", async () => {
    const stopped = await rentedAndStopped(2);
    expect(stopped.billed).toBeNull();
    clock.set(clock.now + HOUR);
    await fireCron(REAPER, clock.now);

    const lease = await getLease(stopped.id);
    expect(lease.billed).not.toBeNull();
    // The fake bills price × time from creation to terminate, as the ledger does.
    expect(Math.abs(lease.billed! - lease.cost) / lease.cost).toBeLessThan(0.05);
    expect(runpod.calls("billing").map((r) => new URL(r.url).searchParams.get("podId"))).toContain(lease.provider_ref);

    const day = new Date(start).toISOString().slice(0, 10);
    const row = (await account()).billing.find((b) => b.provider === "runpod" && b.day === day);
    expect(row).toMatchObject({ currency: "USD", billed: expect.any(Number), ledger: expect.any(Number) });
    expect(row!.drift).toBeCloseTo(row!.billed! - row!.ledger, 4);
    expect((await events(lease.id)).some((e) => e.kind === "billing_drift")).toBe(false);
  });

  it("drift above 5 % between RunPod's bill and the ledger is an event, once", async () => {
    runpod.quirks.billingFactor = 1.2;
    const stopped = await rentedAndStopped(3);
    clock.set(clock.now + HOUR);
    await fireCron(REAPER, clock.now);
    clock.set(clock.now + 2 * HOUR);
    await fireCron(REAPER, clock.now);
    const drift = (await events(stopped.id)).filter((e) => e.kind === "billing_drift");
    expect(drift).toHaveLength(1);
    expect(drift[0]!.detail).toMatch(/runpod billed .* USD for its machine, the ledger counted .* \(\+(19|20)\.\d %\)/);
  });

  it("a 50 % over-billing is announced once the bill is final, though a partial bill was stored while the lease ran", async () => {
    runpod.quirks.billingFactor = 1.5;
    const res = await api("/v1/leases", {
      method: "POST",
      json: { provider: "runpod", gpu: "4090", max_minutes: 600 },
    });
    const lease = (await res.json()) as Lease;
    await driveUntil(lease.id, "running");
    clock.set(clock.now + HOUR);
    // A reaper run while the lease runs stores its partial bill.
    await fireCron(REAPER, clock.now);
    expect((await getLease(lease.id)).billed).not.toBeNull();
    clock.set(clock.now + 2 * HOUR);
    expect((await api(`/v1/leases/${lease.id}/stop`, { method: "POST" })).status).toBe(200);
    await driveUntil(lease.id, "stopped");
    for (let i = 0; i < 3; i++) {
      clock.set(clock.now + 2 * HOUR);
      await fireCron(REAPER, clock.now);
    }
    const drift = (await events(lease.id)).filter((e) => e.kind === "billing_drift");
    // Failed on the old code: the partial bill "had drifted already", so nothing was announced.
    expect(drift).toHaveLength(1);
    expect(drift[0]!.detail).toMatch(/runpod billed .* USD for its machine, the ledger counted .* \(\+(49|50)\.\d %\)/);
  });

  it("a lease with another machine (a stray) billed exactly: every machine's bill against every machine's cost, no drift", async () => {
    fakes.restore();
    const faulty = new Faulty("runpod", runpod);
    fakes = installFakes(faulty, vast);
    // The community create times out and its pod appears 30 s later; the secure offer rents.
    faulty.inject("rent", { kind: "late", afterMs: 30_000 });
    const res = await api("/v1/leases", {
      method: "POST",
      json: { provider: "runpod", gpu: "4090", template: "custom", image: "ghcr.io/you/batch:1", max_minutes: 600 },
    });
    expect(res.status).toBe(202);
    const lease = (await res.json()) as Lease;
    // The late pod is not seen for a while (listings fail), so it bills longer than the lease's own.
    faulty.inject("listing", { kind: "http", status: 500 }, { times: 90 });
    await driveUntil(lease.id, "running");
    expect((await api(`/v1/leases/${lease.id}/stop`, { method: "POST" })).status).toBe(200);
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.creates.filter((c) => c.resolution === "machine")).toHaveLength(2);
    for (let i = 0; i < 3; i++) {
      clock.set(clock.now + 2 * HOUR);
      await fireCron(REAPER, clock.now);
    }
    const billed = await getLease(lease.id);
    // Failed on the old code: the lease's own pod's bill against a ledger figure with the stray in it.
    expect((await events(lease.id)).filter((e) => e.kind === "billing_drift").map((e) => e.detail)).toEqual([]);
    expect(Math.abs(billed.billed! - billed.cost) / billed.cost).toBeLessThan(0.05);
  });

  it("a billing read that fails leaves the reaper run and the account intact", async () => {
    const stopped = await rentedAndStopped(1);
    runpod.fault("billing", { kind: "status", status: 500 }, 5);
    clock.set(clock.now + HOUR);
    await fireCron(REAPER, clock.now);
    const runs = (await (await api("/v1/reaper/runs?limit=1")).json()) as { runs: unknown[] };
    expect(runs.runs).toHaveLength(1);
    expect((await getLease(stopped.id)).billed).toBeNull();
    expect((await account()).billing.find((b) => b.provider === "runpod")).toMatchObject({ billed: null, drift: null });
  });

  it("providers without a per-machine bill are listed with billed: null", async () => {
    const stopped = await rentedAndStopped(1, "sim");
    clock.set(clock.now + HOUR);
    await fireCron(REAPER, clock.now);
    expect((await getLease(stopped.id)).billed).toBeNull();
    const sim = (await account()).billing.filter((b) => b.provider === "sim");
    expect(sim.length).toBeGreaterThan(0);
    expect(sim.every((b) => b.billed === null && b.drift === null && b.ledger > 0)).toBe(true);
  });

  it("the balance still comes from GraphQL; its failure shows in the account, never fails it", async () => {
    runpod.fault("myself", { kind: "status", status: 500 }, 5);
    const res = await api("/v1/account");
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      providers: { provider: string; balance: number | null; error: string | null }[];
    };
    const entry = body.providers.find((p) => p.provider === "runpod");
    expect(entry?.balance).toBeNull();
    expect(entry?.error).toMatch(/500/);
    expect(runpod.calls("myself").every((r) => r.transport === "graphql")).toBe(true);
  });
});

describe("Vast.ai billing reconciliation", () => {
  const chargeQueries = () =>
    vast.requests
      .filter((r) => r.path === "/api/v0/charges/")
      .map((r) => JSON.parse(new URL(r.url).searchParams.get("select_filters") ?? "null") as Record<string, unknown>);

  it("stores what Vast charged per instance and day (GET /api/v0/charges/), on the lease and in the account", async () => {
    const stopped = await rentedAndStopped(2, "vast");
    expect(stopped.billed).toBeNull();
    clock.set(clock.now + HOUR);
    await fireCron(REAPER, clock.now);

    const lease = await getLease(stopped.id);
    expect(lease.billed).not.toBeNull();
    expect(Math.abs(lease.billed! - lease.cost) / lease.cost).toBeLessThan(0.05);
    // One UTC day per query, instance charges only (vast-cli show invoices-v1 --charges).
    const dayStart = Date.UTC(
      new Date(start).getUTCFullYear(),
      new Date(start).getUTCMonth(),
      new Date(start).getUTCDate(),
    );
    expect(chargeQueries()).toContainEqual({
      day: { gte: dayStart / 1000, lte: dayStart / 1000 + 86_399 },
      type: { in: ["instance"] },
    });

    const day = new Date(start).toISOString().slice(0, 10);
    const row = (await account()).billing.find((b) => b.provider === "vast" && b.day === day);
    expect(row).toMatchObject({ currency: "USD", billed: lease.billed });
    expect(row!.drift).toBeCloseTo(row!.billed! - row!.ledger, 4);
    expect((await events(lease.id)).some((e) => e.kind === "billing_drift")).toBe(false);
  });

  it("drift above 5 % between Vast's charges and the ledger is an event, once", async () => {
    vast.quirks.chargeFactor = 1.2;
    const stopped = await rentedAndStopped(3, "vast");
    clock.set(clock.now + HOUR);
    await fireCron(REAPER, clock.now);
    clock.set(clock.now + 2 * HOUR);
    await fireCron(REAPER, clock.now);
    const drift = (await events(stopped.id)).filter((e) => e.kind === "billing_drift");
    expect(drift).toHaveLength(1);
    expect(drift[0]!.detail).toMatch(/vast billed .* USD for its machine, the ledger counted .* \(\+(19|20)\.\d %\)/);
  });

  it("only this instance's charges count, across pages of other instances", async () => {
    for (let i = 0; i < 120; i++) vast.plant({ label: `someone-else-${i}`, dph: 1 });
    const stopped = await rentedAndStopped(1, "vast");
    clock.set(clock.now + HOUR);
    await fireCron(REAPER, clock.now);
    const lease = await getLease(stopped.id);
    expect(Math.abs(lease.billed! - lease.cost) / lease.cost).toBeLessThan(0.05);
    expect(vast.requests.filter((r) => r.path === "/api/v0/charges/").length).toBeGreaterThan(1);
  });
});
