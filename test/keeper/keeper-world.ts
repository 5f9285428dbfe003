import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect } from "vitest";
import type { LeaseKeeper } from "../../src/keeper/keeper";
import type { FoundMachine } from "../../src/leases/create-records";
import { iso } from "../../src/lib/time";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { CrashFake, CrashSwitch, crashDb } from "../money-safety/crash";
import { apiDirect } from "../robustness/direct";
import { TestClock } from "../robustness/drive";
import { fireNext, keeperOf } from "../support/keeper";

/**
 * One lease's world for keeper scenarios driven through its RPC and alarms: the RunPod and Vast
 * fakes behind a CrashSwitch (every provider request an await it can number or fail), a test
 * clock, and the keeper's own D1 wrapped the same way while a switch is active.
 */
export const clock = new TestClock();
export const world: { runpod: RunpodFake; vast: VastFake; installed: InstalledFakes | null } = {
  runpod: new RunpodFake(),
  vast: new VastFake(),
  installed: null,
};
let current: CrashSwitch | null = null;

export const RUNPOD_BODY = {
  provider: "runpod",
  gpu: "4090",
  template: "custom",
  image: "ghcr.io/you/batch:1",
  max_minutes: 30,
};

/** A clean world: new fakes (machines linger `lingerMs` after an honoured terminate), no leases. */
export async function freshWorld({ lingerMs = 5_000 }: { lingerMs?: number } = {}): Promise<void> {
  clock.install();
  clock.advance(3_600_000);
  world.installed?.restore();
  world.runpod = new RunpodFake({ quirks: { bootMs: 30_000, lingerMs } });
  world.vast = new VastFake({ bootMs: 30_000, lingerMs });
  world.installed = installFakes(
    new CrashFake(() => current, world.runpod, "runpod"),
    new CrashFake(() => current, world.vast, "vast"),
  );
  await env.DB.batch([
    env.DB.prepare("DELETE FROM lease_billing"),
    env.DB.prepare("DELETE FROM leases"),
    env.DB.prepare("DELETE FROM lease_creates"),
    env.DB.prepare("DELETE FROM lease_events"),
    env.DB.prepare("DELETE FROM lease_usage"),
    env.DB.prepare("DELETE FROM reaper_runs"),
  ]);
}

export async function leaseStatus(leaseId: string): Promise<string | undefined> {
  const row = await env.DB.prepare("SELECT status FROM leases WHERE id = ?").bind(leaseId).first<{ status: string }>();
  return row?.status;
}

/** A lease rented from the RunPod fake and driven to `running`. */
export async function runningLease(body: Record<string, unknown> = {}): Promise<{ id: string; label: string }> {
  const res = await apiDirect("/v1/leases", { method: "POST", json: { ...RUNPOD_BODY, ...body } });
  expect(res.status, await res.clone().text()).toBe(202);
  const { id } = (await res.json()) as { id: string };
  for (let i = 0; i < 40 && (await leaseStatus(id)) !== "running"; i++) await fireNext(clock, id);
  expect(await leaseStatus(id)).toBe("running");
  const row = await env.DB.prepare("SELECT label FROM leases WHERE id = ?").bind(id).first<{ label: string }>();
  return { id, label: row?.label ?? "" };
}

/** A running lease, stopped: its teardown is under way. */
export async function stoppingLease(): Promise<{ id: string; label: string }> {
  const lease = await runningLease();
  expect((await apiDirect(`/v1/leases/${lease.id}/stop`, { method: "POST" })).status).toBeLessThan(300);
  return lease;
}

/** A pod of `label` planted at the RunPod fake, as the reaper's claim would name it (billed for 10 minutes). */
export function lateRunpodPod(label: string, ignoreTerminates = 0): FoundMachine {
  const ref = world.runpod.plantPod({ name: label, ignoreTerminates });
  return {
    provider: "runpod",
    ref,
    price_per_hour: 0.69,
    billed_from: iso(clock.now - 10 * 60_000),
    detail: "found by the reaper",
    currency: "USD",
  };
}

/**
 * Runs `body` inside the lease's keeper with its env changed by `envOf` (a key removed) and, when
 * `sw` is given, its D1 and the fakes' requests behind `sw`.
 */
export async function insideKeeper<T>(
  leaseId: string,
  sw: CrashSwitch | null,
  body: (keeper: LeaseKeeper, state: DurableObjectState) => Promise<T>,
  envOf: (real: Env) => Env = (real) => real,
): Promise<T> {
  return runInDurableObject(keeperOf(leaseId), async (keeper: LeaseKeeper, state) => {
    const holder = keeper as unknown as { env: Env };
    const real = holder.env;
    const changed = envOf(real);
    holder.env = sw ? { ...changed, DB: crashDb(sw, real.DB) } : changed;
    current = sw;
    if (sw) sw.active = true;
    try {
      return await body(keeper, state);
    } finally {
      if (sw) sw.active = false;
      current = null;
      holder.env = real;
    }
  });
}

/** Fires the lease's next alarm inside insideKeeper; false when none is set. A throw is the alarm's failure. */
export async function fireWith(
  leaseId: string,
  sw: CrashSwitch | null,
  envOf?: (real: Env) => Env,
): Promise<{ fired: boolean; error: unknown }> {
  return insideKeeper(
    leaseId,
    sw,
    async (keeper, state) => {
      const at = await state.storage.getAlarm();
      if (at === null) return { fired: false, error: null };
      if (at > clock.now) clock.set(at);
      await state.storage.deleteAlarm();
      try {
        await keeper.alarm();
        return { fired: true, error: null };
      } catch (error) {
        // The platform retries a failed alarm: soon, as it would.
        await state.storage.setAlarm(clock.now + 2_000);
        return { fired: true, error };
      }
    },
    envOf,
  );
}

export const isWrite = (label: string) => /^d1 (batch|INSERT|UPDATE|DELETE)/.test(label);

/** Fails the nth D1 write made while active (reads pass). */
export class FailNthWrite extends CrashSwitch {
  private writes = 0;
  constructor(private readonly nth: number) {
    super({ at: 0, mode: "fail" }, async () => undefined);
  }
  override async hook<T>(label: string, op: () => Promise<T>): Promise<T> {
    if (!this.active || !isWrite(label)) return op();
    this.writes += 1;
    this.seen.push(label);
    if (this.writes !== this.nth) return op();
    this.reached = true;
    throw new Error(`injected failure at ${label}`);
  }
}

/** Counts the provider requests made while active. */
export class CountCalls extends CrashSwitch {
  calls = 0;
  constructor() {
    super({ at: 0, mode: "fail" }, async () => undefined);
  }
  override async hook<T>(label: string, op: () => Promise<T>): Promise<T> {
    if (this.active && label.startsWith("fetch ")) this.calls += 1;
    return op();
  }
}
