import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { vi } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { apiDirect } from "./direct";

/**
 * One clock for the worker, its Durable Objects and the fakes (they all run in the test
 * isolate): Date is faked and only moved by the test. The start lies far in the future so that
 * workerd never fires a keeper alarm on its own; the test fires them.
 */
export class TestClock {
  now: number;
  constructor(start = Date.parse("2034-01-01T00:00:00Z")) {
    this.now = start;
  }
  install(): void {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(this.now);
  }
  set(t: number): void {
    this.now = t;
    vi.setSystemTime(t);
  }
  advance(ms: number): void {
    this.set(this.now + ms);
  }
}

export const keeperOf = (leaseId: string) => env.LEASE_KEEPER.getByName(leaseId);

/** Every HTTP exchange of a scenario, for the "no 5xx where a 4xx or 2xx was right" check. */
export interface Exchange {
  method: string;
  path: string;
  status: number;
  body: string;
  /** every response header, `name: value` per line */
  headers: string;
}

/** apiDirect() that keeps every exchange. */
export class Recorder {
  readonly exchanges: Exchange[] = [];

  async call(
    path: string,
    init: Parameters<typeof apiDirect>[1] = {},
  ): Promise<{ status: number; body: string; json: unknown }> {
    const res = await apiDirect(path, init);
    const body = await res.text();
    const headers = [...res.headers.entries()].map(([name, value]) => `${name}: ${value}`).join("\n");
    this.exchanges.push({ method: init.method ?? "GET", path, status: res.status, body, headers });
    let parsed: unknown;
    try {
      parsed = JSON.parse(body);
    } catch {
      parsed = undefined;
    }
    return { status: res.status, body, json: parsed };
  }

  async lease(id: string): Promise<Lease> {
    const res = await this.call(`/v1/leases/${id}`);
    if (res.status !== 200) throw new Error(`GET lease ${id}: ${res.status} ${res.body}`);
    return res.json as Lease;
  }
}

/** Fires the keeper's next alarm, moving the clock to it first; false when none is set. */
export async function fireNext(clock: TestClock, leaseId: string): Promise<boolean> {
  const at = await runInDurableObject(keeperOf(leaseId), (_instance, state) => state.storage.getAlarm());
  if (at === null) return false;
  if (at > clock.now) clock.set(at);
  return runDurableObjectAlarm(keeperOf(leaseId));
}

/**
 * Fires alarms until the lease has one of `statuses` or `maxAlarms` ran; returns the lease as
 * last read. Never throws for "not reached": the caller decides what that means.
 */
export async function driveUntil(
  clock: TestClock,
  recorder: Recorder,
  leaseId: string,
  statuses: Lease["status"][],
  maxAlarms = 120,
): Promise<{ lease: Lease; alarms: number; reached: boolean }> {
  let lease = await recorder.lease(leaseId);
  for (let alarms = 0; alarms < maxAlarms; alarms++) {
    if (statuses.includes(lease.status)) return { lease, alarms, reached: true };
    if (!(await fireNext(clock, leaseId))) return { lease, alarms, reached: false };
    lease = await recorder.lease(leaseId);
  }
  return { lease, alarms: maxAlarms, reached: statuses.includes(lease.status) };
}
