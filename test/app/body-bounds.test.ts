import { describe, expect, it } from "vitest";
import { apiRequest, errorBody, workerFetch } from "../helpers";

// Every body the worker reads has a bound (README "Security"): a stream that never ends is cut
// at the bound with a 400 in the error envelope, having read at most the bound.

const MIB = 1024 * 1024;

/** A 64 MiB body sent as a stream (no Content-Length), counting what the worker pulled. */
function endlessBody(fill: string): { body: ReadableStream<Uint8Array>; pulled: () => number } {
  let pulled = 0;
  const chunk = new TextEncoder().encode(fill.repeat(64 * 1024));
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (pulled >= 64 * MIB) return controller.close();
      pulled += chunk.length;
      controller.enqueue(chunk);
    },
  });
  return { body, pulled: () => pulled };
}

const streamed = (path: string, init: RequestInit & { token?: string | null }, body: ReadableStream<Uint8Array>) =>
  apiRequest(path, { ...init, body, duplex: "half" } as RequestInit);

describe("request bodies are bounded", () => {
  it("an unauthenticated POST /login with a 64 MiB form is refused, having read at most 64 KiB more than its bound", async () => {
    const { body, pulled } = endlessBody("a");
    const request = streamed(
      "/login",
      {
        method: "POST",
        token: null,
        headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: "http://gpulease.test" },
      },
      body,
    );
    const res = await workerFetch(request);
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(res.status).toBeLessThan(500);
    expect(pulled()).toBeLessThanOrEqual(128 * 1024);
  });

  it("POST /v1/leases with a 64 MiB JSON body is a 400 envelope, read only up to 1 MiB", async () => {
    const { body, pulled } = endlessBody(" ");
    const res = await workerFetch(
      streamed("/v1/leases", { method: "POST", headers: { "Content-Type": "application/json" } }, body),
    );
    expect(res.status).toBe(400);
    expect((await errorBody(res)).error).toContain("larger than");
    expect(pulled()).toBeLessThanOrEqual(MIB + 64 * 1024);
  });

  it("a declared Content-Length over the bound is refused before any byte is read", async () => {
    const res = await workerFetch(
      apiRequest("/v1/leases", {
        method: "POST",
        headers: { "Content-Type": "application/json", "Content-Length": String(2 * MIB) },
        body: " ".repeat(2 * MIB),
      }),
    );
    expect(res.status).toBe(400);
    expect((await errorBody(res)).error).toContain("larger than");
  });
});
