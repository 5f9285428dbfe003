import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
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

/** Fires the keeper's next alarm, moving the clock to it first; false when none is set. */
export async function fireNext(clock: MovableClock, leaseId: string): Promise<boolean> {
  const at = await alarmAt(leaseId);
  if (at === null) return false;
  if (at > clock.now) clock.set(at);
  return runDurableObjectAlarm(keeperOf(leaseId));
}

/** GET /v1/leases/{id} as the admin. */
export async function readLease(leaseId: string): Promise<Lease> {
  const res = await api(`/v1/leases/${leaseId}`);
  if (res.status !== 200) throw new Error(`GET lease ${leaseId}: ${res.status} ${await res.text()}`);
  return (await res.json()) as Lease;
}

export interface DriveOptions {
  clock: MovableClock;
  /** how the lease is read between alarms (default: GET /v1/leases/{id} through SELF) */
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
  { clock, read = readLease, maxAlarms = 200 }: DriveOptions,
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
