import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import { createApp } from "../../src/app";
import { sha256Hex } from "../../src/lib/crypto";
import { iso } from "../../src/lib/time";
import { issueToken } from "../auth/tokens-helper";
import { errorBody } from "../helpers";
import { browse, freshAddress, ORIGIN } from "./support";

const postLogin = (token: string, address: string, headers: Record<string, string> = {}) =>
  browse("/login", { form: { token, next: "/" }, headers: { "CF-Connecting-IP": address, ...headers } });

function expectRetryAfter(res: Response): number {
  const seconds = Number(res.headers.get("Retry-After"));
  expect(Number.isInteger(seconds)).toBe(true);
  expect(seconds).toBeGreaterThanOrEqual(1);
  expect(seconds).toBeLessThanOrEqual(60);
  return seconds;
}

describe("sign-in is throttled per address", () => {
  it("ten attempts a minute, wrong tokens included; then the page again with 429 and Retry-After", async () => {
    const address = freshAddress();
    const { token } = await issueToken(["read"], "guessed");
    for (let i = 0; i < 10; i++) expect((await postLogin(`gl_guess-${i}`, address)).status).toBe(401);
    // Even the right token is refused now, and no session is opened.
    const res = await postLogin(token, address);
    expect(res.status).toBe(429);
    expectRetryAfter(res);
    expect(res.headers.get("Set-Cookie")).toBeNull();
    expect(res.headers.get("Content-Type")).toContain("text/html");
    const html = await res.text();
    expect(html).toContain("Too many sign-ins from this address");
    expect(html).toMatch(/<input[^>]*name="token"/);
    // Another address is not held up.
    expect((await postLogin(token, freshAddress())).status).toBe(303);
  });

  it("answers an API-style request with the error envelope", async () => {
    const address = freshAddress();
    for (let i = 0; i < 10; i++) await postLogin("gl_wrong", address);
    const res = await postLogin("gl_wrong", address, { Accept: "application/json" });
    expect(res.status).toBe(429);
    const seconds = expectRetryAfter(res);
    const body = await errorBody(res);
    expect(body).toMatchObject({ code: "rate_limited", retry_after: seconds });
    expect(body.error).toContain("from this address");
  });
});

describe("sign-in is throttled per token", () => {
  it("five sessions a minute with one token, whatever the address", async () => {
    const { token } = await issueToken(["read"], "busy");
    for (let i = 0; i < 5; i++) expect((await postLogin(token, freshAddress())).status).toBe(303);
    const res = await postLogin(token, freshAddress());
    expect(res.status).toBe(429);
    expectRetryAfter(res);
    expect(res.headers.get("Set-Cookie")).toBeNull();
    expect(await res.text()).toContain("Too many sign-ins with this token");
    // Another token has its own budget.
    const other = await issueToken(["read"], "calm");
    expect((await postLogin(other.token, freshAddress())).status).toBe(303);
  });
});

describe("live sessions per token", () => {
  const count = async (tokenId: string) =>
    (
      await env.DB.prepare("SELECT COUNT(*) AS n FROM dashboard_sessions WHERE token_id = ?")
        .bind(tokenId)
        .first<{ n: number }>()
    )?.n;

  it("are at most ten: signing in once more ends the oldest", async () => {
    const { id, token } = await issueToken(["read"], "many-browsers");
    // Nine sessions opened over the last hours (more than a minute's sign-ins could make).
    const now = Date.now();
    const cookies = Array.from({ length: 9 }, (_, i) => `seeded-session-cookie-${id}-${i}`);
    await env.DB.batch(
      await Promise.all(
        cookies.map(async (cookie, i) =>
          env.DB.prepare(
            "INSERT INTO dashboard_sessions (id_hash, token_id, admin_digest, csrf, created_at, expires_at) VALUES (?, ?, NULL, 'csrf', ?, ?)",
          ).bind(await sha256Hex(cookie), id, iso(now - (9 - i) * 600_000), iso(now + 3_600_000)),
        ),
      ),
    );
    const page = (cookie: string) => browse("/", { cookie });
    expect((await page(cookies[0]!)).status).toBe(200);
    expect((await postLogin(token, freshAddress())).status).toBe(303);
    expect(await count(id)).toBe(10);
    expect((await page(cookies[0]!)).status).toBe(200);

    const newest = /gpulease_session=([^;]+)/.exec(
      (await postLogin(token, freshAddress())).headers.get("Set-Cookie") ?? "",
    )?.[1];
    expect(await count(id)).toBe(10);
    const oldest = await page(cookies[0]!);
    expect(oldest.status).toBe(303);
    expect(oldest.headers.get("Location")).toMatch(/^\/login\?.*expired=1/);
    expect((await page(cookies[1]!)).status).toBe(200);
    expect((await page(newest ?? "")).status).toBe(200);
  });
});

describe("an unreachable limiter", () => {
  it("lets sign-in through, logged: the session cap still bounds the rows", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    const unreachable = {
      getByName: () => ({ admit: () => Promise.reject(new Error("Durable Object is overloaded")) }),
    };
    const { token } = await issueToken(["read"], "limiter-down");
    const res = await createApp().fetch(
      new Request(`${ORIGIN}/login`, {
        method: "POST",
        headers: { Origin: ORIGIN, "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token, next: "/" }),
        redirect: "manual",
      }),
      { ...env, RATE_LIMITER: unreachable },
    );
    expect(res.status).toBe(303);
    expect(logged).toHaveBeenCalledWith(
      expect.objectContaining({ event: "rate_limiter_unavailable", outcome: "sign-in let through" }),
    );
    logged.mockRestore();
  });
});
