import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, expect, inject, test } from "vitest";

const root = join(import.meta.dirname, "..", "..");

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  answered: number;
}

/** The README's verification example, loaded as the module a receiver would write. */
async function readmeVerifier(): Promise<(secret: string, header: string, body: string) => boolean> {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const match = /<!-- verify-webhook-example -->\s*```js\n([\s\S]*?)```/.exec(readme);
  if (!match?.[1]) throw new Error("README has no verify-webhook-example block");
  expect(match[1].trim().split("\n").length).toBeLessThanOrEqual(10);
  const file = join(mkdtempSync(join(tmpdir(), "gpulease-verify-")), "verify.mjs");
  writeFileSync(file, match[1]);
  const module = (await import(pathToFileURL(file).href)) as {
    verifyGpulease: (s: string, h: string, b: string) => boolean;
  };
  return module.verifyGpulease;
}

const { baseUrl: base, adminToken } = inject("workers").webhooks;
const admin = { Authorization: `Bearer ${adminToken}`, "Content-Type": "application/json" };
const received: Received[] = [];
/** Delivery ids that were answered 500 once (the receiver fails each delivery's first try). */
const failedOnce = new Set<string>();
let server: Server;
let hookUrl: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      const id = String(req.headers["gpulease-delivery"]);
      const status = failedOnce.has(id) ? 200 : 500;
      failedOnce.add(id);
      received.push({ headers: req.headers, body, answered: status });
      res.writeHead(status).end(status === 200 ? "ok" : "try again");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  hookUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  await fetch(`${base}/v1/sim/config`, {
    method: "PUT",
    headers: admin,
    // A boot of a minute, as a real provider's is at least: nothing here may depend on a fast one.
    body: JSON.stringify({ boot_seconds: 60, ready_seconds: 1, linger_seconds: 1 }),
  });
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

/** Polls every 2 s: well inside the default 60 requests a minute the suite's worker keeps. */
async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 150_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2_000));
  }
}

test("a receiver on loopback gets every event of a lease, signed, retried after a 500 with the same delivery id", async () => {
  const verify = await readmeVerifier();
  const created = await fetch(`${base}/v1/webhooks`, {
    method: "POST",
    headers: admin,
    body: JSON.stringify({ url: hookUrl, events: ["*"] }),
  });
  expect(created.status).toBe(201);
  const hook = (await created.json()) as { id: string; secret: string };

  const ping = await fetch(`${base}/v1/webhooks/${hook.id}/test`, { method: "POST", headers: admin });
  expect(ping.status).toBe(202);

  const rent = await fetch(`${base}/v1/leases`, {
    method: "POST",
    headers: admin,
    body: JSON.stringify({ provider: "sim", gpu: "4090", max_minutes: 5, env: { HF_TOKEN: "hf_e2e_do_not_send" } }),
  });
  expect(rent.status).toBe(202);
  const lease = (await rent.json()) as { id: string };
  const leaseNow = async () =>
    (await (await fetch(`${base}/v1/leases/${lease.id}`, { headers: admin })).json()) as { status: string };
  await waitFor("running", async () => ((await leaseNow()).status === "running" ? true : undefined));
  await fetch(`${base}/v1/leases/${lease.id}/stop`, { method: "POST", headers: admin });
  await waitFor("stopped", async () => ((await leaseNow()).status === "stopped" ? true : undefined));

  // Each delivery fails once (500), so it is delivered by its retry about 30 s later.
  const wanted = ["ping", "lease.running", "lease.stopped"];
  const log = await waitFor("every delivery delivered", async () => {
    const res = await fetch(`${base}/v1/webhooks/${hook.id}/deliveries`, { headers: admin });
    const { deliveries } = (await res.json()) as {
      deliveries: { id: string; event: string; status: string; attempts: number; last_status_code: number }[];
    };
    const done = deliveries.filter((d) => d.status === "delivered").map((d) => d.event);
    return wanted.every((type) => done.includes(type)) ? deliveries : undefined;
  });

  const byDelivery = new Map<string, Received[]>();
  for (const r of received) {
    const id = String(r.headers["gpulease-delivery"]);
    byDelivery.set(id, [...(byDelivery.get(id) ?? []), r]);
  }
  for (const d of log) {
    const tries = byDelivery.get(d.id) ?? [];
    expect(tries.map((t) => t.answered)).toEqual([500, 200]);
    expect(d).toMatchObject({ status: "delivered", attempts: 2, last_status_code: 200 });
    // Same event, same delivery id on the retry; each try signed anew and verified by the README code.
    expect(new Set(tries.map((t) => JSON.parse(t.body).id)).size).toBe(1);
    for (const t of tries) {
      expect(t.headers["content-type"]).toBe("application/json");
      expect(t.headers["gpulease-event"]).toBe(d.event);
      expect(verify(hook.secret, String(t.headers["gpulease-signature"]), t.body)).toBe(true);
      expect(verify("whsec_wrong", String(t.headers["gpulease-signature"]), t.body)).toBe(false);
      expect(verify(hook.secret, String(t.headers["gpulease-signature"]), `${t.body} `)).toBe(false);
      // The Standard Webhooks signature, verified by the standardwebhooks package as a receiver uses it.
      const standard = {
        "webhook-id": String(t.headers["webhook-id"]),
        "webhook-timestamp": String(t.headers["webhook-timestamp"]),
        "webhook-signature": String(t.headers["webhook-signature"]),
      };
      expect(standard["webhook-id"]).toBe(d.id);
      expect(new Webhook(hook.secret).verify(t.body, standard)).toEqual(JSON.parse(t.body));
      expect(() => new Webhook(hook.secret).verify(`${t.body} `, standard)).toThrow();
      for (const secret of [hook.secret, adminToken, "hf_e2e_do_not_send"]) expect(t.body).not.toContain(secret);
    }
  }
  const stopped = received.find((r) => r.headers["gpulease-event"] === "lease.stopped" && r.answered === 200);
  expect(JSON.parse(stopped?.body ?? "{}")).toMatchObject({
    id: expect.stringMatching(/^evt_/),
    type: "lease.stopped",
    created_at: expect.any(String),
    data: { lease: { id: lease.id, status: "stopped" } },
  });

  const retried = [...byDelivery.values()].filter((tries) => tries.length > 1).length;
  console.log(
    `webhook deliveries: ${log.length} events sent (${log.map((d) => d.event).join(", ")}), ` +
      `${received.length} requests, ${retried} retried after a 500, ${log.filter((d) => d.status === "delivered").length} delivered`,
  );
}, 300_000);
