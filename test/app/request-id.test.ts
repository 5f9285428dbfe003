import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, type MockInstance, vi } from "vitest";
import { ADMIN_TOKEN, apiViaSelf as api, errorBody, PROVIDER_SECRETS } from "../helpers";

const GENERATED = /^req_[0-9a-f]{32}$/;

describe("X-Request-Id", () => {
  it("names every response, with a fresh id per request", async () => {
    const first = await api("/health", { token: null });
    const second = await api("/health", { token: null });
    expect(first.headers.get("X-Request-Id")).toMatch(GENERATED);
    expect(second.headers.get("X-Request-Id")).toMatch(GENERATED);
    expect(first.headers.get("X-Request-Id")).not.toBe(second.headers.get("X-Request-Id"));
  });

  it("keeps a caller's sane id, on success and on error", async () => {
    const ok = await api("/v1/leases", { headers: { "X-Request-Id": "ci-run-42.step:3" } });
    expect(ok.status).toBe(200);
    expect(ok.headers.get("X-Request-Id")).toBe("ci-run-42.step:3");
    const missing = await api("/v1/leases/lse_00000000000000000000000000", {
      headers: { "X-Request-Id": "trace=abc" },
    });
    expect(missing.headers.get("X-Request-Id")).toBe("trace=abc");
    expect((await errorBody(missing)).code).toBe("not_found");
  });

  it("replaces an id that is too long or carries anything but plain characters", async () => {
    for (const sent of ["x".repeat(129), "a b", "<script>", "id;drop"]) {
      const res = await api("/health", { token: null, headers: { "X-Request-Id": sent } });
      expect(res.headers.get("X-Request-Id"), sent).toMatch(GENERATED);
    }
  });

  it("is in every error body: 400, 401 and 404 alike", async () => {
    const answers = [
      await api("/v1/leases", { method: "POST", json: { max_minutes: -1 } }),
      await api("/v1/leases", { token: "wrong" }),
      await api("/nowhere", { token: null }),
      await api("/v1/offers?limit=abc"),
    ];
    for (const res of answers) {
      const body = (await errorBody(res)) as { request_id?: string };
      expect(res.status).toBeGreaterThanOrEqual(400);
      expect(body.request_id, `${res.status}`).toBe(res.headers.get("X-Request-Id"));
    }
  });
});

describe("the request's log lines", () => {
  let spies: MockInstance[] = [];
  afterEach(() => {
    for (const spy of spies) spy.mockRestore();
    spies = [];
  });

  it("are objects carrying its request_id, scrubbed of every secret", async () => {
    const lines: unknown[] = [];
    for (const method of ["log", "warn", "error"] as const) {
      spies.push(vi.spyOn(console, method).mockImplementation((line: unknown) => void lines.push(line)));
    }
    // D1 fails with a message that quotes the admin token and a provider key: an unexpected error.
    spies.push(
      vi.spyOn(env.DB, "prepare").mockImplementation(() => {
        throw new Error(`D1 exploded near ${ADMIN_TOKEN} and ${PROVIDER_SECRETS[1]}`);
      }),
    );
    const res = await api("/v1/leases", { headers: { "X-Request-Id": "report-me-1" } });
    expect(res.status).toBe(500);
    expect(await errorBody(res)).toMatchObject({ code: "internal", request_id: "report-me-1" });
    expect(lines).toEqual([
      expect.objectContaining({
        level: "error",
        event: "internal_error",
        request_id: "report-me-1",
        path: "/v1/leases",
      }),
    ]);
    const text = JSON.stringify(lines);
    for (const secret of [ADMIN_TOKEN, ...PROVIDER_SECRETS]) expect(text).not.toContain(secret);
    expect(text).toContain("[redacted]");
  });
});
