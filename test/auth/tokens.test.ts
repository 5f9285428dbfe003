import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import { sha256Hex } from "../../src/lib/crypto";
import { createServices } from "../../src/services";
import { ADMIN_TOKEN, api, errorBody } from "../helpers";
import { issueToken } from "./tokens-helper";

interface ListedToken {
  id: string;
  name: string;
  scopes: string[];
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

async function listTokens(): Promise<ListedToken[]> {
  const res = await api("/v1/tokens");
  expect(res.status).toBe(200);
  return ((await res.json()) as { tokens: ListedToken[] }).tokens;
}

async function storedRow(id: string): Promise<Record<string, unknown>> {
  const row = await env.DB.prepare("SELECT * FROM tokens WHERE id = ?").bind(id).first();
  expect(row).not.toBeNull();
  return row!;
}

describe("POST /v1/tokens", () => {
  it("answers 201 with a gl_ token of at least 32 random bytes, shown once", async () => {
    const res = await api("/v1/tokens", {
      method: "POST",
      json: { name: "nightly-batch", scopes: ["read", "rent", "stop"] },
    });
    expect(res.status).toBe(201);
    const body = (await res.json()) as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(["created_at", "id", "name", "scopes", "token"]);
    expect(body).toMatchObject({
      name: "nightly-batch",
      scopes: ["read", "rent", "stop"],
      id: expect.stringMatching(/^tok_/),
    });
    expect(body.token).toMatch(/^gl_[A-Za-z0-9_-]{43,}$/);
    expect(Date.parse(String(body.created_at))).not.toBeNaN();
    const again = await issueToken(["read"]);
    expect(again.token).not.toBe(body.token);
  });

  it("stores only the SHA-256 of the token", async () => {
    const issued = await issueToken(["read"]);
    const row = await storedRow(issued.id);
    expect(row.token_hash).toBe(await sha256Hex(issued.token));
    expect(JSON.stringify(row)).not.toContain(issued.token);
    expect(JSON.stringify(row)).not.toContain(issued.token.slice(3));
  });

  it("drops repeated scopes", async () => {
    const issued = await issueToken(["read", "read", "stop"]);
    expect(issued.scopes).toEqual(["read", "stop"]);
  });

  it.each([
    [{ scopes: ["read"] }, "name"],
    [{ name: "   ", scopes: ["read"] }, "name"],
    [{ name: "x".repeat(101), scopes: ["read"] }, "name"],
    [{ name: "x" }, "scopes"],
    [{ name: "x", scopes: [] }, "scopes"],
    [{ name: "x", scopes: ["root"] }, "scopes.0"],
    [{ name: "x", scopes: "admin" }, "scopes"],
  ])("answers 400 for %j naming %s", async (json, field) => {
    const res = await api("/v1/tokens", { method: "POST", json });
    expect(res.status).toBe(400);
    const body = await errorBody(res);
    expect(body.code).toBe("invalid_request");
    expect(body.issues?.map((i) => i.path)).toContain(field);
  });

  it("answers 400 for a body that is not JSON", async () => {
    const res = await api("/v1/tokens", { method: "POST", body: "{", headers: { "Content-Type": "application/json" } });
    expect(res.status).toBe(400);
    expect((await errorBody(res)).code).toBe("invalid_request");
  });
});

describe("GET /v1/tokens", () => {
  it("lists tokens newest first with their fields, never a token value or hash", async () => {
    const first = await issueToken(["read"], "first");
    const second = await issueToken(["rent"], "second");
    const tokens = await listTokens();
    const ids = tokens.map((t) => t.id);
    expect(ids.indexOf(second.id)).toBeLessThan(ids.indexOf(first.id));
    expect(tokens.find((t) => t.id === first.id)).toEqual({
      id: first.id,
      name: "first",
      scopes: ["read"],
      created_at: first.created_at,
      last_used_at: null,
      revoked_at: null,
    });
    const text = JSON.stringify(tokens);
    for (const issued of [first, second]) {
      expect(text).not.toContain(issued.token);
      expect(text).not.toContain(await sha256Hex(issued.token));
    }
    expect(text).not.toContain("token_hash");
    expect(text).not.toContain(ADMIN_TOKEN);
  });
});

describe("DELETE /v1/tokens/{id}", () => {
  it("revokes: the token fails with 401 at once and is listed with revoked_at", async () => {
    const issued = await issueToken(["read"]);
    expect((await api("/v1/anything", { token: issued.token })).status).toBe(404);

    const res = await api(`/v1/tokens/${issued.id}`, { method: "DELETE" });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true });

    const refused = await api("/v1/anything", { token: issued.token });
    expect(refused.status).toBe(401);
    const body = await errorBody(refused);
    expect(body.code).toBe("unauthorized");
    expect(JSON.stringify(body)).not.toContain(issued.token);

    const listed = (await listTokens()).find((t) => t.id === issued.id);
    expect(listed?.revoked_at).toEqual(expect.any(String));
  });

  it("is idempotent and keeps the first revocation time", async () => {
    const issued = await issueToken(["read"]);
    await api(`/v1/tokens/${issued.id}`, { method: "DELETE" });
    const before = (await storedRow(issued.id)).revoked_at;
    const again = await api(`/v1/tokens/${issued.id}`, { method: "DELETE" });
    expect(again.status).toBe(200);
    expect((await storedRow(issued.id)).revoked_at).toBe(before);
  });

  it("answers 404 for an unknown or malformed id", async () => {
    for (const id of ["tok_00000000000000000000000000", "tok_0000000000zzzzzzzzzzzz", "nope", "tok_1'%20OR%201=1"]) {
      const res = await api(`/v1/tokens/${id}`, { method: "DELETE" });
      expect(res.status, id).toBe(404);
      expect((await errorBody(res)).code).toBe("not_found");
    }
  });

  it("a revoked admin-scoped token cannot revoke or create anything", async () => {
    const admin = await issueToken(["admin"]);
    const victim = await issueToken(["read"]);
    await api(`/v1/tokens/${admin.id}`, { method: "DELETE" });
    expect((await api(`/v1/tokens/${victim.id}`, { method: "DELETE", token: admin.token })).status).toBe(401);
    expect(
      (await api("/v1/tokens", { method: "POST", json: { name: "x", scopes: ["admin"] }, token: admin.token })).status,
    ).toBe(401);
    expect((await storedRow(victim.id)).revoked_at).toBeNull();
  });
});

describe("last_used_at", () => {
  it("is set on first use and not rewritten within a minute, then rewritten after it", async () => {
    const issued = await issueToken(["read"]);
    expect((await storedRow(issued.id)).last_used_at).toBeNull();

    expect((await api("/v1/anything", { token: issued.token })).status).toBe(404);
    const firstUse = (await storedRow(issued.id)).last_used_at as string;
    expect(Date.parse(firstUse)).not.toBeNaN();

    let now = Date.parse(firstUse) + 59_000;
    const app = createApp({ services: (e) => createServices(e, loadConfig(e), () => now) });
    const call = () => app.request("/v1/anything", { headers: { Authorization: `Bearer ${issued.token}` } }, env);
    expect((await call()).status).toBe(404);
    expect((await storedRow(issued.id)).last_used_at).toBe(firstUse);

    now = Date.parse(firstUse) + 61_000;
    expect((await call()).status).toBe(404);
    expect((await storedRow(issued.id)).last_used_at).toBe(new Date(now).toISOString());
  });

  it("is listed", async () => {
    const issued = await issueToken(["read"]);
    await api("/v1/anything", { token: issued.token });
    const listed = (await listTokens()).find((t) => t.id === issued.id);
    expect(listed?.last_used_at).toEqual(expect.any(String));
  });
});

describe("ADMIN_TOKEN", () => {
  it("stays the bootstrap admin next to issued tokens", async () => {
    await issueToken(["admin"]);
    expect((await api("/v1/tokens")).status).toBe(200);
  });
});
