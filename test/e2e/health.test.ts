import { expect, inject, test } from "vitest";

test("the local worker answers /health and authorises the admin token", async () => {
  const { baseUrl: base, adminToken } = inject("workers").cli;
  const health = await fetch(`${base}/health`);
  expect(health.status).toBe(200);
  expect(await health.json()).toMatchObject({ ok: true });
  const account = await fetch(`${base}/v1/account`, { headers: { Authorization: `Bearer ${adminToken}` } });
  expect(account.status).toBe(200);
});
