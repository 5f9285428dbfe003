import { describe, expect, it } from "vitest";
// @ts-expect-error: the CLI is plain ESM checked through JSDoc, with no declarations for the test project
import { patientFetch } from "../../cli/api.mjs";

type Fetch = (input: RequestInfo | URL, init?: RequestInit) => Promise<Response>;

/** A worker that answers 429 with these Retry-After values first, then 200; it records what it got. */
function limitedWorker(retryAfters: (string | null)[]) {
  const seen: { method: string; body: string }[] = [];
  const send = async (request: Request) => {
    seen.push({ method: request.method, body: await request.text() });
    const next = retryAfters.shift();
    if (next === undefined) return new Response('{"ok":true}', { status: 200 });
    const headers: Record<string, string> = next === null ? {} : { "Retry-After": next };
    return new Response('{"code":"rate_limited"}', { status: 429, headers });
  };
  return { seen, send };
}

describe("patientFetch: the CLI waits out a 429", () => {
  it("waits each Retry-After (a note each time), sends the same request again, body included", async () => {
    const worker = limitedWorker(["3", "1"]);
    const waits: number[] = [];
    const notes: string[] = [];
    const fetcher: Fetch = patientFetch(
      worker.send,
      (note: string) => notes.push(note),
      async (ms: number) => {
        waits.push(ms);
      },
    );
    const res = await fetcher("http://worker.test/v1/leases", { method: "POST", body: '{"gpu":"4090"}' });
    expect(res.status).toBe(200);
    expect(waits).toEqual([3000, 1000]);
    expect(notes).toHaveLength(2);
    expect(notes[0]).toMatch(/rate limited.*3 s.*Retry-After/);
    expect(worker.seen).toEqual([
      { method: "POST", body: '{"gpu":"4090"}' },
      { method: "POST", body: '{"gpu":"4090"}' },
      { method: "POST", body: '{"gpu":"4090"}' },
    ]);
  });

  it("a missing or unreadable Retry-After waits 1 s; an HTTP date waits until then", async () => {
    const at = new Date(Date.now() + 5_000).toUTCString();
    const worker = limitedWorker([null, "soon", at]);
    const waits: number[] = [];
    const fetcher: Fetch = patientFetch(
      worker.send,
      () => {},
      async (ms: number) => {
        waits.push(ms);
      },
    );
    expect((await fetcher("http://worker.test/v1/leases")).status).toBe(200);
    expect(waits.slice(0, 2)).toEqual([1000, 1000]);
    expect(waits[2]).toBeGreaterThanOrEqual(4000);
    expect(waits[2]).toBeLessThanOrEqual(6000);
  });

  it("gives the 429 back after 20 waits, and passes every other status on at once", async () => {
    const endless = limitedWorker(Array.from({ length: 50 }, () => "1"));
    const fetcher: Fetch = patientFetch(
      endless.send,
      () => {},
      async () => {},
    );
    expect((await fetcher("http://worker.test/v1/leases")).status).toBe(429);
    expect(endless.seen).toHaveLength(21);
    const failing: Fetch = patientFetch(
      async () => new Response("no", { status: 503 }),
      () => {},
      async () => {
        throw new Error("must not wait");
      },
    );
    expect((await failing("http://worker.test/v1/leases")).status).toBe(503);
  });
});
