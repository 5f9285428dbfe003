import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { createApp } from "../../src/app";
import { ConfigError, loadConfig } from "../../src/config";
import { createRouter } from "../../src/router";
import { ADMIN_TOKEN, api, errorBody, PROVIDER_SECRETS } from "../helpers";

describe("health and docs", () => {
  it("GET /health answers without a token", async () => {
    const res = await api("/health", { token: null });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true, version: expect.stringMatching(/^\d+\.\d+\.\d+$/) });
  });

  it("GET /docs serves the interactive reference pointing at /openapi.json", async () => {
    const res = await api("/docs", { token: null });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/html");
    expect(await res.text()).toContain("/openapi.json");
  });
});

describe("authentication", () => {
  it("answers 401 in the envelope without a token", async () => {
    const res = await api("/v1/anything", { token: null });
    expect(res.status).toBe(401);
    expect(res.headers.get("www-authenticate")).toContain("Bearer");
    expect(await errorBody(res)).toMatchObject({ code: "unauthorized" });
  });

  it("answers 401 for a wrong token, also one that shares the admin token's prefix", async () => {
    for (const token of ["nope", ADMIN_TOKEN.slice(0, -1), `${ADMIN_TOKEN}x`, "gl_unknownunknownunknownunknown"]) {
      const res = await api("/v1/leases", { token });
      expect(res.status, token).toBe(401);
      expect((await errorBody(res)).code).toBe("unauthorized");
    }
  });

  it("answers 401 for a malformed Authorization header", async () => {
    const res = await api("/v1/leases", { token: null, headers: { Authorization: "Basic abc" } });
    expect(res.status).toBe(401);
  });

  it("lets the admin token through to the router (404 for an unknown /v1 route)", async () => {
    const res = await api("/v1/anything");
    expect(res.status).toBe(404);
    expect(await errorBody(res)).toMatchObject({ code: "not_found" });
  });
});

describe("error envelope", () => {
  it("answers 404 not_found for unknown routes outside /v1", async () => {
    const res = await api("/nope", { token: null });
    expect(res.status).toBe(404);
    expect(await errorBody(res)).toEqual({
      error: "no route for GET /nope",
      code: "not_found",
      request_id: res.headers.get("X-Request-Id"),
    });
  });

  it("answers 400 invalid_request with issues naming the fields", async () => {
    const app = createApp();
    app.route(
      "/",
      createRouter().openapi(
        {
          method: "post",
          path: "/echo",
          request: {
            body: {
              content: {
                "application/json": {
                  schema: z.object({ max_minutes: z.number().int().max(10080), name: z.string() }),
                },
              },
              required: true,
            },
          },
          responses: { 200: { description: "ok" } },
        },
        (c) => c.json({ ok: true }, 200),
      ),
    );
    const res = await app.request(
      "/echo",
      { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ max_minutes: 99999 }) },
      env,
    );
    expect(res.status).toBe(400);
    const body = await errorBody(res);
    expect(body.code).toBe("invalid_request");
    expect(body.issues?.map((i) => i.path).sort()).toEqual(["max_minutes", "name"]);

    const notJson = await app.request(
      "/echo",
      { method: "POST", headers: { "Content-Type": "application/json" }, body: "{not json" },
      env,
    );
    expect(notJson.status).toBe(400);
    expect((await errorBody(notJson)).code).toBe("invalid_request");
  });

  it("answers 500 internal without stack trace or secret, and logs a scrubbed line", async () => {
    const logged: string[] = [];
    const spy = vi.spyOn(console, "error").mockImplementation((...args: unknown[]) => {
      logged.push(args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" "));
    });
    const app = createApp();
    app.get("/boom", () => {
      throw new Error(`provider said: Authorization: Bearer ${PROVIDER_SECRETS[0]} and admin ${ADMIN_TOKEN}`);
    });
    const res = await app.request("/boom", {}, env);
    spy.mockRestore();
    expect(res.status).toBe(500);
    const raw = await res.text();
    const requestId = res.headers.get("X-Request-Id");
    expect(JSON.parse(raw)).toEqual({
      error: "internal error; the request was logged",
      code: "internal",
      request_id: requestId,
    });
    expect(raw).not.toMatch(/at .*\.ts|Error:/);
    expect(logged.map((line) => JSON.parse(line))).toEqual([
      expect.objectContaining({ level: "error", event: "internal_error", path: "/boom", request_id: requestId }),
    ]);
    for (const secret of [...PROVIDER_SECRETS, ADMIN_TOKEN]) {
      expect(raw).not.toContain(secret);
      expect(logged.join("\n")).not.toContain(secret);
    }
  });
});

describe("config", () => {
  it("names the malformed var", () => {
    expect(() => loadConfig({ ...env, POLL_INTERVAL_S: "abc" })).toThrow(ConfigError);
    expect(() => loadConfig({ ...env, POLL_INTERVAL_S: "abc" })).toThrow(/POLL_INTERVAL_S/);
    expect(() => loadConfig({ ...env, REAPER_MODE: "delete-everything" })).toThrow(/REAPER_MODE/);
    expect(() => loadConfig({ ...env, VAST_API_URL: "ftp://x" })).toThrow(/VAST_API_URL/);
    expect(() => loadConfig({ ...env, BUDGET_DAILY_USD: "-3" })).toThrow(/BUDGET_DAILY_USD/);
  });

  it("never echoes a secret's value", () => {
    try {
      loadConfig({ ...env, EUR_USD: "x", ADMIN_TOKEN: ADMIN_TOKEN });
    } catch (err) {
      expect(String(err)).not.toContain(ADMIN_TOKEN);
    }
  });

  it("reads defaults, unset budgets and plain-HTTP loopback provider URLs", () => {
    const config = loadConfig({
      ...env,
      BUDGET_DAILY_USD: "",
      VAST_API_URL: "http://127.0.0.1:9001/",
      POLL_INTERVAL_S: undefined,
    });
    expect(config.pollIntervalS).toBe(10);
    expect(config.budgetDailyUsd).toBeNull();
    expect(config.vastApiUrl).toBe("http://127.0.0.1:9001");
    expect(config.secrets.adminToken).toBe(ADMIN_TOKEN);
  });

  it("turns a malformed var into a 503 config_invalid that names it", async () => {
    const app = createApp();
    const spy = vi.spyOn(console, "error").mockImplementation(() => {});
    const res = await app.request("/health", {}, { ...env, MAX_ACTIVE_LEASES: "many" });
    spy.mockRestore();
    expect(res.status).toBe(503);
    expect(await errorBody(res)).toMatchObject({
      code: "config_invalid",
      error: expect.stringContaining("MAX_ACTIVE_LEASES"),
    });
  });
});
