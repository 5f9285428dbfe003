import { env } from "cloudflare:workers";
import { afterEach, beforeEach } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { type FakeService, type InstalledFakes, installFakes } from "../fakes/install";
import { api as apiDirect } from "../helpers";
import { TestClock } from "../support/clock";
import { driveUntil as driveLease, fireNext } from "../support/keeper";

export { TestClock };

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

export { fireNext };

/**
 * Hooks for a suite of lease scenarios. Before each test: the clock faked and moved an hour on,
 * and no lease left active by the test before (it would count against MAX_ACTIVE_LEASES). After
 * each: the fakes the test installed with `useFakes` are taken down.
 */
export function scenarioPerTest(): { clock: TestClock; useFakes: (...services: FakeService[]) => InstalledFakes } {
  const clock = new TestClock();
  let installed: InstalledFakes | null = null;
  beforeEach(async () => {
    clock.install();
    clock.advance(3_600_000);
    await env.DB.prepare("UPDATE leases SET status = 'stopped' WHERE status != 'stopped'").run();
  });
  afterEach(() => {
    installed?.restore();
    installed = null;
  });
  return {
    clock,
    useFakes: (...services) => {
      installed = installFakes(...services);
      return installed;
    },
  };
}

/**
 * The shared driveUntil (test/support/keeper.ts): the lease is read from the ledger between
 * alarms, and once more through the recorder at the end, so the API's answer is checked too.
 */
export async function driveUntil(
  clock: TestClock,
  recorder: Recorder,
  leaseId: string,
  statuses: Lease["status"][],
  maxAlarms = 120,
): Promise<{ lease: Lease; alarms: number; reached: boolean }> {
  const end = await driveLease(leaseId, statuses, { clock, maxAlarms });
  return { ...end, lease: await recorder.lease(leaseId) };
}
