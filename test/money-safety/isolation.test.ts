import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { simCloud } from "../../src/sim/cloud";
import { issueToken } from "../auth/tokens-helper";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { api } from "../helpers";

// Finding 7: env values readable, idempotency keys global, stop-all listing before stopping.

const SIM_LEASE = { provider: "sim", gpu: "4090", gpu_count: 1, template: "custom", image: "x/y:1", max_minutes: 30 };
let installed: InstalledFakes | null = null;

beforeEach(async () => {
  await simCloud(env.SIM_CLOUD).reset();
  await env.DB.prepare("UPDATE leases SET status = 'stopped' WHERE status != 'stopped'").run();
});

afterEach(() => {
  installed?.restore();
  installed = null;
});

describe("env values are write-only", () => {
  it("a schedule shows env keys with '***' to every token, and a PATCH of what was read keeps the secret", async () => {
    const created = await api("/v1/schedules", {
      method: "POST",
      json: { name: "n", cron: "0 2 * * *", lease: { ...SIM_LEASE, env: { HF_TOKEN: "hf_supersecret_value" } } },
    });
    expect(created.status).toBe(201);
    const schedule = (await created.json()) as { id: string; lease: { env: Record<string, string> } };
    expect(schedule.lease.env).toEqual({ HF_TOKEN: "***" });
    const reader = await issueToken(["read"]);
    for (const token of [reader.token, undefined]) {
      const res = await api(`/v1/schedules/${schedule.id}`, { token });
      const text = await res.text();
      // Failed on main: the read token saw "hf_supersecret_value".
      expect(text).not.toContain("hf_supersecret_value");
      expect(JSON.parse(text).lease.env).toEqual({ HF_TOKEN: "***" });
    }
    const listed = await (await api("/v1/schedules", { token: reader.token })).text();
    expect(listed).not.toContain("hf_supersecret_value");
    // Sending back what was read does not overwrite the secret with the mask.
    const patched = await api(`/v1/schedules/${schedule.id}`, { method: "PATCH", json: { lease: schedule.lease } });
    expect(patched.status).toBe(200);
    const stored = await env.DB.prepare("SELECT lease_spec FROM schedules WHERE id = ?")
      .bind(schedule.id)
      .first<{ lease_spec: string }>();
    expect(JSON.parse(stored!.lease_spec).env).toEqual({ HF_TOKEN: "hf_supersecret_value" });
  });
});

describe("a lease shows what was asked", () => {
  it("spec: template, image, cmd, ports, disk and env keys with '***' in the answer, GET and the list", async () => {
    const body = { ...SIM_LEASE, cmd: "python /app/run.py --fast", ports: [8000], disk_gb: 60 };
    const rented = await api("/v1/leases", {
      method: "POST",
      json: { ...body, env: { HF_TOKEN: "hf_supersecret_value", MODE: "nightly" } },
    });
    const rentedText = await rented.text();
    expect(rented.status).toBe(202);
    const id = (JSON.parse(rentedText) as { id: string }).id;
    const reader = await issueToken(["read"]);
    const texts = [
      rentedText,
      await (await api(`/v1/leases/${id}`, { token: reader.token })).text(),
      await (await api("/v1/leases?limit=5", { token: reader.token })).text(),
    ];
    for (const text of texts) {
      expect(text).not.toContain("hf_supersecret_value");
      expect(text).not.toContain("nightly");
    }
    const lease = JSON.parse(texts[1]!) as { spec: unknown };
    expect(lease.spec).toEqual({
      template: "custom",
      image: "x/y:1",
      cmd: "python /app/run.py --fast",
      ports: [8000],
      disk_gb: 60,
      env: { HF_TOKEN: "***", MODE: "***" },
      model: null,
      context_length: null,
    });
  });
});

describe("Idempotency-Key is scoped per token", () => {
  it("the same key from two tokens names two rentals; neither reads the other's lease", async () => {
    const a = await issueToken(["read", "rent", "stop"], "a");
    const b = await issueToken(["read", "rent", "stop"], "b");
    const headers = { "Idempotency-Key": "nightly-1" };
    const first = await api("/v1/leases", { method: "POST", json: SIM_LEASE, token: a.token, headers });
    expect(first.status).toBe(202);
    const leaseA = (await first.json()) as { id: string };
    const again = await api("/v1/leases", { method: "POST", json: SIM_LEASE, token: a.token, headers });
    expect(again.status).toBe(200);
    expect(((await again.json()) as { id: string }).id).toBe(leaseA.id);
    // Failed on main: token b got token a's lease back (200, same id).
    const other = await api("/v1/leases", { method: "POST", json: SIM_LEASE, token: b.token, headers });
    expect(other.status).toBe(202);
    expect(((await other.json()) as { id: string }).id).not.toBe(leaseA.id);
  });

  it("a token cannot pre-claim the dispatcher's key for a schedule run", async () => {
    const created = await api("/v1/schedules", {
      method: "POST",
      json: { name: "n", cron: "0 2 * * *", lease: SIM_LEASE },
    });
    const schedule = (await created.json()) as { id: string };
    const mallory = await issueToken(["rent"], "m");
    const key = `schedule:${schedule.id}:2034-01-02T02:00:00.000Z#1`;
    const claimed = await api("/v1/leases", {
      method: "POST",
      json: SIM_LEASE,
      token: mallory.token,
      headers: { "Idempotency-Key": key },
    });
    expect(claimed.status).toBe(202);
    const row = await env.DB.prepare("SELECT idempotency_key FROM leases WHERE instr(idempotency_key, ?) > 0")
      .bind(key)
      .first<{ idempotency_key: string }>();
    // Stored under mallory's own scope, never as the dispatcher's key.
    expect(row?.idempotency_key).not.toBe(key);
    expect(row?.idempotency_key.startsWith("dispatcher")).toBe(false);
  });
});

describe("stop-all", () => {
  it("stops the ledger's leases before it lists any provider", async () => {
    const rented = await api("/v1/leases", { method: "POST", json: SIM_LEASE });
    const lease = (await rented.json()) as { id: string };
    const runpod = new RunpodFake();
    const statusAtListing: string[] = [];
    installed = installFakes({
      handles: (url) => runpod.handles(url),
      async handle(request) {
        const query = await request.clone().text();
        const listing = request.method === "GET" && new URL(request.url).pathname === "/v2/pods";
        if (listing || /myself[\s\S]*pods/.test(query)) {
          const row = await env.DB.prepare("SELECT status FROM leases WHERE id = ?")
            .bind(lease.id)
            .first<{ status: string }>();
          statusAtListing.push(row!.status);
        }
        return runpod.handle(request);
      },
    });
    const res = await api("/v1/leases/stop-all", { method: "POST" });
    expect(res.status).toBe(200);
    // Failed on main: the listing ran while the lease was still provisioning.
    expect(statusAtListing.length).toBeGreaterThan(0);
    expect(statusAtListing.every((s) => s === "stopping" || s === "stopped")).toBe(true);
  });
});
