import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { listCreates } from "../../src/leases/create-records";
import { getLease, toLease } from "../../src/leases/ledger";
import type { Lease } from "../../src/leases/schema";
import { api } from "../helpers";

/** Anything that holds the test's time and can move it (TestClock, the schedules' clock). */
export interface MovableClock {
  readonly now: number;
  set(t: number): void;
}

export const keeperOf = (leaseId: string) => env.LEASE_KEEPER.getByName(leaseId);

/** When the lease's keeper will wake next, or null. */
export async function alarmAt(leaseId: string): Promise<number | null> {
  return runInDurableObject(keeperOf(leaseId), (_instance, state) => state.storage.getAlarm());
}

/**
 * Fires the keeper's next alarm, moving the clock to it first; false when none is set. One call
 * into the object does what runDurableObjectAlarm does (read the alarm, delete it, run alarm())
 * with the clock move in between: suites fire thousands of alarms, and a second round trip per
 * alarm was a tenth of their time.
 */
export async function fireNext(clock: MovableClock, leaseId: string): Promise<boolean> {
  return runInDurableObject(keeperOf(leaseId), async (keeper, state) => {
    const at = await state.storage.getAlarm();
    if (at === null) return false;
    if (at > clock.now) clock.set(at);
    await state.storage.deleteAlarm();
    await keeper.alarm();
    return true;
  });
}

/** GET /v1/leases/{id} as the admin. */
export async function readLease(leaseId: string): Promise<Lease> {
  const res = await api(`/v1/leases/${leaseId}`);
  if (res.status !== 200) throw new Error(`GET lease ${leaseId}: ${res.status} ${await res.text()}`);
  return (await res.json()) as Lease;
}

/**
 * The lease as GET /v1/leases/{id} shows it to the admin, read from the ledger: the drivers read
 * the lease after every alarm, and going through the HTTP stack each time cost more than the
 * alarm itself. The route is proved by its own tests (test/leases/routes.test.ts).
 */
export async function ledgerLease(leaseId: string): Promise<Lease> {
  const row = await getLease(env.DB, leaseId);
  if (!row) throw new Error(`no lease ${leaseId} in the ledger`);
  return toLease(row, await listCreates(env.DB, leaseId));
}

export interface DriveOptions {
  clock: MovableClock;
  /** how the lease is read between alarms (default: from the ledger, as the admin sees it) */
  read?: (leaseId: string) => Promise<Lease>;
  maxAlarms?: number;
}

/**
 * Fires alarms until the lease has one of `statuses` or `maxAlarms` ran; returns the lease as
 * last read. Never throws for "not reached": the caller decides what that means.
 */
export async function driveUntil(
  leaseId: string,
  statuses: Lease["status"][],
  { clock, read = ledgerLease, maxAlarms = 200 }: DriveOptions,
): Promise<{ lease: Lease; alarms: number; reached: boolean }> {
  let lease = await read(leaseId);
  for (let alarms = 0; alarms < maxAlarms; alarms++) {
    if (statuses.includes(lease.status)) return { lease, alarms, reached: true };
    if (!(await fireNext(clock, leaseId))) return { lease, alarms, reached: false };
    lease = await read(leaseId);
  }
  return { lease, alarms: maxAlarms, reached: statuses.includes(lease.status) };
}

/** driveUntil for one status, throwing when the lease does not get there. */
export async function driveTo(leaseId: string, status: Lease["status"], options: DriveOptions): Promise<Lease> {
  const end = await driveUntil(leaseId, [status], options);
  if (!end.reached) {
    throw new Error(`lease ${leaseId} did not reach ${status} (is ${end.lease.status} after ${end.alarms} alarms)`);
  }
  return end.lease;
}
