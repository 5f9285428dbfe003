import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { loadSettings } from "../../src/config";
import type { Lease } from "../../src/leases/schema";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { VramfarmFake } from "../fakes/vramfarm";
import { ADMIN_TOKEN, api, PROVIDER_SECRETS } from "../helpers";
import { TestClock } from "../support/clock";
import { driveTo, fireNext as fireNextAlarm } from "../support/keeper";
import { rentOk as rentLeaseOk } from "../support/lease";

// The whole life of a lease against the wire-faithful fakes of each real provider. Date is
// faked, so the fakes, the keeper and the leases code share one clock that only the test moves.
const clock = new TestClock(Date.parse("2033-01-01T00:00:00Z"));
const bodies: string[] = [];

async function read<T>(res: Response): Promise<T> {
  const text = await res.text();
  bodies.push(text);
  return JSON.parse(text) as T;
}

async function getLease(leaseId: string): Promise<Lease> {
  return read<Lease>(await api(`/v1/leases/${leaseId}`));
}

const fireNext = (leaseId: string) => fireNextAlarm(clock, leaseId);
const driveUntil = (leaseId: string, status: Lease["status"], maxAlarms = 300) =>
  driveTo(leaseId, status, { clock, maxAlarms, read: getLease });

const rentOk = (body: Record<string, unknown>) => rentLeaseOk(body, { seen: bodies });

async function eventsOf(leaseId: string): Promise<{ kind: string; detail: string | null }[]> {
  return (await read<{ events: { kind: string; detail: string | null }[] }>(await api(`/v1/leases/${leaseId}/events`)))
    .events;
}

let runpod: RunpodFake;
let vast: VastFake;
let vramfarm: VramfarmFake;
let fakes: InstalledFakes;

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["Date"] });
  clock.set(clock.now + 3_600_000);
  runpod = new RunpodFake({
    quirks: {
      bootMs: 60_000,
      ollamaListenDelayMs: 20_000,
      lingerMs: 10_000,
      lingerShowsAs: "RUNNING",
      ignoreTerminates: 1,
    },
  });
  vast = new VastFake({ bootMs: 90_000, lingerMs: 6_000 });
  vramfarm = new VramfarmFake({ bootMs: 120_000 });
  fakes = installFakes(runpod, vast, vramfarm);
});

afterEach(() => fakes.restore());

describe("RunPod over the configured transport", () => {
  it("rents, waits for Ollama behind the proxy, ends by the job's call-back, verifies the pod is gone", async () => {
    const lease = await rentOk({ provider: "runpod", gpu: "4090", max_minutes: 60 });
    expect(lease).toMatchObject({ provider: "runpod", status: "provisioning", currency: "USD" });
    const pod = runpod.model.get(lease.provider_ref!);
    expect(pod?.label).toBe(lease.label);

    // The machine gets the call-back URL and its own token in its environment.
    const podEnv = (pod!.meta.env as string[]).map((e) => e.split("=") as [string, string]);
    const callbackUrl = podEnv.find(([k]) => k === "GPULEASE_CALLBACK_URL")?.[1];
    const callbackToken = podEnv
      .find(([k]) => k === "GPULEASE_CALLBACK_TOKEN")
      ?.slice(1)
      .join("=");
    expect(callbackUrl).toBe(`http://gpulease.test/v1/leases/${lease.id}/done`);
    expect(callbackToken).toMatch(/^[A-Za-z0-9_-]{40,}$/);

    const running = await driveUntil(lease.id, "running");
    // Running means Ollama answered: 60 s of boot plus 20 s until it listens.
    expect(Date.parse(running.running_at!) - Date.parse(lease.created_at)).toBeGreaterThanOrEqual(80_000);
    expect(running.access?.urls).toContain(`http://${lease.provider_ref}-11434.proxy.runpod.fake`);

    fakes.restore();
    const done = await api(`/v1/leases/${lease.id}/done`, {
      method: "POST",
      token: null,
      headers: { Authorization: `Bearer ${callbackToken}` },
      json: { exit_code: 0 },
    });
    fakes = installFakes(runpod, vast, vramfarm);
    expect(await read(done)).toEqual({ ok: true });

    // The first terminate is ignored and the pod lingers 10 s: stopped only once it is gone
    // (confirmed by two reads in a row), never while it is still there.
    for (let i = 0; i < 100; i++) {
      const current = await getLease(lease.id);
      if (current.status === "stopped") break;
      await fireNext(lease.id);
      if ((await getLease(lease.id)).status === "stopped") expect(runpod.model.state(lease.provider_ref!)).toBe("gone");
    }
    const stopped = await getLease(lease.id);
    expect(stopped).toMatchObject({ status: "stopped", stop_reason: "job_done", exit_code: 0 });
    expect(stopped.teardown_verified_at).not.toBeNull();
    expect(runpod.model.state(lease.provider_ref!)).toBe("gone");
    expect(runpod.calls("terminate").length).toBeGreaterThanOrEqual(2);
    expect(JSON.stringify(await eventsOf(lease.id))).not.toContain(callbackToken!);

    // The configured transport did all of it: on REST v2 no GraphQL call at all, and the reverse.
    const transports = new Set(runpod.requests.map((r) => r.transport));
    expect([...transports]).toEqual([loadSettings(env).config.runpodTransport]);
  });
});

describe("Vast.ai", () => {
  it("rents, runs, stops on request and verifies the instance is gone", async () => {
    const lease = await rentOk({ provider: "vast", gpu: "4090", max_minutes: 60 });
    expect(lease.provider).toBe("vast");
    const running = await driveUntil(lease.id, "running");
    expect(running.access?.urls[0]).toMatch(/^http:\/\/[\d.]+:\d+$/);
    expect(await read(await api(`/v1/leases/${lease.id}/stop`, { method: "POST" }))).toEqual({ ok: true });
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.stop_reason).toBe("requested");
    expect(stopped.teardown_verified_at).not.toBeNull();
    expect(vast.model.state(lease.provider_ref!)).toBe("gone");
    // Billed from the accepted rental: boot (90 s) included.
    expect(stopped.cost).toBeGreaterThan(0);
  });

  it("stops at the time cap", async () => {
    const lease = await rentOk({ provider: "vast", gpu: "4090", max_minutes: 3 });
    const running = await driveUntil(lease.id, "running");
    // At most 3 provider calls per alarm invocation, whatever the phase.
    let most = 0;
    for (let i = 0; i < 100 && (await getLease(lease.id)).status !== "stopped"; i++) {
      const before = fakes.requests.length;
      await fireNext(lease.id);
      most = Math.max(most, fakes.requests.length - before);
    }
    expect(most).toBeGreaterThanOrEqual(2);
    expect(most).toBeLessThanOrEqual(3);
    const stopped = await getLease(lease.id);
    expect(stopped.stop_reason).toBe("max_minutes");
    expect(Date.parse(stopped.stop_requested_at!)).toBe(Date.parse(running.running_at!) + 3 * 60_000);
    expect(vast.model.state(lease.provider_ref!)).toBe("gone");
  });
});

describe("VRAMfarm", () => {
  it("bills from running in EUR with its 15-minute minimum plus traffic, and stops at max_cost", async () => {
    const lease = await rentOk({
      provider: "vramfarm",
      gpu: "4090",
      template: "custom",
      image: "ghcr.io/you/batch:1",
      cmd: "python /app/run.py",
      max_minutes: 600,
      max_cost: 0.2,
    });
    expect(lease).toMatchObject({ provider: "vramfarm", currency: "EUR" });
    const running = await driveUntil(lease.id, "running");
    // Provisioning is free; from running the minimum (15 min) is billed at once.
    expect(running.cost).toBeCloseTo((running.price_per_hour! * 15) / 60, 4);

    // Traffic brings the cap moment forward: the beat picks it up.
    vramfarm.setTraffic(lease.provider_ref!, 0.05);
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.stop_reason).toBe("max_cost");
    const priceUsd = running.price_per_hour! * 1.08;
    const expectedMs = ((0.2 - 0.05 * 1.08) / priceUsd) * 3_600_000;
    const actualMs = Date.parse(stopped.stop_requested_at!) - Date.parse(running.running_at!);
    expect(Math.abs(actualMs - expectedMs)).toBeLessThanOrEqual(1000);
    // Billed until the teardown verified: the cap's 0.2 USD plus the teardown's seconds, or what
    // VRAMfarm itself billed (per started minute) when that is more, plus traffic.
    const billedMs = Date.parse(stopped.teardown_verified_at!) - Date.parse(running.running_at!);
    const reported = vramfarm.serverJson(vramfarm.model.get(lease.provider_ref!)!).cost_eur;
    const own = (running.price_per_hour! * billedMs) / 3_600_000;
    expect(stopped.cost).toBeCloseTo(Math.max(own, reported) + 0.05, 4);
    expect(stopped.cost * 1.08).toBeGreaterThanOrEqual(0.2 - 1e-4);
    expect(vramfarm.model.state(lease.provider_ref!)).toBe("gone");
  });
});

describe("secrets against the real wire formats", () => {
  it("no provider key, admin token or call-back token in any body read here", () => {
    const everything = bodies.join("\n");
    for (const secret of [...PROVIDER_SECRETS, ADMIN_TOKEN]) expect(everything).not.toContain(secret);
    expect(everything).not.toContain("GPULEASE_CALLBACK_TOKEN");
    expect(bodies.length).toBeGreaterThan(10);
  });
});
