import { env } from "cloudflare:workers";
import { afterAll, describe, expect, it } from "vitest";
import type { FoundMachine } from "../../src/leases/create-records";
import { CrashSwitch, driveToEnd } from "../money-safety/crash";
import { type Cell, formatMatrix } from "../robustness/matrix";
import { fireNext, keeperOf } from "../support/keeper";
import {
  clock,
  FailNthWrite,
  fireWith,
  freshWorld,
  insideKeeper,
  isWrite,
  lateRunpodPod,
  leaseStatus,
  stoppingLease,
  world,
} from "./keeper-world";

/*
 * Claims against the keeper's teardown, numbered like the rent path's crash-point matrix
 * (test/money-safety/crash-matrix.ts):
 *   - a claim (the reaper handing the lease a late machine of its label) lands at every await of
 *     the teardown step that ends the lease (numbered by a dry run);
 *   - a D1 write of a claim fails, at every write the claim makes (numbered by a dry run).
 * Each cell then runs the keeper and the reaper to the end, and holds when no machine is alive,
 * the lease is stopped with its teardown verified, and the claimed machine's record says it is
 * gone and billed.
 */

/** Keeper and reaper to the end; the problems left, if any. */
async function endState(leaseId: string, claimedRef: string | null): Promise<string[]> {
  await driveToEnd(clock);
  clock.advance(10 * 60_000);
  const problems: string[] = [];
  for (const m of world.runpod.model.list()) {
    if (world.runpod.model.state(m.id) === "terminating") continue;
    problems.push(`machine alive: ${m.id}`);
  }
  const lease = await env.DB.prepare("SELECT status, teardown_verified_at FROM leases WHERE id = ?")
    .bind(leaseId)
    .first<{ status: string; teardown_verified_at: string | null }>();
  if (lease?.status !== "stopped") problems.push(`lease ended ${lease?.status}`);
  else if (!lease.teardown_verified_at) problems.push("lease stopped unverified");
  if (claimedRef) {
    const create = await env.DB.prepare("SELECT gone_at, cost FROM lease_creates WHERE provider_ref = ?")
      .bind(claimedRef)
      .first<{ gone_at: string | null; cost: number }>();
    if (!create) problems.push("the claimed machine is on no record");
    else {
      if (create.gone_at === null) problems.push("the claimed machine's record is not gone");
      if (!(create.cost > 0)) problems.push("the claimed machine was not billed");
    }
  }
  return problems;
}

/** The awaits of the step that ends the teardown, and how many alarms ran before it. */
interface FinalStep {
  alarmsBefore: number;
  awaits: string[];
}

async function dryFinalStep(): Promise<FinalStep | null> {
  await freshWorld();
  const lease = await stoppingLease();
  for (let alarm = 0; alarm < 200; alarm++) {
    const sw = new CrashSwitch({ at: 0, mode: "fail" }, async () => undefined);
    if (!(await fireWith(lease.id, sw)).fired) return null;
    if ((await leaseStatus(lease.id)) === "stopped") return { alarmsBefore: alarm, awaits: sw.seen };
  }
  return null;
}

async function dryClaimWrites(): Promise<string[]> {
  await freshWorld();
  const lease = await stoppingLease();
  await driveToEnd(clock);
  const sw = new FailNthWrite(0);
  await insideKeeper(lease.id, sw, (keeper) => keeper.claim(lease.id, lateRunpodPod(lease.label)));
  return sw.seen.filter(isWrite);
}

const results = new Map<string, Cell>();
const table = (title: string, rows: string[], key: string) =>
  `\n${title}\n${formatMatrix(rows, [{ provider: "runpod", call: "claim" }], (row) => results.get(`${key}|${row.split(" ")[0]}`) ?? { state: "n/a", note: "" })}`;

describe("a claim at every await of the teardown step that ends the lease", async () => {
  const dry = await dryFinalStep();
  it("dry run: the teardown ends", () => {
    expect(dry).not.toBeNull();
  });
  const awaits = dry?.awaits ?? [];
  afterAll(() => {
    console.log(
      table(
        "Claim points of the final teardown step:",
        awaits.map((label, i) => `${i + 1} ${label}`),
        "step",
      ),
    );
  });
  for (let at = 1; at <= awaits.length; at++) {
    it(`await ${at} (${awaits[at - 1]}) × claim`, async () => {
      await freshWorld();
      const lease = await stoppingLease();
      for (let i = 0; i < (dry?.alarmsBefore ?? 0); i++) await fireNext(clock, lease.id);
      let machine: FoundMachine | null = null;
      // "stop" runs its callback just before the numbered await: here, the reaper's claim.
      const sw = new CrashSwitch({ at, mode: "stop" }, async () => {
        machine = lateRunpodPod(lease.label);
        await keeperOf(lease.id).claim(lease.id, machine);
      });
      await fireWith(lease.id, sw);
      const problems = sw.reached ? [] : [`claim point ${at} never reached (${sw.seen.length} awaits)`];
      problems.push(...(await endState(lease.id, (machine as FoundMachine | null)?.ref ?? null)));
      results.set(`step|${at}`, { state: problems.length ? "not held" : "held", note: problems.join("; ") });
      expect(problems.join("; ")).toBe("");
    }, 60_000);
  }
});

describe("a D1 write failure at every write of a claim of a stopped lease", async () => {
  const writes = await dryClaimWrites();
  it("dry run: a claim writes", () => {
    expect(writes.length).toBeGreaterThan(0);
  });
  afterAll(() => {
    console.log(
      table(
        "D1 write failures of a claim:",
        writes.map((label, i) => `${i + 1} ${label}`),
        "claim",
      ),
    );
  });
  for (let nth = 1; nth <= writes.length; nth++) {
    it(`write ${nth} (${writes[nth - 1]}) × fail`, async () => {
      await freshWorld();
      const lease = await stoppingLease();
      await driveToEnd(clock);
      expect(await leaseStatus(lease.id)).toBe("stopped");
      const machine = lateRunpodPod(lease.label);
      const sw = new FailNthWrite(nth);
      // The reaper logs a failed claim and finds the machine again at its next run.
      await insideKeeper(lease.id, sw, (keeper) => keeper.claim(lease.id, machine)).catch(() => undefined);
      const problems = sw.reached ? [] : [`write ${nth} never reached`];
      problems.push(...(await endState(lease.id, machine.ref)));
      results.set(`claim|${nth}`, { state: problems.length ? "not held" : "held", note: problems.join("; ") });
      expect(problems.join("; ")).toBe("");
    }, 60_000);
  }
});
