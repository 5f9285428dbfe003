import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { newId } from "../../src/lib/ids";
import type { ReaperRun } from "../../src/reaper/runs";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { VramfarmFake } from "../fakes/vramfarm";
import { api, PROVIDER_SECRETS } from "../helpers";
import {
  alarmAt,
  clock,
  drainLeases,
  driveUntil,
  envWith,
  fireCron,
  getLease,
  resetSim,
  sim,
  simLease,
  useFakeClock,
} from "../schedules/support";
import { rentOk } from "../support/lease";

const REAPER = "*/10 * * * *";
const GRACE_S = 15 * 60;

let runpod: RunpodFake;
let vast: VastFake;
let vramfarm: VramfarmFake;
let fakes: InstalledFakes;
let start = Date.parse("2031-05-01T00:00:00Z");

beforeEach(async () => {
  start += 24 * 3_600_000;
  useFakeClock(start);
  await resetSim();
  runpod = new RunpodFake();
  vast = new VastFake();
  vramfarm = new VramfarmFake();
  fakes = installFakes(runpod, vast, vramfarm);
});

afterEach(async () => {
  await drainLeases();
  fakes.restore();
});

async function reap(vars: Partial<Record<keyof Env, string>> = {}): Promise<ReaperRun> {
  await fireCron(REAPER, clock.now, envWith(vars));
  return lastRun();
}

async function lastRun(): Promise<ReaperRun> {
  const res = await api("/v1/reaper/runs?limit=1");
  expect(res.status).toBe(200);
  const { runs } = (await res.json()) as { runs: ReaperRun[] };
  return runs[0]!;
}

const label = (leaseId: string) => `gpulease-${leaseId}`;
const runpodPodGone = (id: string) => {
  const pod = runpod.model.get(id);
  return !pod || runpod.model.state(id) === "gone";
};
const vastGone = (id: string) => !vast.model.get(id) || vast.model.state(id) === "gone";

async function rentSim(extra: Record<string, unknown> = {}): Promise<Lease> {
  return driveUntil((await rentOk(simLease(extra))).id, "running");
}

describe("orphans", () => {
  it("adopts and tears down labelled orphans at RunPod and Vast.ai, and leaves an unlabelled machine alone", async () => {
    const podOrphanId = newId("lse");
    const vastOrphanId = newId("lse");
    const podOrphan = runpod.plantPod({ name: label(podOrphanId) });
    const vastOrphan = vast.plant({ label: label(vastOrphanId) }).id;
    const strangersPod = runpod.plantPod({ name: "my-own-jupyter" });
    const otherDeployment = runpod.plantPod({ name: `gpulease-staging-${newId("lse")}` });
    const strangersInstance = vast.plantUnlabelled().id;
    clock.advance(GRACE_S + 60);
    const youngOrphanId = newId("lse");
    const youngOrphan = runpod.plantPod({ name: label(youngOrphanId) });

    const run = await reap();
    expect(run.mode).toBe("enforce");
    expect(run.providers).toEqual(
      expect.arrayContaining([
        // The adapters list only labels with our prefix; `gpulease-staging-...` is listed and ignored.
        expect.objectContaining({ provider: "runpod", listed: 3, ignored: 1, error: null }),
        expect.objectContaining({ provider: "vast", listed: 1, ignored: 0, error: null }),
      ]),
    );
    const adopted = run.actions.filter((a) => a.kind === "adopt");
    expect(adopted.map((a) => [a.provider, a.provider_ref, a.lease_id]).sort()).toEqual(
      [
        ["runpod", podOrphan, podOrphanId],
        ["vast", vastOrphan, vastOrphanId],
      ].sort(),
    );
    expect(adopted.every((a) => a.outcome === "done")).toBe(true);

    for (const leaseId of [podOrphanId, vastOrphanId]) {
      const lease = await getLease(leaseId);
      expect(lease).toMatchObject({ status: "stopping", stop_reason: "reaper", label: label(leaseId) });
      // What the orphan cost before it was found counts as spend: price × its age at adoption.
      expect(lease.cost).toBeGreaterThan(0);
      const stopped = await driveUntil(leaseId, "stopped");
      expect(stopped.teardown_verified_at).not.toBeNull();
      const events = ((await (await api(`/v1/leases/${leaseId}/events`)).json()) as { events: { kind: string }[] })
        .events;
      expect(events.map((e) => e.kind)).toContain("reaper_adopt");
    }
    expect(runpodPodGone(podOrphan)).toBe(true);
    expect(vastGone(vastOrphan)).toBe(true);
    // Never touched: no label of ours, another deployment's prefix, or younger than the grace period.
    for (const id of [strangersPod, otherDeployment, youngOrphan]) expect(runpodPodGone(id)).toBe(false);
    expect(vastGone(strangersInstance)).toBe(false);
    expect(runpod.calls("terminate").map((r) => JSON.stringify(r.variables))).not.toContain(strangersPod);
    expect((await api(`/v1/leases/${youngOrphanId}`)).status).toBe(404);
  });

  it("two orphans under one label: the second is handed to the lease the first was adopted into, never 'handled by another run'", async () => {
    const orphanId = newId("lse");
    const first = runpod.plantPod({ name: label(orphanId) });
    const second = runpod.plantPod({ name: label(orphanId) });
    clock.advance(GRACE_S + 60);

    const run = await reap();
    const mine = run.actions.filter((a) => a.lease_id === orphanId);
    expect(mine.map((a) => a.provider_ref).sort()).toEqual([first, second].sort());
    expect(mine.every((a) => a.outcome === "done")).toBe(true);
    // Failed on the old code: the second read "(already handled by another run)" and ran on.
    expect(mine.map((a) => a.detail).join("; ")).not.toMatch(/another run/);
    const stopped = await driveUntil(orphanId, "stopped");
    expect(stopped.teardown_verified_at).not.toBeNull();
    expect(runpodPodGone(first)).toBe(true);
    expect(runpodPodGone(second)).toBe(true);
  });

  it("kills nothing at a provider whose listing fails, and still reaps the others", async () => {
    const podOrphanId = newId("lse");
    const vastOrphanId = newId("lse");
    const podOrphan = runpod.plantPod({ name: label(podOrphanId) });
    vast.plant({ label: label(vastOrphanId) });
    clock.advance(GRACE_S + 60);
    runpod.fault("myself", { kind: "status", status: 500 }, 10);

    const run = await reap();
    const runpodEntry = run.providers.find((p) => p.provider === "runpod");
    expect(runpodEntry).toMatchObject({ listed: null });
    expect(runpodEntry?.error).toBeTruthy();
    expect(run.actions.filter((a) => a.provider === "runpod")).toEqual([]);
    expect(run.actions).toContainEqual(
      expect.objectContaining({ kind: "adopt", provider: "vast", lease_id: vastOrphanId }),
    );
    expect((await api(`/v1/leases/${podOrphanId}`)).status).toBe(404);
    expect(runpodPodGone(podOrphan)).toBe(false);
    expect(runpod.calls("terminate")).toHaveLength(0);
    await driveUntil(vastOrphanId, "stopped");
  });

  it("reads an unparseable listing as a failure, not as 'nothing is running'", async () => {
    const lease = await rentSim();
    const vastOrphanId = newId("lse");
    const orphan = vast.plant({ label: label(vastOrphanId) }).id;
    clock.advance(GRACE_S + 60);
    vast.inject("list", { kind: "malformed" }, 10);
    const run = await reap();
    expect(run.providers.find((p) => p.provider === "vast")).toMatchObject({ listed: null });
    expect(run.actions.filter((a) => a.provider === "vast")).toEqual([]);
    expect(vastGone(orphan)).toBe(false);
    expect((await getLease(lease.id)).status).toBe("running");
  });

  it("in report mode records what it would do and changes nothing", async () => {
    const podOrphanId = newId("lse");
    const podOrphan = runpod.plantPod({ name: label(podOrphanId) });
    clock.advance(GRACE_S + 60);

    const run = await reap({ REAPER_MODE: "report" });
    expect(run.mode).toBe("report");
    expect(run.actions).toEqual([
      expect.objectContaining({
        kind: "adopt",
        provider: "runpod",
        provider_ref: podOrphan,
        lease_id: podOrphanId,
        outcome: "reported",
      }),
    ]);
    expect(run.actions[0]!.detail).toMatch(/^would: /);
    expect((await api(`/v1/leases/${podOrphanId}`)).status).toBe(404);
    expect(runpodPodGone(podOrphan)).toBe(false);
    expect(runpod.calls("terminate")).toHaveLength(0);

    // Switched to enforce, the next run does it.
    await reap();
    await driveUntil(podOrphanId, "stopped");
    expect(runpodPodGone(podOrphan)).toBe(true);
  });

  it("records every run with what each provider listed, and no secret", async () => {
    await reap();
    const res = await api("/v1/reaper/runs?limit=20");
    const text = await res.text();
    for (const secret of PROVIDER_SECRETS) expect(text).not.toContain(secret);
    const { runs } = JSON.parse(text) as { runs: ReaperRun[] };
    expect(runs.length).toBeGreaterThan(0);
    expect(runs[0]!.providers.map((p) => p.provider).sort()).toEqual(["runpod", "sim", "vast", "vramfarm"]);
    expect((await api("/v1/reaper/runs?limit=0")).status).toBe(400);
  });
});

describe("the ledger's side", () => {
  it("at VRAMfarm (no labels) tears down only servers the ledger knows, never a stranger's", async () => {
    const known = vramfarm.plant().id;
    const strangers = vramfarm.plant().id;
    const leaseId = newId("lse");
    const stoppedAt = new Date(clock.now - 3_600_000).toISOString();
    // A lease the ledger believes stopped whose server still runs.
    await env.DB.prepare(
      `INSERT INTO leases (id, status, provider, provider_ref, label, template, spec, max_minutes, currency, stop_reason,
         created_at, rented_at, running_at, stopped_at, teardown_verified_at)
       VALUES (?, 'stopped', 'vramfarm', ?, ?, 'custom', ?, 60, 'EUR', 'requested', ?, ?, ?, ?, ?)`,
    )
      .bind(
        leaseId,
        String(known),
        label(leaseId),
        JSON.stringify({ image: "x", cmd: null, env: {}, ports: [], disk_gb: 40, weights_gb: 0, context_length: null }),
        stoppedAt,
        stoppedAt,
        stoppedAt,
        stoppedAt,
        stoppedAt,
      )
      .run();

    const run = await reap();
    expect(run.providers.find((p) => p.provider === "vramfarm")).toMatchObject({ listed: 1, error: null });
    expect(run.actions).toContainEqual(
      expect.objectContaining({ kind: "reopen", provider: "vramfarm", lease_id: leaseId }),
    );
    await driveUntil(leaseId, "stopped");
    expect(vramfarm.model.get(String(known)) && vramfarm.model.state(String(known)) !== "gone").toBeFalsy();
    expect(vramfarm.model.state(String(strangers))).not.toBe("gone");
  });

  it("hands a second machine under a stopped lease's label to that lease's keeper: torn down, verified, billed to it", async () => {
    const lease = await rentSim();
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    const stoppedBefore = await driveUntil(lease.id, "stopped");
    // The same label shows up again (a machine of an ambiguous create, say).
    const ghost = await sim().plant({ label: lease.label, age_seconds: 3600 });
    clock.advance(GRACE_S + 60);

    const run = await reap();
    expect(run.actions).toContainEqual(
      expect.objectContaining({ kind: "claim", lease_id: lease.id, provider_ref: ghost.ref, outcome: "done" }),
    );
    // Its keeper reopened the lease: not stopped while one of its machines runs.
    expect(await getLease(lease.id)).toMatchObject({ status: "stopping", provider_ref: stoppedBefore.provider_ref });
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.provider_ref).toBe(stoppedBefore.provider_ref);
    expect(stopped.creates).toContainEqual(expect.objectContaining({ provider_ref: ghost.ref, resolution: "machine" }));
    const view = await sim().status(ghost.ref);
    expect(view.ok && view.value).toBeNull();
    // The ghost's hour (and more) is on the lease's ledger.
    expect(stopped.cost - stoppedBefore.cost).toBeGreaterThanOrEqual(stoppedBefore.price_per_hour! - 1e-6);
    // The next run sees the same machine lingering at most, and hands nothing over twice.
    const again = await reap();
    expect(again.actions.filter((a) => a.kind === "claim" && !a.detail.includes("known"))).toEqual([]);
  });

  it("hands an active lease whose machine is not listed to its keeper", async () => {
    const lease = await rentSim();
    await sim().remove(lease.provider_ref!);
    const run = await reap();
    expect(run.actions).toContainEqual(expect.objectContaining({ kind: "reconcile", lease_id: lease.id }));
    expect(await alarmAt(lease.id)).not.toBeNull();
  });

  it("re-arms a keeper whose alarm was lost", async () => {
    const lease = await rentSim({ max_minutes: 600 });
    await runInDurableObject(env.LEASE_KEEPER.getByName(lease.id), (_instance, state) => state.storage.deleteAlarm());
    expect(await alarmAt(lease.id)).toBeNull();
    const run = await reap();
    expect(run.actions).toContainEqual(expect.objectContaining({ kind: "rearm", lease_id: lease.id, outcome: "done" }));
    expect(await alarmAt(lease.id)).not.toBeNull();
  });

  it("stops an active lease past its time cap when its keeper did not", async () => {
    const lease = await rentSim({ max_minutes: 5 });
    await runInDurableObject(env.LEASE_KEEPER.getByName(lease.id), (_instance, state) => state.storage.deleteAlarm());
    clock.advance(15 * 60);
    const run = await reap();
    expect(run.actions).toContainEqual(
      expect.objectContaining({ kind: "stop_overdue", lease_id: lease.id, outcome: "done" }),
    );
    expect(await getLease(lease.id)).toMatchObject({ status: "stopping", stop_reason: "max_minutes" });
  });
});

describe("POST /v1/leases/stop-all", () => {
  it("stops every active lease and tears down every machine with our label at any provider", async () => {
    const a = await rentSim();
    const b = await rentSim();
    // A young orphan: the reaper's grace period would spare it, stop-all does not.
    const podOrphanId = newId("lse");
    const podOrphan = runpod.plantPod({ name: label(podOrphanId) });
    const vastOrphanId = newId("lse");
    const vastOrphan = vast.plant({ label: label(vastOrphanId) }).id;
    const strangersPod = runpod.plantPod({ name: "not-ours" });

    const res = await api("/v1/leases/stop-all", { method: "POST" });
    expect(res.status).toBe(200);
    // 2 sim machines of the leases + 1 RunPod and 1 Vast.ai orphan.
    expect(await res.json()).toEqual({ ok: true, leases: 2, machines: 4, errors: [] });

    for (const leaseId of [a.id, b.id]) {
      expect(await getLease(leaseId)).toMatchObject({ status: "stopping", stop_reason: "requested" });
      await driveUntil(leaseId, "stopped");
    }
    for (const leaseId of [podOrphanId, vastOrphanId]) {
      expect(await getLease(leaseId)).toMatchObject({ status: "stopping", stop_reason: "reaper" });
      await driveUntil(leaseId, "stopped");
    }
    expect(runpodPodGone(podOrphan)).toBe(true);
    expect(vastGone(vastOrphan)).toBe(true);
    expect(runpodPodGone(strangersPod)).toBe(false);

    const again = await api("/v1/leases/stop-all", { method: "POST" });
    expect(await again.json()).toEqual({ ok: true, leases: 0, machines: 0, errors: [] });
  });

  it("needs the admin scope", async () => {
    const created = await api("/v1/tokens", {
      method: "POST",
      json: { name: "ops", scopes: ["read", "rent", "stop"] },
    });
    const { token } = (await created.json()) as { token: string };
    const res = await api("/v1/leases/stop-all", { method: "POST", token });
    expect(res.status).toBe(403);
  });
});
