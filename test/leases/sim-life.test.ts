import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { beforeEach, describe, expect, it } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { simCloud } from "../../src/sim/cloud";
import { api, errorBody } from "../helpers";
import { TestClock } from "../support/clock";
import { alarmAt, driveTo, fireNext as fireNextAlarm, keeperOf as keeper, readLease } from "../support/keeper";
import { rent as rentLease, rentOk as rentLeaseOk, simBody } from "../support/lease";

// The keeper and the sim run in this isolate: faking Date moves both clocks, and each alarm is
// fired at the moment it was set for.
const clock = new TestClock(Date.parse("2031-03-01T00:00:00Z"));
const fireNext = (leaseId: string) => fireNextAlarm(clock, leaseId);
const getLease = readLease;
/** Fires the keeper's alarms until the lease reaches `status` (at most `maxAlarms`). */
const driveUntil = (leaseId: string, status: Lease["status"], maxAlarms = 200) =>
  driveTo(leaseId, status, { clock, maxAlarms });

async function events(leaseId: string): Promise<{ seq: number; kind: string; detail: string | null }[]> {
  const res = await api(`/v1/leases/${leaseId}/events`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { events: { seq: number; kind: string; detail: string | null }[] }).events;
}

const rent = (body: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
  rentLease(simBody({ gpu_count: 1, ...body }), { headers });
const rentOk = (body: Record<string, unknown> = {}) => rentLeaseOk(simBody({ gpu_count: 1, ...body }));

async function simMachine(ref: string) {
  const view = await simCloud(env.SIM_CLOUD).status(ref);
  if (!view.ok) throw new Error(view.error);
  return view.value;
}

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  const cloud = simCloud(env.SIM_CLOUD);
  await cloud.reset();
  await cloud.configure({ bootSeconds: 30, readySeconds: 10, lingerSeconds: 8, creditUsd: 100_000 });
  // Every test starts with no active lease, so MAX_ACTIVE_LEASES never leaks between tests.
  const res = await api("/v1/leases?status=active&limit=200");
  for (const lease of ((await res.json()) as { leases: Lease[] }).leases) {
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await driveUntil(lease.id, "stopped");
  }
});

describe("the life of a sim lease", () => {
  it("rents, comes up, runs, stops on request and verifies the teardown", async () => {
    const lease = await rentOk({ name: "life" });
    expect(lease).toMatchObject({
      status: "provisioning",
      provider: "sim",
      gpu_count: 1,
      currency: "USD",
      template: "ollama",
      label: `gpulease-${lease.id}`,
      max_minutes: 30,
      stop_reason: null,
      teardown_verified_at: null,
    });
    expect(lease.provider_ref).toBeTruthy();
    expect(lease.id).toMatch(/^lse_[0-9a-z]{22}$/);

    // First poll (10 s): booting. At 30 s the container runs but Ollama answers only at 40 s.
    await fireNext(lease.id);
    expect((await getLease(lease.id)).status).toBe("provisioning");
    await fireNext(lease.id);
    await fireNext(lease.id);
    expect((await getLease(lease.id)).status).toBe("provisioning");

    const running = await driveUntil(lease.id, "running");
    expect(running.running_at).not.toBeNull();
    expect(running.access?.urls.length).toBeGreaterThan(0);
    expect(Date.parse(running.running_at!) - Date.parse(lease.created_at)).toBeGreaterThanOrEqual(40_000);

    const stop = await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    expect(stop.status).toBe(200);
    expect(await stop.json()).toEqual({ ok: true });
    const again = await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    expect(await again.json()).toEqual({ ok: true, already: true });
    expect((await getLease(lease.id)).status).toBe("stopping");

    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.stop_reason).toBe("requested");
    expect(stopped.teardown_verified_at).not.toBeNull();
    expect(stopped.cost).toBeGreaterThan(0);
    expect(await simMachine(lease.provider_ref!)).toBeNull();
    // The machine lingered 8 s after terminate: stopped only once the sim says it is gone.
    expect(Date.parse(stopped.teardown_verified_at!) - Date.parse(stopped.stop_requested_at!)).toBeGreaterThanOrEqual(
      8_000,
    );

    const third = await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    expect(await third.json()).toEqual({ ok: true, already: true });
    expect(await alarmAt(lease.id)).toBeNull();

    const kinds = (await events(lease.id)).map((e) => e.kind);
    expect(kinds[0]).toBe("created");
    expect(kinds).toEqual(
      expect.arrayContaining([
        "rented",
        "booting",
        "waiting_for_ollama",
        "running",
        "stop_requested",
        "terminate_sent",
        "stopped",
      ]),
    );
    expect(kinds.at(-1)).toBe("stopped");
  });
});

describe("caps held by the keeper", () => {
  it("stops at max_minutes after running_at, at that exact moment", async () => {
    const lease = await rentOk({ max_minutes: 2 });
    const running = await driveUntil(lease.id, "running");
    expect(await alarmAt(lease.id)).toBeLessThanOrEqual(Date.parse(running.running_at!) + 60_000);
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.stop_reason).toBe("max_minutes");
    expect(Date.parse(stopped.stop_requested_at!)).toBe(Date.parse(running.running_at!) + 2 * 60_000);
    expect(stopped.teardown_verified_at).not.toBeNull();
  });

  it("stops when the cost reaches max_cost, billed from the accepted rental", async () => {
    // RTX 4090 at 0.69 USD/h: 0.05 USD is reached 260.9 s after the rental was accepted.
    const lease = await rentOk({ max_cost: 0.05, max_minutes: 600 });
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.stop_reason).toBe("max_cost");
    const elapsed = Date.parse(stopped.stop_requested_at!) - Date.parse(lease.created_at);
    expect(elapsed).toBeGreaterThanOrEqual(260_000);
    expect(elapsed).toBeLessThanOrEqual(262_000);
    // Billed until the teardown verified (the sim's lingering machine bills too), then frozen.
    const billedMs = Date.parse(stopped.teardown_verified_at!) - Date.parse(lease.created_at);
    expect(stopped.cost).toBeGreaterThanOrEqual(0.0499);
    expect(stopped.cost).toBeCloseTo((0.69 * billedMs) / 3_600_000, 4);
    expect((await getLease(lease.id)).cost).toBe(stopped.cost);
  });

  it("stops a machine that dies on its own, with the provider's reason", async () => {
    const lease = await rentOk({ max_minutes: 120 });
    await driveUntil(lease.id, "running");
    await simCloud(env.SIM_CLOUD).exit(lease.provider_ref!, "host lost (test)");
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.error).toContain("host lost (test)");
    expect(stopped.teardown_verified_at).not.toBeNull();
  });
});

describe("teardown is verified", () => {
  it("re-sends an ignored terminate until the machine is gone", async () => {
    await simCloud(env.SIM_CLOUD).configure({ faults: { ignore_terminates: 3 } });
    const lease = await rentOk();
    await driveUntil(lease.id, "running");
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    for (let i = 0; i < 100; i++) {
      const current = await getLease(lease.id);
      if (current.status === "stopped") break;
      await fireNext(lease.id);
      if ((await getLease(lease.id)).status === "stopped") {
        expect(await simMachine(lease.provider_ref!), "stopped while the machine is still there").toBeNull();
      }
    }
    const stopped = await getLease(lease.id);
    expect(stopped.status).toBe("stopped");
    expect(await simMachine(lease.provider_ref!)).toBeNull();
    expect((await events(lease.id)).filter((e) => e.kind === "terminate_sent").length).toBeGreaterThanOrEqual(4);
  });

  it("never stops while status reads fail; flags the teardown after 10 minutes and keeps going", async () => {
    const lease = await rentOk();
    await driveUntil(lease.id, "running");
    await simCloud(env.SIM_CLOUD).configure({ faults: { status_error: true } });
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    const stopAt = clock.now;
    while (clock.now - stopAt < 11 * 60_000) {
      expect(await fireNext(lease.id)).toBe(true);
      expect((await getLease(lease.id)).status).toBe("stopping");
    }
    const flagged = await getLease(lease.id);
    expect(flagged.error).toBe("teardown_unverified");
    expect((await events(lease.id)).map((e) => e.kind)).toContain("teardown_unverified");
    // The slower pace: about a minute between looks.
    expect((await alarmAt(lease.id))! - clock.now).toBeGreaterThanOrEqual(60_000);

    await simCloud(env.SIM_CLOUD).configure({ faults: { status_error: false } });
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.teardown_verified_at).not.toBeNull();
    expect(stopped.error).toBeNull();
  });

  it("gives up on a machine that never boots: start_timeout, then a verified teardown", async () => {
    await simCloud(env.SIM_CLOUD).configure({ faults: { stuck_booting: true } });
    const lease = await rentOk();
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.stop_reason).toBe("start_timeout");
    expect(stopped.running_at).toBeNull();
    expect(Date.parse(stopped.stop_requested_at!) - Date.parse(lease.created_at)).toBe(20 * 60_000);
    expect(stopped.error).toMatch(/did not start/);
    expect(await simMachine(lease.provider_ref!)).toBeNull();
  });

  it("tears down a machine whose start failed, with the provider's reason in error", async () => {
    await simCloud(env.SIM_CLOUD).configure({ faults: { fail_start: "OCI runtime create failed (test)" } });
    const lease = await rentOk({ template: "custom", image: "ghcr.io/x/y:1", cmd: "true" });
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.running_at).toBeNull();
    expect(stopped.error).toContain("OCI runtime create failed (test)");
    expect((await events(lease.id)).map((e) => e.kind)).toContain("start_failed");
    expect(await simMachine(lease.provider_ref!)).toBeNull();
  });
});

describe("renting with failover", () => {
  it("moves past offers without capacity to one that has it", async () => {
    await simCloud(env.SIM_CLOUD).configure({ faults: { no_capacity: ["rtx-4090", "l40s"] } });
    const res = await rent({ gpu: undefined, gpu_count: 1, vram_gb: 24 });
    expect(res.status).toBe(202);
    const lease = (await res.json()) as Lease;
    expect(lease.gpu).not.toMatch(/4090|L40S/i);
    const failed = (await events(lease.id)).filter((e) => e.kind === "rent_attempt_failed");
    expect(failed.length).toBeGreaterThanOrEqual(1);
    expect(failed.every((e) => /no_capacity/.test(e.detail ?? ""))).toBe(true);
  });

  it("answers 409 no_capacity with every attempt when nothing can be rented; the lease is stopped", async () => {
    await simCloud(env.SIM_CLOUD).configure({ faults: { no_capacity: true } });
    const res = await rent({ gpu: undefined, vram_gb: 24 });
    expect(res.status).toBe(409);
    const body = (await errorBody(res)) as Awaited<ReturnType<typeof errorBody>> & {
      attempts: { offer_id: string; error: string }[];
      lease_id: string;
    };
    expect(body.code).toBe("no_capacity");
    expect(body.attempts.length).toBeGreaterThanOrEqual(2);
    expect(body.attempts.every((a) => a.offer_id.startsWith("sim:") && /no_capacity/.test(a.error))).toBe(true);
    const lease = await getLease(body.lease_id);
    expect(lease).toMatchObject({ status: "stopped", stop_reason: "rent_failed" });
    expect(lease.teardown_verified_at).not.toBeNull();
  });

  it("resolves an ambiguous create by its label: the machine found is the lease's", async () => {
    await simCloud(env.SIM_CLOUD).configure({ faults: { error_but_created: true } });
    const res = await rent();
    expect(res.status).toBe(202);
    const lease = (await res.json()) as Lease;
    const machine = await simMachine(lease.provider_ref!);
    expect(machine?.label).toBe(lease.label);
    expect((await simCloud(env.SIM_CLOUD).describe()).machines.filter((m) => m.label === lease.label)).toHaveLength(1);
  });

  it("never rents again when the label lookup fails: 502, and the keeper finds and tears the machine down", async () => {
    await simCloud(env.SIM_CLOUD).configure({ faults: { error_but_created: true, listing_error: true } });
    const res = await rent();
    expect(res.status).toBe(502);
    const body = (await res.json()) as { code: string; lease_id: string };
    expect(body.code).toBe("provider_error");
    const machines = (await simCloud(env.SIM_CLOUD).describe()).machines.filter(
      (m) => m.label === `gpulease-${body.lease_id}`,
    );
    expect(machines).toHaveLength(1);
    expect((await getLease(body.lease_id)).status).toBe("stopping");

    await fireNext(body.lease_id);
    expect((await getLease(body.lease_id)).status).toBe("stopping");
    await simCloud(env.SIM_CLOUD).configure({ faults: { listing_error: false } });
    const stopped = await driveUntil(body.lease_id, "stopped");
    expect(stopped.provider_ref).toBe(machines[0]!.ref);
    expect(stopped.stop_reason).toBe("rent_failed");
    expect(await simMachine(machines[0]!.ref)).toBeNull();
  });
});

describe("idempotency and limits", () => {
  it("two concurrent POSTs with one Idempotency-Key rent one machine and return one lease", async () => {
    const key = `key-${clock.now}`;
    const [a, b] = await Promise.all([rent({}, { "Idempotency-Key": key }), rent({}, { "Idempotency-Key": key })]);
    expect([a.status, b.status].sort()).toEqual([200, 202]);
    const [la, lb] = (await Promise.all([a.json(), b.json()])) as Lease[];
    expect(la!.id).toBe(lb!.id);
    const again = await rent({}, { "Idempotency-Key": key });
    expect(again.status).toBe(200);
    expect(((await again.json()) as Lease).id).toBe(la!.id);
    const machines = (await simCloud(env.SIM_CLOUD).describe()).machines.filter(
      (m) => m.label === `gpulease-${la!.id}`,
    );
    expect(machines).toHaveLength(1);
    const all = (await (await api("/v1/leases?status=active")).json()) as { leases: Lease[] };
    expect(all.leases).toHaveLength(1);
  });

  it("holds MAX_ACTIVE_LEASES also under concurrent requests", async () => {
    const results = await Promise.all(Array.from({ length: 6 }, () => rent()));
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).toEqual([202, 202, 202, 202, 409, 409]);
    for (const res of results.filter((r) => r.status === 409)) {
      expect((await errorBody(res)).code).toBe("limit_reached");
    }
  });
});

describe("the keeper survives", () => {
  it("eviction mid-loop: the loop continues from its stored state", async () => {
    const lease = await rentOk();
    await fireNext(lease.id);
    await evictDurableObject(keeper(lease.id));
    await driveUntil(lease.id, "running");
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await fireNext(lease.id);
    await evictDurableObject(keeper(lease.id));
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.teardown_verified_at).not.toBeNull();
  });

  it("ensureAlarm takes over a lease whose keeper was never started", async () => {
    const lease = await rentOk();
    await runInDurableObject(keeper(lease.id), async (_i, state) => {
      await state.storage.deleteAlarm();
      await state.storage.deleteAll();
    });
    expect(await keeper(lease.id).ensureAlarm(lease.id)).toEqual({ rearmed: true });
    await driveUntil(lease.id, "running");
    // Without the id it falls back to the object's name (getByName(leaseId)).
    await runInDurableObject(keeper(lease.id), async (_i, state) => {
      await state.storage.deleteAlarm();
      await state.storage.deleteAll();
    });
    expect(await keeper(lease.id).ensureAlarm()).toEqual({ rearmed: true });
    expect((await keeper(lease.id).stop("requested")).already).toBe(false);
    expect((await driveUntil(lease.id, "stopped")).teardown_verified_at).not.toBeNull();
  });

  it("an alarm that fails unexpectedly throws for the platform's retries, then re-arms itself", async () => {
    const lease = await rentOk();
    // A row the keeper cannot read stands in for D1 trouble or a bug.
    await env.DB.prepare("UPDATE leases SET spec = 'not json' WHERE id = ?").bind(lease.id).run();
    await runInDurableObject(keeper(lease.id), (_i, state) => state.storage.deleteAlarm());
    await expect(runInDurableObject(keeper(lease.id), (instance) => instance.alarm())).rejects.toThrow();
    expect(await alarmAt(lease.id)).toBeNull();
    await runInDurableObject(keeper(lease.id), (instance) =>
      instance.alarm({ retryCount: 5, isRetry: true, scheduledTime: clock.now }),
    );
    expect(await alarmAt(lease.id)).toBeGreaterThan(clock.now);

    await env.DB.prepare("UPDATE leases SET spec = ? WHERE id = ?")
      .bind(
        JSON.stringify({
          image: "ollama/ollama:latest",
          cmd: null,
          env: {},
          ports: [11434],
          disk_gb: 40,
          weights_gb: 0,
          context_length: null,
          min_billed_minutes: 0,
        }),
        lease.id,
      )
      .run();
    await runInDurableObject(keeper(lease.id), (_i, state) => state.storage.deleteAlarm());
    expect(await keeper(lease.id).ensureAlarm()).toEqual({ rearmed: true });
    expect(await keeper(lease.id).ensureAlarm()).toEqual({ rearmed: false });
    await driveUntil(lease.id, "running");
  });
});
