import { runDurableObjectAlarm } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { simCloud } from "../../src/sim/cloud";
import { OUTBOX_SENDER } from "../../src/webhooks/wake";
import { ADMIN_TOKEN, api, errorBody } from "../helpers";

const sender = () => env.WEBHOOK_SENDER.getByName(OUTBOX_SENDER);

async function createHook(body: Record<string, unknown>) {
  return api("/v1/webhooks", { method: "POST", json: body });
}

async function readToken(): Promise<string> {
  const res = await api("/v1/tokens", { method: "POST", json: { name: "reader", scopes: ["read"] } });
  return ((await res.json()) as { token: string }).token;
}

beforeEach(async () => {
  await env.DB.batch([
    env.DB.prepare("DELETE FROM webhooks"),
    env.DB.prepare("DELETE FROM webhook_deliveries"),
    env.DB.prepare("DELETE FROM webhook_events"),
  ]);
});

/** What the fake receiver at hooks.example.com got; installed before anything is sent. */
let received: { headers: Headers; body: string }[] = [];

beforeEach(() => {
  received = [];
  const realFetch = globalThis.fetch;
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const request = new Request(input as Request, init);
    if (new URL(request.url).hostname !== "hooks.example.com") return realFetch(request);
    // Read inside the sender's context: its request body cannot be read from the test's.
    received.push({ headers: request.headers, body: await request.text() });
    return new Response(null, { status: 204 });
  });
});

afterEach(() => {
  vi.restoreAllMocks();
});

/** Runs the sender (its alarm may also fire by itself) until `count` deliveries are done. */
async function drainOutbox(count: number): Promise<void> {
  await vi.waitFor(
    async () => {
      await runDurableObjectAlarm(sender());
      const row = await env.DB.prepare(
        "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE status = 'delivered'",
      ).first<{
        n: number;
      }>();
      expect(row?.n).toBe(count);
    },
    { timeout: 10_000, interval: 100 },
  );
}

describe("POST /v1/webhooks", () => {
  it("answers 201 with a whsec_ secret shown once and stored sealed", async () => {
    const res = await createHook({ url: "https://hooks.example.com/x", events: ["lease.stopped", "lease.stopped"] });
    expect(res.status).toBe(201);
    const hook = (await res.json()) as Record<string, unknown>;
    expect(hook).toMatchObject({
      id: expect.stringMatching(/^whk_/),
      url: "https://hooks.example.com/x",
      events: ["lease.stopped"],
      format: "json",
      secret: expect.stringMatching(/^whsec_/),
      created_at: expect.any(String),
    });
    const row = await env.DB.prepare("SELECT secret FROM webhooks WHERE id = ?")
      .bind(hook.id)
      .first<{ secret: string }>();
    expect(row?.secret).toMatch(/^v1:/);
    expect(row?.secret).not.toContain((hook.secret as string).slice(6));

    const list = await api("/v1/webhooks");
    const text = await list.text();
    expect(JSON.parse(text).webhooks).toHaveLength(1);
    expect(text).not.toContain("secret");
  });

  it.each([
    [{ url: "http://hooks.example.com/x", events: ["*"] }, "url", /https:\/\//],
    [{ url: "https://10.0.0.5/x", events: ["*"] }, "url", /private/],
    [{ url: "https://gpulease.test/v1/leases", events: ["*"] }, "url", /this worker/],
    [{ url: "https://hooks.example.com/x", events: ["lease.exploded"] }, "events.0", /./],
    [{ url: "https://hooks.example.com/x", events: [] }, "events", /./],
    [{ url: "https://hooks.example.com/x", events: ["*"], format: "xml" }, "format", /./],
    [{ url: "https://hooks.example.com/x", events: ["*"], secret: "mine" }, "", /./],
  ])("refuses %o with 400 naming %s", async (body, path, message) => {
    const res = await createHook(body);
    expect(res.status).toBe(400);
    const error = await errorBody(res);
    expect(error.code).toBe("invalid_request");
    if (path) expect(error.issues?.map((i) => i.path)).toContain(path);
    expect(error.error).toMatch(message);
  });

  it("is admin only, even for reading", async () => {
    const token = await readToken();
    expect((await api("/v1/webhooks", { token })).status).toBe(403);
    expect(
      (await api("/v1/webhooks", { method: "POST", token, json: { url: "https://a.example/x", events: ["*"] } }))
        .status,
    ).toBe(403);
    expect((await api("/v1/webhooks", { token: null })).status).toBe(401);
  });
});

describe("webhook management", () => {
  it("DELETE removes it; unknown ids are 404", async () => {
    const hook = (await (await createHook({ url: "https://hooks.example.com/x", events: ["*"] })).json()) as {
      id: string;
    };
    expect((await api(`/v1/webhooks/${hook.id}`, { method: "DELETE" })).status).toBe(200);
    expect((await api(`/v1/webhooks/${hook.id}`, { method: "DELETE" })).status).toBe(404);
    expect((await api(`/v1/webhooks/${hook.id}/deliveries`)).status).toBe(404);
    expect((await api("/v1/webhooks/nonsense/test", { method: "POST" })).status).toBe(404);
  });

  it("POST /test sends a signed ping from the sender's alarm, logged as delivered", async () => {
    const hook = (await (
      await createHook({ url: "https://hooks.example.com/p", events: ["lease.stopped"] })
    ).json()) as {
      id: string;
    };
    const res = await api(`/v1/webhooks/${hook.id}/test`, { method: "POST" });
    expect(res.status).toBe(202);
    const { delivery_id } = (await res.json()) as { delivery_id: string };
    await drainOutbox(1);
    expect(received).toHaveLength(1);
    const request = received[0] as { headers: Headers; body: string };
    expect(request.headers.get("Gpulease-Event")).toBe("ping");
    expect(request.headers.get("Gpulease-Delivery")).toBe(delivery_id);
    expect(JSON.parse(request.body)).toMatchObject({ type: "ping", id: expect.stringMatching(/^evt_/) });
    const log = await api(`/v1/webhooks/${hook.id}/deliveries?limit=5`);
    expect(((await log.json()) as { deliveries: unknown[] }).deliveries).toEqual([
      expect.objectContaining({
        id: delivery_id,
        event: "ping",
        status: "delivered",
        attempts: 1,
        last_status_code: 204,
      }),
    ]);
    expect((await api(`/v1/webhooks/${hook.id}/deliveries?limit=0`)).status).toBe(400);
  });
});

describe("lease events reach webhooks", () => {
  it("a sim lease that runs and is stopped enqueues lease.running and lease.stopped with the lease", async () => {
    const cloud = simCloud(env.SIM_CLOUD);
    await cloud.reset();
    await cloud.configure({ bootSeconds: 0, readySeconds: 0, lingerSeconds: 0, creditUsd: 1000 });
    const hook = (await (
      await createHook({ url: "https://hooks.example.com/l", events: ["lease.running", "lease.stopped"] })
    ).json()) as { id: string };
    const rent = await api("/v1/leases", {
      method: "POST",
      json: { provider: "sim", gpu: "4090", max_minutes: 30, env: { SECRET_THING: "do-not-send" } },
    });
    expect(rent.status).toBe(202);
    const lease = (await rent.json()) as Lease;
    const keeper = env.LEASE_KEEPER.getByName(lease.id);
    const statusOf = async () => ((await (await api(`/v1/leases/${lease.id}`)).json()) as Lease).status;
    for (let i = 0; i < 20 && (await statusOf()) !== "running"; i++) await runDurableObjectAlarm(keeper);
    expect(await statusOf()).toBe("running");
    expect((await api(`/v1/leases/${lease.id}/stop`, { method: "POST" })).status).toBe(200);
    for (let i = 0; i < 20 && (await statusOf()) !== "stopped"; i++) await runDurableObjectAlarm(keeper);
    expect(await statusOf()).toBe("stopped");

    // The keeper woke the sender; it delivers from its own alarm.
    await drainOutbox(2);
    const texts = received.map((r) => r.body);
    for (const text of texts) {
      expect(text).not.toContain("do-not-send");
      expect(text).not.toContain(ADMIN_TOKEN);
    }
    const bodies = texts.map((t) => JSON.parse(t) as { type: string; data: { lease: Lease } });
    expect(bodies.map((b) => b.type).sort()).toEqual(["lease.running", "lease.stopped"]);
    for (const body of bodies) expect(body.data.lease.id).toBe(lease.id);
    const log = (await (await api(`/v1/webhooks/${hook.id}/deliveries`)).json()) as {
      deliveries: { status: string }[];
    };
    expect(log.deliveries.map((d) => d.status)).toEqual(["delivered", "delivered"]);
  });
});
