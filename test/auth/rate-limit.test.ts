import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import { createApp } from "../../src/app";
import type { Scope } from "../../src/services";
import { ADMIN_TOKEN, errorBody } from "../helpers";
import { issueToken } from "./tokens-helper";

const app = createApp();

/** A request with lowered limits (vitest.config.ts sets them high for the other suites). */
function limited(limits: { requests: number; rentals: number }, path: string, token: string, init: RequestInit = {}) {
  const headers = new Headers(init.headers);
  headers.set("Authorization", `Bearer ${token}`);
  if (init.body) headers.set("Content-Type", "application/json");
  return app.request(
    path,
    { ...init, headers },
    {
      ...env,
      RATE_LIMIT_PER_MIN: String(limits.requests),
      RENT_RATE_LIMIT_PER_MIN: String(limits.rentals),
    },
  );
}

async function expectRateLimited(res: Response, token: string) {
  expect(res.status).toBe(429);
  const retryAfter = Number(res.headers.get("Retry-After"));
  expect(Number.isInteger(retryAfter)).toBe(true);
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  expect(retryAfter).toBeLessThanOrEqual(60);
  const body = await errorBody(res);
  expect(body).toMatchObject({ code: "rate_limited", retry_after: retryAfter });
  expect(JSON.stringify(body)).not.toContain(token);
}

async function fresh(scopes: Scope[]) {
  return (await issueToken(scopes)).token;
}

describe("rate limits", () => {
  // First in the file: the admin token's budget is shared by every admin request of this file.
  it("counts the admin token as one token", async () => {
    const limits = { requests: 4, rentals: 4 };
    for (let i = 0; i < 4; i++) expect((await limited(limits, "/v1/tokens", ADMIN_TOKEN)).status).toBe(200);
    await expectRateLimited(await limited(limits, "/v1/tokens", ADMIN_TOKEN), ADMIN_TOKEN);
  });

  it("answers 429 with Retry-After after N requests a minute, per token", async () => {
    const limits = { requests: 5, rentals: 5 };
    const token = await fresh(["admin"]);
    for (let i = 0; i < 5; i++) expect((await limited(limits, "/v1/tokens", token)).status).toBe(200);
    await expectRateLimited(await limited(limits, "/v1/tokens", token), token);
    // A refused request is not counted, but it does not free anything either.
    await expectRateLimited(await limited(limits, "/v1/tokens", token), token);
    // Another token has its own budget.
    const other = await fresh(["admin"]);
    expect((await limited(limits, "/v1/tokens", other)).status).toBe(200);
  });

  it("counts requests refused for scope or unknown routes too", async () => {
    const limits = { requests: 3, rentals: 3 };
    const token = await fresh(["read"]);
    expect((await limited(limits, "/v1/tokens", token)).status).toBe(403);
    expect((await limited(limits, "/v1/no-such-route", token)).status).toBe(404);
    expect((await limited(limits, "/v1/leases", token, { method: "POST", body: "{}" })).status).toBe(403);
    await expectRateLimited(await limited(limits, "/v1/no-such-route", token), token);
  });

  it("answers 429 after N rentals a minute (leases and schedule runs) while other requests still pass", async () => {
    const limits = { requests: 100, rentals: 2 };
    const token = await fresh(["read", "rent"]);
    // Empty bodies fail validation (or meet no route yet): the attempt counts all the same.
    expect((await limited(limits, "/v1/leases", token, { method: "POST", body: "{}" })).status).not.toBe(429);
    expect(
      (await limited(limits, "/v1/schedules/sch_00000000000000000000000000/run", token, { method: "POST" })).status,
    ).not.toBe(429);
    await expectRateLimited(await limited(limits, "/v1/leases", token, { method: "POST", body: "{}" }), token);
    await expectRateLimited(
      await limited(limits, "/v1/schedules/sch_00000000000000000000000000/run", token, { method: "POST" }),
      token,
    );
    expect((await limited(limits, "/v1/no-such-route", token)).status).toBe(404);
  });

  it("does not count a 401: unauthenticated requests consume no budget", async () => {
    const limits = { requests: 3, rentals: 3 };
    const token = await fresh(["admin"]);
    const revoked = await issueToken(["admin"]);
    await app.request(
      `/v1/tokens/${revoked.id}`,
      { method: "DELETE", headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } },
      env,
    );
    for (const bad of [`${token}x`, token.slice(0, -1), revoked.token, "gl_unknown", "nope"]) {
      for (let i = 0; i < 4; i++) expect((await limited(limits, "/v1/tokens", bad)).status, bad).toBe(401);
    }
    for (let i = 0; i < 3; i++) expect((await limited(limits, "/v1/tokens", token)).status).toBe(200);
    await expectRateLimited(await limited(limits, "/v1/tokens", token), token);
  });

  it("fails open, logged, when the limiter cannot be reached", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    const unreachable = {
      getByName: () => ({ admit: () => Promise.reject(new Error("Durable Object is overloaded")) }),
    };
    const res = await app.request(
      "/v1/tokens",
      { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } },
      { ...env, RATE_LIMITER: unreachable },
    );
    expect(res.status).toBe(200);
    expect(logged).toHaveBeenCalledWith(
      expect.objectContaining({
        level: "error",
        event: "rate_limiter_unavailable",
        error: "Error: Durable Object is overloaded",
        request_id: res.headers.get("X-Request-Id"),
      }),
    );
    logged.mockRestore();
  });
});
