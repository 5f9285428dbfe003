import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { createApp } from "../../src/app";
import { issueToken } from "../auth/tokens-helper";
import { ADMIN_TOKEN, api } from "../helpers";
import { browse, csrfOf, ORIGIN, signIn } from "./support";

describe("dashboard sign-in", () => {
  it("shows a sign-in form with one field named token", async () => {
    const res = await browse("/login");
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html.match(/<input[^>]*name="token"/g)).toHaveLength(1);
    expect(html).toContain('action="/login"');
  });

  it("sends a visitor without a session to sign-in, keeping where they were going", async () => {
    const res = await browse("/offers?gpu=4090");
    expect(res.status).toBe(303);
    expect(res.headers.get("Location")).toBe(`/login?next=${encodeURIComponent("/offers?gpu=4090")}`);
  });

  it("refuses an unknown token without setting a cookie", async () => {
    const res = await browse("/login", { form: { token: "gl_not-a-real-token" } });
    expect(res.status).toBe(401);
    expect(res.headers.get("Set-Cookie")).toBeNull();
    expect(await res.text()).toContain("unknown or has been revoked");
  });

  it("sets an HttpOnly, SameSite=Strict, Secure session cookie for the admin token", async () => {
    const { setCookie, cookie } = await signIn(ADMIN_TOKEN);
    expect(setCookie).toMatch(/HttpOnly/i);
    expect(setCookie).toMatch(/SameSite=Strict/i);
    expect(setCookie).toMatch(/Secure/i);
    expect(setCookie).toMatch(/Path=\//);
    expect(cookie).not.toContain(ADMIN_TOKEN);
    const page = await browse("/", { cookie });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("<h1>Leases</h1>");
  });

  it("leaves Secure off on localhost, where browsers would drop it over http", async () => {
    for (const origin of ["http://localhost:8787", "http://127.0.0.1:8787"]) {
      const { setCookie } = await signIn(ADMIN_TOKEN, origin);
      expect(setCookie).toMatch(/HttpOnly/i);
      expect(setCookie).toMatch(/SameSite=Strict/i);
      expect(setCookie).not.toMatch(/Secure/i);
    }
  });

  it("only follows a same-site path after sign-in", async () => {
    // test/dashboard/next.test.ts tries many more spellings
    const { token } = await issueToken(["read"], "next");
    for (const next of ["//evil.example/", "https://evil.example/", "/\\evil.example"]) {
      const res = await browse("/login", { form: { token, next } });
      expect(res.headers.get("Location")).toBe("/");
    }
    const res = await browse("/login", { form: { token, next: "/reaper" } });
    expect(res.headers.get("Location")).toBe("/reaper");
  });

  it("sign-out ends the session on the server, not just in the browser", async () => {
    const { cookie } = await signIn();
    const csrf = await csrfOf(cookie);
    const out = await browse("/logout", { cookie, form: { _csrf: csrf } });
    expect(out.status).toBe(303);
    expect(out.headers.get("Location")).toBe("/login");
    expect(out.headers.get("Set-Cookie")).toMatch(/gpulease_session=;.*Max-Age=0/i);
    const again = await browse("/", { cookie });
    expect(again.status).toBe(303);
    expect(again.headers.get("Location")).toMatch(/^\/login\?.*expired=1/);
  });
});

describe("a session is bound to its token", () => {
  it("revoking the token ends its sessions at once", async () => {
    const token = await issueToken(["read", "stop"], "revoke-me");
    const { cookie } = await signIn(token.token);
    expect((await browse("/", { cookie })).status).toBe(200);
    expect((await api(`/v1/tokens/${token.id}`, { method: "DELETE" })).status).toBe(200);
    const res = await browse("/", { cookie });
    expect(res.status).toBe(303);
    expect(res.headers.get("Location")).toMatch(/^\/login\?.*expired=1/);
  });

  it("the live stream tells a page whose token was revoked to sign in again", async () => {
    const token = await issueToken(["read"], "live-revoked");
    const { cookie } = await signIn(token.token);
    await api(`/v1/tokens/${token.id}`, { method: "DELETE" });
    const res = await browse("/live", { cookie });
    expect(res.headers.get("Content-Type")).toContain("text/event-stream");
    expect(await res.text()).toContain("event: ended");
  });

  it("an ADMIN_TOKEN session ends when the secret changes", async () => {
    const { cookie } = await signIn(ADMIN_TOKEN);
    const request = () =>
      new Request(`${ORIGIN}/`, { headers: { Cookie: `gpulease_session=${cookie}` }, redirect: "manual" });
    const same = await createApp().fetch(request(), env);
    expect(same.status).toBe(200);
    const rotated = await createApp().fetch(request(), { ...env, ADMIN_TOKEN: "a-new-admin-secret-0123456789" });
    expect(rotated.status).toBe(303);
    expect(rotated.headers.get("Location")).toMatch(/^\/login/);
    // ended for good: the old secret does not bring it back
    expect((await createApp().fetch(request(), env)).status).toBe(303);
  });

  it("a read-only token sees no Stop, rent or stop-all control, and cannot stop through the dashboard", async () => {
    const rented = await api("/v1/leases", { method: "POST", json: { provider: "sim", gpu: "4090", max_minutes: 30 } });
    expect(rented.status).toBe(202);
    const lease = (await rented.json()) as { id: string };
    const token = await issueToken(["read"], "reader");
    const { cookie } = await signIn(token.token);
    for (const path of ["/", `/leases/${lease.id}`, "/offers"]) {
      const html = await (await browse(path, { cookie })).text();
      expect(html).toContain(path === "/offers" ? "Show offers" : `data-lease-id="${lease.id}"`);
      expect(html).not.toMatch(/>\s*Stop\s*</);
      expect(html).not.toContain("Stop everything");
      expect(html).not.toContain("Rent…");
      expect(html).not.toContain('href="/tokens"');
    }
    const csrf = await csrfOf(cookie);
    const stop = await browse(`/leases/${lease.id}/stop`, { cookie, form: { _csrf: csrf } });
    expect(stop.status).toBe(403);
    expect(await stop.text()).toContain("stop");
    const after = (await (await api(`/v1/leases/${lease.id}`)).json()) as { status: string };
    expect(after.status).not.toMatch(/stopping|stopped/);
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
  });

  it("the tokens page is the admin's only", async () => {
    const token = await issueToken(["read", "rent", "stop"], "no-admin");
    const { cookie } = await signIn(token.token);
    const res = await browse("/tokens", { cookie });
    expect(res.status).toBe(403);
    expect(await res.text()).not.toContain("Create token");
  });
});

describe("cross-site requests", () => {
  it("refuses a state-changing post from another origin, even with the session cookie and its csrf value", async () => {
    const { cookie } = await signIn();
    const csrf = await csrfOf(cookie);
    const res = await browse("/logout", { cookie, form: { _csrf: csrf }, headers: { Origin: "https://evil.example" } });
    expect(res.status).toBe(403);
    expect((await browse("/", { cookie })).status).toBe(200);
  });

  it("refuses a post the browser marks cross-site", async () => {
    const { cookie } = await signIn();
    const csrf = await csrfOf(cookie);
    const res = await browse("/logout", { cookie, form: { _csrf: csrf }, headers: { "Sec-Fetch-Site": "cross-site" } });
    expect(res.status).toBe(403);
  });

  it("refuses a same-origin post without the session's anti-forgery value", async () => {
    const { cookie } = await signIn();
    for (const form of [{}, { _csrf: "forged" }] as Record<string, string>[]) {
      const res = await browse("/stop-all", { cookie, form: { ...form, confirm: "STOP ALL" } });
      expect(res.status).toBe(403);
    }
  });

  it("refuses a sign-in posted from another site (login forgery)", async () => {
    const res = await browse("/login", { form: { token: ADMIN_TOKEN }, headers: { Origin: "https://evil.example" } });
    expect(res.status).toBe(403);
    expect(res.headers.get("Set-Cookie")).toBeNull();
  });

  it("a dashboard session is no API credential", async () => {
    const { cookie } = await signIn();
    const res = await browse("/v1/leases", { cookie });
    expect(res.status).toBe(401);
  });
});
