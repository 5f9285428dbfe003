import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { listCreates } from "../../src/leases/create-records";
import type { Lease } from "../../src/leases/schema";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { defaultVramfarmListings, VramfarmFake } from "../fakes/vramfarm";
import { api } from "../helpers";
import { Faulty } from "../robustness/faulty";
import { TestClock } from "../support/clock";
import { alarmAt, driveTo, fireNext, readLease } from "../support/keeper";
import { batchBody, rent, rentOk } from "../support/lease";

/*
 * The ledger's cost of a machine is the larger of its own time × price and what the provider
 * reports it billed for that machine, plus traffic, from the billing start to verified gone
 * (docs/architecture.md "Cost"). VRAMfarm bills from `running`, with a 15-minute minimum, and
 * reports `cost_eur` and `traffic_eur` per server.
 */

const MIN = 60_000;
const DAY = 24 * 60 * MIN;
const clock = new TestClock();
let vramfarm: VramfarmFake;
let faulty: Faulty;
let installed: InstalledFakes | null = null;

beforeEach(async () => {
  clock.install();
  clock.set(Math.floor(clock.now / DAY) * DAY + DAY + 60 * MIN);
  vramfarm = new VramfarmFake({ bootMs: 30_000 });
  vramfarm.listings = defaultVramfarmListings().filter((l) => l.id === 5101);
  faulty = new Faulty("vramfarm", vramfarm);
  installed = installFakes(faulty);
  await env.DB.batch([
    env.DB.prepare("DELETE FROM lease_billing"),
    env.DB.prepare("DELETE FROM lease_events"),
    env.DB.prepare("DELETE FROM lease_creates"),
    env.DB.prepare("DELETE FROM leases"),
  ]);
});

afterEach(() => {
  installed?.restore();
  installed = null;
});

/** What VRAMfarm billed for a server (its own cost_eur plus traffic_eur), read from the fake. */
function billedEur(id: string): number {
  const m = vramfarm.model.get(id);
  if (!m) throw new Error(`no server ${id}`);
  const server = vramfarm.serverJson(m);
  return server.cost_eur + server.traffic_eur;
}

async function stop(leaseId: string): Promise<void> {
  const res = await api(`/v1/leases/${leaseId}/stop`, { method: "POST" });
  expect(res.status).toBe(200);
}

describe("VRAMfarm's own cost and traffic reach the ledger", () => {
  it("a stop between two polls, after the server came up: the ledger holds VRAMfarm's 15-minute minimum, not 0", async () => {
    const lease = await rentOk(batchBody("vramfarm"));
    const ref = lease.provider_ref!;
    // Up at the fake 30 s after the create; the keeper has not read it running yet.
    clock.advance(35_000);
    vramfarm.setTraffic(ref, 0.25);
    await stop(lease.id);
    const end = await driveTo(lease.id, "stopped", { clock });
    const billed = billedEur(ref);
    expect(billed).toBeGreaterThan(0.25);
    // Failed on the old code: cost 0 (never seen running, so never billed from running).
    expect(end.cost).toBeGreaterThanOrEqual(billed);
  });

  it("status reads failing until the start timeout: the ledger takes VRAMfarm's figure at teardown", async () => {
    const lease = await rentOk(batchBody("vramfarm"));
    const ref = lease.provider_ref!;
    faulty.inject("status", { kind: "http", status: 500 }, { times: 10_000 });
    // Every poll fails until the start timeout stops the lease.
    for (let n = 0; n < 500; n++) {
      const now = await readLease(lease.id);
      if (now.status !== "provisioning") break;
      await fireNext(clock, lease.id);
    }
    expect((await readLease(lease.id)).status).toBe("stopping");
    vramfarm.setTraffic(ref, 0.4);
    // The provider answers again during the teardown.
    installed?.restore();
    installed = installFakes(vramfarm);
    const end = await driveTo(lease.id, "stopped", { clock });
    expect(end.cost).toBeGreaterThanOrEqual(billedEur(ref));
  });

  it("a lost create's server (a stray of its lease) is billed at least what VRAMfarm reports for it, traffic included", async () => {
    vramfarm.listings = defaultVramfarmListings().filter((l) => l.id === 5101 || l.id === 5103);
    faulty.inject("rent", { kind: "late", afterMs: 30_000 });
    const t0 = clock.now;
    const res = await rent(batchBody("vramfarm"));
    const lease = (await res.json()) as Lease;
    expect(res.status).toBe(202);
    const leaseId = lease.id;
    // The late server appears and runs; the lease's keeper finds it and tears it down.
    for (let n = 0; n < 500 && clock.now < t0 + 10 * MIN; n++) {
      const at = await alarmAt(leaseId);
      if (at === null) break;
      await fireNext(clock, leaseId);
      const late = [...vramfarm.model.machines.keys()].find((id) => id !== lease.provider_ref);
      if (late) vramfarm.setTraffic(late, 0.3);
    }
    const creates = await listCreates(env.DB, leaseId);
    const stray = creates.find((c) => c.resolution === "machine" && c.gone_at !== null);
    expect(stray).toBeDefined();
    expect(stray!.cost).toBeGreaterThanOrEqual(billedEur(stray!.provider_ref!));
  });
});
