import { createExecutionContext, createScheduledController, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { vi } from "vitest";
import worker from "../../src/index";
import type { Lease } from "../../src/leases/schema";
import { simCloud } from "../../src/sim/cloud";
import { api } from "../helpers";
import { alarmAt, driveTo, readLease } from "../support/keeper";

/** A controllable clock: the worker, the keepers and the sim all run in this isolate. */
export const clock = {
  now: Date.parse("2031-03-01T00:00:00Z"),
  set(t: number) {
    this.now = t;
    vi.setSystemTime(t);
  },
  advance(seconds: number) {
    this.set(this.now + seconds * 1000);
  },
};

export function useFakeClock(start: number): void {
  vi.useFakeTimers({ toFake: ["Date"] });
  clock.set(start);
}

/** The env with some vars overridden (budget, reaper mode): passed to the handlers directly. */
export function envWith(vars: Partial<Record<keyof Env, string>>): Env {
  return { ...env, ...vars } as Env;
}

/** Fires a cron through the worker's scheduled handler, as Cloudflare would. */
export async function fireCron(
  cron: "* * * * *" | "*/10 * * * *",
  scheduledTime: number,
  withEnv: Env = env,
): Promise<void> {
  const controller = createScheduledController({ scheduledTime: new Date(scheduledTime), cron });
  const ctx = createExecutionContext();
  await worker.scheduled(controller, withEnv, ctx);
  await waitOnExecutionContext(ctx);
}

/** An HTTP request through the worker's fetch handler with an overridden env. */
export async function fetchWith(
  withEnv: Env,
  path: string,
  init: RequestInit & { json?: unknown } = {},
): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set("Authorization", "Bearer test-admin-token-0123456789");
  let body = init.body;
  if (init.json !== undefined) {
    headers.set("Content-Type", "application/json");
    body = JSON.stringify(init.json);
  }
  const ctx = createExecutionContext();
  const res = await worker.fetch(
    new Request(`http://gpulease.test${path}`, { ...init, headers, body }) as Request<
      unknown,
      IncomingRequestCfProperties
    >,
    withEnv,
    ctx,
  );
  await waitOnExecutionContext(ctx);
  return res;
}

export { alarmAt };
export const getLease = readLease;

/** Fires the keeper's alarms until the lease reaches `status`. */
export const driveUntil = (leaseId: string, status: Lease["status"], maxAlarms = 200) =>
  driveTo(leaseId, status, { clock, maxAlarms });

export async function activeLeases(): Promise<Lease[]> {
  const res = await api("/v1/leases?status=active&limit=200");
  return ((await res.json()) as { leases: Lease[] }).leases;
}

/** Stops every active lease and drives each teardown to its verified end. */
export async function drainLeases(): Promise<void> {
  for (const lease of await activeLeases()) {
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await driveUntil(lease.id, "stopped");
  }
}

/** A fresh sim: quick boots, no lingering, plenty of credit. */
export async function resetSim(): Promise<void> {
  const cloud = simCloud(env.SIM_CLOUD);
  await cloud.reset();
  await cloud.configure({ bootSeconds: 5, readySeconds: 0, lingerSeconds: 0, creditUsd: 100_000 });
}

export const sim = () => simCloud(env.SIM_CLOUD);

export async function leasesOfSchedule(scheduleId: string): Promise<Lease[]> {
  const res = await api("/v1/leases?limit=200");
  return ((await res.json()) as { leases: Lease[] }).leases.filter((l) => l.schedule_id === scheduleId);
}

/** A lease body that rents a sim RTX 4090 (0.x USD/h) for `max_minutes`. */
export const simLease = (extra: Record<string, unknown> = {}) => ({
  provider: "sim",
  gpu: "4090",
  gpu_count: 1,
  template: "custom",
  image: "ghcr.io/example/batch:1",
  cmd: "python /app/run.py",
  max_minutes: 60,
  ...extra,
});
