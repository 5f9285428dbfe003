import { env } from "cloudflare:workers";
import { beforeEach, describe, expect, it } from "vitest";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import type { KeeperPort } from "../../src/keeper/client";
import type { Lease } from "../../src/leases/schema";
import { createServices } from "../../src/services";
import { simCloud } from "../../src/sim/cloud";
import { ADMIN_TOKEN } from "../helpers";
import { TestClock } from "../support/clock";
import { driveTo, ledgerLease } from "../support/keeper";
import { simBody } from "../support/lease";

/*
 * The rent path and the routes reach the lease keepers only through the `keepers` port on
 * Services: these tests put a recording (and, where asked, failing) port in front of the real one.
 */

const clock = new TestClock(Date.parse("2031-04-01T00:00:00Z"));

type Call = { method: keyof KeeperPort; leaseId: string; args: unknown[] };

function recordingPort(fail: Partial<Record<keyof KeeperPort, true>> = {}) {
  const calls: Call[] = [];
  const real = createServices(env, loadConfig(env)).keepers;
  const port = Object.fromEntries(
    (Object.keys(real) as (keyof KeeperPort)[]).map((method) => [
      method,
      async (leaseId: string, ...args: unknown[]) => {
        calls.push({ method, leaseId, args });
        if (fail[method]) throw new Error(`keeper ${method} unreachable (test)`);
        return (real[method] as (...a: unknown[]) => Promise<unknown>)(leaseId, ...args);
      },
    ]),
  ) as unknown as KeeperPort;
  return { calls, port };
}

function appWith(port: KeeperPort) {
  const app = createApp({ services: (e) => ({ ...createServices(e, loadConfig(e)), keepers: port }) });
  return (path: string, init: RequestInit & { json?: unknown } = {}) =>
    app.request(
      path,
      {
        ...init,
        headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, "Content-Type": "application/json" },
        body: init.json === undefined ? init.body : JSON.stringify(init.json),
      },
      env,
    );
}

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  await simCloud(env.SIM_CLOUD).reset();
});

describe("the keepers port", () => {
  it("a rental starts the lease's keeper before any create, then hands it the outcome to settle", async () => {
    const { calls, port } = recordingPort();
    const res = await appWith(port)("/v1/leases", { method: "POST", json: simBody({ gpu_count: 1 }) });
    expect(res.status).toBe(202);
    const lease = (await res.json()) as Lease;
    expect(calls.map((c) => [c.method, c.leaseId])).toEqual([
      ["start", lease.id],
      ["settle", lease.id],
    ]);
    // The keeper wrote the machine (the one writer of the row): the answer is its settled row.
    expect(lease.provider_ref).toBeTruthy();
    expect(lease.creates).toEqual([
      expect.objectContaining({ provider: "sim", resolution: "machine", provider_ref: lease.provider_ref }),
    ]);
  });

  it("a stop through the API is a call to the keeper", async () => {
    const { calls, port } = recordingPort();
    const call = appWith(port);
    const lease = (await (
      await call("/v1/leases", { method: "POST", json: simBody({ gpu_count: 1 }) })
    ).json()) as Lease;
    expect((await call(`/v1/leases/${lease.id}/stop`, { method: "POST" })).status).toBe(200);
    expect(calls.at(-1)).toEqual({ method: "stop", leaseId: lease.id, args: ["requested", expect.any(String)] });
    expect((await ledgerLease(lease.id)).status).toBe("stopping");
  });

  it("a keeper that cannot be started: nothing is rented, and no lease row or event is left", async () => {
    const { port } = recordingPort({ start: true });
    const count = async (table: "leases" | "lease_events") =>
      (await env.DB.prepare(`SELECT COUNT(*) AS n FROM ${table}`).first<{ n: number }>())?.n;
    const before = { leases: await count("leases"), events: await count("lease_events") };
    const res = await appWith(port)("/v1/leases", { method: "POST", json: simBody({ gpu_count: 1 }) });
    expect(res.status).toBe(502);
    expect(((await res.json()) as { code: string }).code).toBe("provider_error");
    expect((await simCloud(env.SIM_CLOUD).describe()).machines).toEqual([]);
    expect({ leases: await count("leases"), events: await count("lease_events") }).toEqual(before);
  });

  it("a keeper that cannot be reached to settle: the answer still names the lease, and its next alarm settles the machine", async () => {
    const { port } = recordingPort({ settle: true });
    const res = await appWith(port)("/v1/leases", { method: "POST", json: simBody({ gpu_count: 1, max_minutes: 5 }) });
    expect(res.status).toBe(202);
    const answered = (await res.json()) as Lease;
    // Not settled yet: the machine is only on the create's record.
    expect(answered.provider_ref).toBeNull();
    expect(answered.creates).toEqual([expect.objectContaining({ resolution: "machine" })]);
    const machine = answered.creates[0]?.provider_ref;
    // The keeper's alarm was armed before the create was sent; it settles and runs the lease.
    const running = await driveTo(answered.id, "running", { clock });
    expect(running.provider_ref).toBe(machine);
    const stopped = await driveTo(answered.id, "stopped", { clock, maxAlarms: 400 });
    expect(stopped.teardown_verified_at).not.toBeNull();
    expect((await simCloud(env.SIM_CLOUD).describe()).machines.map((m) => m.ref)).not.toContain(machine);
  });
});
