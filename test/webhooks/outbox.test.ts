import { env } from "cloudflare:workers";
import { beforeEach, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config";
import { createServices } from "../../src/services";
import { afterFailure, enqueue, FIRST_RETRY_MS, RETRY_FOR_MS, retryGapMs } from "../../src/webhooks/outbox";
import { deliverDue, type Fetch } from "../../src/webhooks/sender";
import { api, PROVIDER_SECRETS } from "../helpers";
import { emptyTables, WEBHOOK_TABLES } from "../support/fresh";

describe("backoff", () => {
  it("retries first within a minute, then doubles up to 4 hours", () => {
    expect(retryGapMs(1)).toBe(FIRST_RETRY_MS);
    expect(retryGapMs(1)).toBeLessThanOrEqual(60_000);
    expect([2, 3, 4].map(retryGapMs)).toEqual([60_000, 120_000, 240_000]);
    expect(retryGapMs(30)).toBe(4 * 3_600_000);
  });

  it("keeps a delivery pending for at least 24 hours, then fails it", () => {
    const created = 0;
    let at = created;
    let attempts = 0;
    for (;;) {
      attempts++;
      const next = afterFailure(created, attempts, at);
      if (next.status === "failed") break;
      at = next.nextAttemptAt;
    }
    expect(at - created).toBeGreaterThanOrEqual(RETRY_FOR_MS);
    expect(attempts).toBeGreaterThan(10);
    expect(attempts).toBeLessThan(30);
  });
});

let now = Date.parse("2031-05-01T00:00:00Z");
const services = () => createServices(env, loadConfig(env), () => now);

interface Sent {
  url: string;
  headers: Record<string, string>;
  body: string;
}

/** A receiver that answers with the statuses given, in turn (then 200), and keeps what it got. */
function receiver(statuses: (number | "hang")[] = []) {
  const sent: Sent[] = [];
  const send: Fetch = async (request) => {
    sent.push({
      url: request.url,
      headers: Object.fromEntries(request.headers.entries()),
      body: await request.text(),
    });
    const status = statuses.shift() ?? 200;
    if (status === "hang") throw new DOMException("The operation timed out.", "TimeoutError");
    return new Response("ok", { status });
  };
  return { sent, send };
}

async function createHook(body: Record<string, unknown>): Promise<{ id: string; secret: string }> {
  const res = await api("/v1/webhooks", { method: "POST", json: body });
  expect(res.status).toBe(201);
  return (await res.json()) as { id: string; secret: string };
}

async function deliveries(hookId: string) {
  const res = await api(`/v1/webhooks/${hookId}/deliveries`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { deliveries: { id: string; status: string; attempts: number; event: string }[] })
    .deliveries;
}

beforeEach(async () => {
  now += 86_400_000 * 3;
  // Earlier tests' webhooks would receive this test's events too.
  await emptyTables(WEBHOOK_TABLES);
});

describe("the outbox", () => {
  it("retries a 500 with the same delivery id and signature scheme, then records it delivered", async () => {
    const hook = await createHook({ url: "https://hooks.example.com/a", events: ["budget.exceeded"] });
    await enqueue(
      env.DB,
      { type: "budget.exceeded", leaseId: null, detail: "over", data: { detail: "over" } },
      services().clock(),
    );
    const r = receiver([500]);

    const first = await deliverDue(services(), r.send);
    expect(first).toMatchObject({ attempted: 1, delivered: 0 });
    expect(first.nextAt).toBe(now + FIRST_RETRY_MS);
    expect((await deliveries(hook.id))[0]).toMatchObject({ status: "pending", attempts: 1 });

    // Not due yet: nothing is sent.
    expect((await deliverDue(services(), r.send)).attempted).toBe(0);

    now += FIRST_RETRY_MS;
    const second = await deliverDue(services(), r.send);
    expect(second).toMatchObject({ attempted: 1, delivered: 1, nextAt: null });
    expect(r.sent).toHaveLength(2);
    const [a, b] = r.sent as [Sent, Sent];
    expect(a.headers["gpulease-delivery"]).toMatch(/^dlv_/);
    expect(b.headers["gpulease-delivery"]).toBe(a.headers["gpulease-delivery"]);
    expect(JSON.parse(b.body).id).toBe(JSON.parse(a.body).id);
    expect(b.headers["gpulease-event"]).toBe("budget.exceeded");
    expect(b.headers["gpulease-signature"]).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
    expect((await deliveries(hook.id))[0]).toMatchObject({ status: "delivered", attempts: 2 });
  });

  it("counts no answer within the timeout as a failed try", async () => {
    const hook = await createHook({ url: "https://hooks.example.com/b", events: ["*"] });
    await enqueue(env.DB, { type: "schedule.failed", leaseId: null, detail: "x", data: { detail: "x" } }, now);
    const r = receiver(["hang"]);
    await deliverDue(services(), r.send);
    const [row] = await deliveries(hook.id);
    expect(row).toMatchObject({ status: "pending", attempts: 1 });
    const stored = await env.DB.prepare("SELECT last_error FROM webhook_deliveries").first<{ last_error: string }>();
    expect(stored?.last_error).toMatch(/no answer within 10 s/);
  });

  it("gives up after 24 hours of failures and says so in the log", async () => {
    const hook = await createHook({ url: "https://hooks.example.com/c", events: ["*"] });
    await enqueue(env.DB, { type: "schedule.skipped", leaseId: null, detail: "x", data: {} }, now);
    const dead: Fetch = async () => new Response("down", { status: 503 });
    const start = now;
    let tries = 0;
    for (;;) {
      const round = await deliverDue(services(), dead);
      tries += round.attempted;
      if (round.nextAt === null) break;
      now = round.nextAt;
    }
    expect(now - start).toBeGreaterThanOrEqual(RETRY_FOR_MS);
    const [row] = await deliveries(hook.id);
    expect(row).toMatchObject({ status: "failed", attempts: tries });
  });

  it("only delivers to webhooks that asked for the type", async () => {
    const wants = await createHook({ url: "https://hooks.example.com/d", events: ["schedule.skipped"] });
    const other = await createHook({ url: "https://hooks.example.com/e", events: ["lease.running"] });
    await enqueue(env.DB, { type: "schedule.skipped", leaseId: null, detail: null, data: {} }, now);
    expect(await deliveries(wants.id)).toHaveLength(1);
    expect(await deliveries(other.id)).toHaveLength(0);
  });

  it("never puts a worker secret, the webhook secret or env values in a body", async () => {
    const hook = await createHook({ url: "https://hooks.example.com/f", events: ["*"], format: "json" });
    const slack = await createHook({ url: "https://hooks.example.com/g", events: ["*"], format: "slack" });
    const leaky = `token ${PROVIDER_SECRETS[0]} and ${hook.secret}`;
    await enqueue(
      env.DB,
      {
        type: "schedule.failed",
        leaseId: null,
        detail: leaky,
        data: { detail: leaky, lease: { env: { HF_TOKEN: "hf_secret_value" } } },
      },
      now,
    );
    const r = receiver();
    await deliverDue(services(), r.send);
    expect(r.sent).toHaveLength(2);
    for (const body of r.sent.map((s) => s.body)) {
      expect(body).not.toContain(PROVIDER_SECRETS[0]);
      expect(body).not.toContain(hook.secret);
      expect(body).not.toContain(slack.secret);
      expect(body).not.toContain("hf_secret_value");
    }
    const json = JSON.parse(r.sent.find((s) => s.url.endsWith("/f"))?.body ?? "{}");
    expect(json.data.lease.env).toEqual({ HF_TOKEN: "***" });
    expect(JSON.parse(r.sent.find((s) => s.url.endsWith("/g"))?.body ?? "{}")).toEqual({
      text: expect.stringContaining("schedule run failed"),
    });
  });
});
