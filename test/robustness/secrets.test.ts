import { createExecutionContext, createScheduledController, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterAll, beforeAll, beforeEach, describe, expect, it, type MockInstance, vi } from "vitest";
import worker from "../../src/index";
import type { Lease } from "../../src/leases/schema";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VAST_ECHOED_API_KEY, VastFake } from "../fakes/vast";
import { VramfarmFake } from "../fakes/vramfarm";
import { ADMIN_TOKEN, PROVIDER_SECRETS } from "../helpers";
import { batchBody } from "../support/lease";
import { driveUntil, Recorder, TestClock } from "./drive";
import { Faulty } from "./faulty";

/*
 * Secret hygiene: a representative run — tokens, offers, account, rentals at every provider
 * with provider errors that echo the Authorization header and URL, keeper loops, stops, the
 * job's call-back, schedules, the dispatcher, the reaper, stop-all — then everything it left
 * behind is scanned: every response body and header, every lease event, every row of every D1
 * table, every console line of the worker, its Durable Objects and this test. No provider key,
 * no admin token, no issued gl_ token and no call-back token may appear anywhere (except an
 * issued token in the one response that creates it).
 */

const clock = new TestClock(Date.parse("2035-06-01T00:00:00Z"));
const recorder = new Recorder();
const logLines: string[] = [];
const consoleSpies: MockInstance[] = [];
/** gl_ tokens, with the create response that may (only) show each */
const issuedTokens: string[] = [];
const leaseIds = new Set<string>();

let installed: InstalledFakes;
let runpod: RunpodFake;
let vast: VastFake;
let vramfarm: VramfarmFake;
const faulty = {} as { runpod: Faulty; vast: Faulty; vramfarm: Faulty };

const RUNPOD_BODY = { provider: "runpod", gpu: "4090", max_minutes: 60 };
const VAST_BODY = { provider: "vast", gpu: "4090", max_minutes: 60 };
const VRAMFARM_BODY = batchBody("vramfarm");

async function rent(
  body: Record<string, unknown>,
  token?: string,
): Promise<{ status: number; leaseId: string | null; body: string }> {
  const res = await recorder.call("/v1/leases", { method: "POST", json: body, token });
  const parsed = (res.json ?? {}) as { id?: string; lease_id?: string };
  const leaseId = res.status < 300 ? (parsed.id ?? null) : (parsed.lease_id ?? null);
  if (leaseId) leaseIds.add(leaseId);
  return { status: res.status, leaseId, body: res.body };
}

async function runThenStop(leaseId: string, beforeStop?: () => void): Promise<Lease> {
  await driveUntil(clock, recorder, leaseId, ["running", "stopped"]);
  beforeStop?.();
  const lease = await recorder.lease(leaseId);
  if (lease.status === "provisioning" || lease.status === "running")
    await recorder.call(`/v1/leases/${leaseId}/stop`, { method: "POST" });
  return (await driveUntil(clock, recorder, leaseId, ["stopped"])).lease;
}

async function fireCron(cron: "* * * * *" | "*/10 * * * *" | "7 7 7 7 7"): Promise<void> {
  const controller = createScheduledController({ scheduledTime: new Date(clock.now), cron });
  const ctx = createExecutionContext();
  await worker.scheduled(controller, env, ctx);
  await waitOnExecutionContext(ctx);
}

/** The call-back tokens gpulease handed to machines, read from what reached the fakes. */
async function callbackTokensSent(): Promise<string[]> {
  const found = new Set<string>();
  for (const request of Object.values(faulty).flatMap((f) => f.log)) {
    const text = `${request.url}\n${request.body}`;
    for (const match of text.matchAll(/GPULEASE_CALLBACK_TOKEN.{0,40}?([A-Za-z0-9_-]{40,})/g)) found.add(match[1]!);
  }
  return [...found];
}

/** Substrings of a secret long enough to identify it: a cut-off or reformatted secret still shows. */
function fragmentsOf(secret: string, size = 16): string[] {
  if (secret.length <= size) return [secret];
  const out: string[] = [];
  for (let i = 0; i + size <= secret.length; i++) out.push(secret.slice(i, i + size));
  return out;
}

/** Every place a secret may not appear, named, with what is there. */
async function everythingProduced(): Promise<{ where: string; text: string }[]> {
  const out: { where: string; text: string }[] = [];
  for (const ex of recorder.exchanges) {
    out.push({ where: `response ${ex.method} ${ex.path} (${ex.status}) headers`, text: ex.headers });
    // An issued token is shown exactly once, in the response that creates it.
    if (!(ex.method === "POST" && ex.path === "/v1/tokens" && ex.status === 201)) {
      out.push({ where: `response ${ex.method} ${ex.path} (${ex.status}) body`, text: ex.body });
    }
  }
  const tables = await env.DB.prepare(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%' AND name NOT LIKE 'sqlite_%'",
  ).all<{ name: string }>();
  for (const { name } of tables.results) {
    const rows = await env.DB.prepare(`SELECT * FROM "${name.replaceAll('"', '""')}"`).all();
    out.push({ where: `D1 table ${name}`, text: JSON.stringify(rows.results) });
  }
  out.push({ where: "console", text: logLines.join("\n") });
  return out;
}

beforeAll(() => {
  clock.install();
  for (const method of ["log", "info", "warn", "error", "debug"] as const) {
    consoleSpies.push(
      vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
        logLines.push(
          `${method}: ${args.map((a) => (a instanceof Error ? `${a.name}: ${a.message}\n${a.stack ?? ""}` : typeof a === "string" ? a : JSON.stringify(a))).join(" ")}`,
        );
      }),
    );
  }
  // Every error text a provider sends echoes the key it was called with (a careless server).
  runpod = new RunpodFake({ quirks: { echoKeyInErrors: true, bootMs: 20_000, lingerMs: 5_000 } });
  vast = new VastFake({ bootMs: 20_000, lingerMs: 5_000 });
  vramfarm = new VramfarmFake({ bootMs: 20_000 });
  faulty.runpod = new Faulty("runpod", runpod);
  faulty.vast = new Faulty("vast", vast);
  faulty.vramfarm = new Faulty("vramfarm", vramfarm);
  installed = installFakes(faulty.runpod, faulty.vast, faulty.vramfarm);
});

afterAll(() => {
  installed?.restore();
  for (const spy of consoleSpies) spy.mockRestore();
});

describe("a representative run with providers that echo keys", () => {
  // Each step sets up its own faults; leftovers would only make the next step fail differently.
  beforeEach(() => {
    for (const f of Object.values(faulty)) f.clear();
  });

  it("tokens: create, list, use, revoke", async () => {
    for (const scopes of [["read", "rent", "stop"], ["read"]]) {
      const created = await recorder.call("/v1/tokens", {
        method: "POST",
        json: { name: `hygiene-${scopes.length}`, scopes },
      });
      expect(created.status).toBe(201);
      issuedTokens.push((created.json as { token: string }).token);
    }
    const [worker, reader] = issuedTokens as [string, string];
    expect((await recorder.call("/v1/tokens")).status).toBe(200);
    expect((await recorder.call("/v1/leases", { token: reader })).status).toBe(200);
    expect(
      (await recorder.call("/v1/tokens", { method: "POST", json: { name: "x", scopes: ["read"] }, token: worker }))
        .status,
    ).toBe(403);
    const list = (await recorder.call("/v1/tokens")).json as { tokens: { id: string; name: string }[] };
    const readerId = list.tokens.find((t) => t.name === "hygiene-1")!.id;
    expect((await recorder.call(`/v1/tokens/${readerId}`, { method: "DELETE" })).status).toBe(200);
    expect((await recorder.call("/v1/leases", { token: reader })).status).toBe(401);
    // A wrong token that looks like ours.
    expect((await recorder.call("/v1/leases", { token: `${reader.slice(0, -4)}AAAA` })).status).toBe(401);
  });

  it("offers and account while every provider's errors echo its key", async () => {
    for (const f of Object.values(faulty)) f.inject("offers", { kind: "echo", status: 500 }, { times: 3 });
    const offers = await recorder.call("/v1/offers?gpu=4090");
    expect(offers.status).toBe(200);
    expect((offers.json as { errors: unknown[] }).errors.length).toBeGreaterThanOrEqual(3);
    // A key RunPod refuses, answered with the Authorization header in the message.
    runpod.quirks.auth = "bad_key";
    expect((await recorder.call("/v1/offers?provider=runpod&gpu=A40")).status).toBe(200);
    runpod.quirks.auth = "ok";
    // Vast's account answer carries an api_key of its own (docs/providers.md, Vast.ai); VRAMfarm's fails with an echo.
    faulty.vramfarm.inject("balance", { kind: "echo", status: 503 }, { times: 3 });
    faulty.runpod.inject("balance", { kind: "echo", status: 200 }, { times: 1 });
    expect((await recorder.call("/v1/account")).status).toBe(200);
    expect(
      faulty.runpod.served.offers + faulty.vast.served.offers + faulty.vramfarm.served.offers,
    ).toBeGreaterThanOrEqual(3);
    expect(faulty.vramfarm.served.balance).toBeGreaterThan(0);
  });

  it("RunPod: a create whose answer and listing echo the key (unknown outcome), then a rental with echoing faults", async () => {
    clock.advance(60_000);
    faulty.runpod.inject("rent", { kind: "echo", status: 500 }, { afterEffect: true });
    faulty.runpod.inject("listing", { kind: "echo", status: 503 }, { times: 6 });
    const unknown = await rent(RUNPOD_BODY, issuedTokens[0]);
    expect([202, 409, 502], unknown.body).toContain(unknown.status);
    expect(unknown.leaseId, unknown.body).not.toBeNull();
    faulty.runpod.clear();
    faulty.runpod.inject("listing", { kind: "echo", status: 500 }, { times: 2 });
    await runThenStop(unknown.leaseId!);
    faulty.runpod.clear();

    // No capacity once (RunPod's wording, with the echo), then the lean retry gets a pod.
    clock.advance(60_000);
    runpod.quirks.noCapacity = { variant: "requested", times: 1 };
    const rented = await rent(RUNPOD_BODY, issuedTokens[0]);
    expect(rented.status, rented.body).toBe(202);
    faulty.runpod.inject("status", { kind: "echo", status: 503 }, { times: 3 });
    const stopped = await runThenStop(rented.leaseId!, () =>
      faulty.runpod.inject("terminate", { kind: "echo", status: 200 }, { times: 2 }),
    );
    expect(stopped.status).toBe("stopped");
    expect(faulty.runpod.served.status).toBeGreaterThan(0);
    expect(faulty.runpod.served.terminate).toBeGreaterThan(0);
  });

  it("RunPod: the job calls back with its own token; a wrong one is refused", async () => {
    clock.advance(60_000);
    const rented = await rent(RUNPOD_BODY);
    expect(rented.status, rented.body).toBe(202);
    await driveUntil(clock, recorder, rented.leaseId!, ["running"]);
    const pod = runpod.model.get((await recorder.lease(rented.leaseId!)).provider_ref!)!;
    const token = (pod.meta.env as string[])
      .find((e) => e.startsWith("GPULEASE_CALLBACK_TOKEN="))!
      .split("=")
      .slice(1)
      .join("=");
    const wrong = await recorder.call(`/v1/leases/${rented.leaseId}/done`, {
      method: "POST",
      token: `${token.slice(0, -3)}xyz`,
      json: { exit_code: 1 },
    });
    expect(wrong.status).toBe(401);
    const other = await recorder.call(`/v1/leases/${rented.leaseId}/done`, {
      method: "POST",
      token: issuedTokens[0],
      json: { exit_code: 1 },
    });
    expect(other.status).toBe(401);
    const done = await recorder.call(`/v1/leases/${rented.leaseId}/done`, {
      method: "POST",
      token,
      json: { exit_code: 0 },
    });
    expect(done.status).toBe(200);
    expect((await driveUntil(clock, recorder, rented.leaseId!, ["stopped"])).lease.stop_reason).toBe("job_done");
  });

  it("Vast.ai: a refusal that echoes the key, then status and destroy errors that echo it", async () => {
    clock.advance(60_000);
    faulty.vast.inject("rent", { kind: "echo", status: 400 });
    const rented = await rent(VAST_BODY, issuedTokens[0]);
    expect([202, 409], rented.body).toContain(rented.status);
    if (rented.status !== 202) {
      clock.advance(60_000);
      const again = await rent(VAST_BODY, issuedTokens[0]);
      expect(again.status, again.body).toBe(202);
      rented.leaseId = again.leaseId;
    }
    faulty.vast.inject("status", { kind: "echo", status: 500 }, { times: 2 });
    const stopped = await runThenStop(rented.leaseId!, () =>
      faulty.vast.inject("terminate", { kind: "echo", status: 503 }, { times: 3 }),
    );
    expect(stopped.status).toBe("stopped");
    expect(faulty.vast.served.rent + faulty.vast.served.status + faulty.vast.served.terminate).toBeGreaterThanOrEqual(
      3,
    );
  });

  it("VRAMfarm: status and stop errors that echo the key", async () => {
    clock.advance(60_000);
    const rented = await rent(VRAMFARM_BODY, issuedTokens[0]);
    expect(rented.status, rented.body).toBe(202);
    faulty.vramfarm.inject("status", { kind: "echo", status: 500 }, { times: 2 });
    const stopped = await runThenStop(rented.leaseId!, () =>
      faulty.vramfarm.inject("terminate", { kind: "echo", status: 500 }, { times: 2 }),
    );
    expect(stopped.status).toBe("stopped");
    expect(faulty.vramfarm.served.status + faulty.vramfarm.served.terminate).toBeGreaterThan(0);
  });

  it("schedules: run now and the dispatcher, with rentals refused in echoing words", async () => {
    clock.advance(60_000);
    const schedule = await recorder.call("/v1/schedules", {
      method: "POST",
      json: { name: "hygiene", cron: "* * * * *", timezone: "UTC", enabled: true, lease: RUNPOD_BODY },
    });
    expect(schedule.status).toBe(201);
    const scheduleId = (schedule.json as { id: string }).id;
    runpod.quirks.noCapacity = { variant: "gpus", times: 1_000 };
    const run = await recorder.call(`/v1/schedules/${scheduleId}/run`, { method: "POST" });
    expect(run.status).toBe(409);
    const runLease = (run.json as { lease_id?: string }).lease_id;
    if (runLease) leaseIds.add(runLease);
    clock.advance(2 * 60_000);
    await fireCron("* * * * *");
    clock.advance(60_000);
    await fireCron("* * * * *");
    runpod.quirks.noCapacity = null;
    const runs = await recorder.call(`/v1/schedules/${scheduleId}/runs`);
    expect(runs.status).toBe(200);
    expect(
      (runs.json as { runs: { detail: string | null }[] }).runs.some((r) => r.detail),
      runs.body,
    ).toBe(true);
    // Disabled, not deleted: its runs (and their details) stay in D1 for the scan.
    expect(
      (await recorder.call(`/v1/schedules/${scheduleId}`, { method: "PATCH", json: { enabled: false } })).status,
    ).toBe(200);
  });

  it("reaper and stop-all while every listing echoes the key; an unknown cron is logged", async () => {
    clock.advance(60_000);
    for (const f of Object.values(faulty)) f.inject("listing", { kind: "echo", status: 500 }, { times: 6 });
    await fireCron("*/10 * * * *");
    const runs = await recorder.call("/v1/reaper/runs?limit=5");
    expect(runs.status).toBe(200);
    expect(JSON.stringify(runs.json)).toContain("error");
    for (const f of Object.values(faulty)) f.inject("listing", { kind: "echo", status: 500 }, { times: 6 });
    const stopAll = await recorder.call("/v1/leases/stop-all", { method: "POST" });
    expect(stopAll.status).toBeLessThan(500);
    for (const f of Object.values(faulty)) f.clear();
    await fireCron("7 7 7 7 7");
    expect(logLines.some((line) => line.includes('"event":"unknown_cron"'))).toBe(true);
  });

  it("every lease's events, as JSON and as a stream", async () => {
    const listed = (await recorder.call("/v1/leases?limit=200")).json as { leases: Lease[] };
    for (const lease of listed.leases) leaseIds.add(lease.id);
    expect(leaseIds.size).toBeGreaterThanOrEqual(5);
    for (const leaseId of leaseIds) {
      expect((await recorder.call(`/v1/leases/${leaseId}`)).status).toBe(200);
      expect((await recorder.call(`/v1/leases/${leaseId}/events`)).status).toBe(200);
    }
    const [first] = [...leaseIds];
    const stream = await recorder.call(`/v1/leases/${first}/events`, { headers: { Accept: "text/event-stream" } });
    expect(stream.status).toBe(200);
  });
});

describe("secret hygiene", () => {
  it("no provider key, admin token, issued token or call-back token anywhere the run left a trace", async () => {
    const callbackTokens = await callbackTokensSent();
    expect(callbackTokens.length).toBeGreaterThanOrEqual(4);
    expect(issuedTokens.length).toBe(2);
    const secrets: { name: string; value: string }[] = [
      ...PROVIDER_SECRETS.map((value, i) => ({ name: `provider key ${i}`, value })),
      { name: "Vast's echoed api_key", value: VAST_ECHOED_API_KEY },
      { name: "admin token", value: ADMIN_TOKEN },
      ...issuedTokens.map((value, i) => ({ name: `issued token ${i}`, value })),
      ...callbackTokens.map((value, i) => ({ name: `call-back token ${i}`, value })),
    ];
    const places = await everythingProduced();
    expect(places.filter((p) => p.where.startsWith("D1 table")).length).toBeGreaterThanOrEqual(6);
    // The stores the scan must cover really hold provider text (scrubbed): nothing passes vacuously.
    const count = async (sql: string) => (await env.DB.prepare(sql).first<{ n: number }>())?.n ?? 0;
    expect(await count("SELECT COUNT(*) AS n FROM lease_events WHERE detail LIKE '%[redacted]%'")).toBeGreaterThan(0);
    expect(await count("SELECT COUNT(*) AS n FROM leases WHERE error LIKE '%[redacted]%'")).toBeGreaterThan(0);
    expect(await count("SELECT COUNT(*) AS n FROM reaper_runs WHERE providers LIKE '%[redacted]%'")).toBeGreaterThan(0);
    expect(await count("SELECT COUNT(*) AS n FROM schedule_runs WHERE detail IS NOT NULL")).toBeGreaterThan(0);
    expect(recorder.exchanges.length).toBeGreaterThan(50);

    const leaks: string[] = [];
    for (const { where, text } of places) {
      for (const secret of secrets) {
        const fragment = fragmentsOf(secret.value).find((f) => text.includes(f));
        if (fragment) {
          const at = text.indexOf(fragment);
          leaks.push(`${secret.name} in ${where}: …${text.slice(Math.max(0, at - 80), at + 60)}…`);
        }
      }
    }
    expect(leaks).toEqual([]);
  });

  it("the echoing providers did put the keys in their answers (the scan had something to find)", async () => {
    // The echo faults and quirks really sent keys back: a fake answer body with a key was produced.
    expect(faulty.runpod.served.rent + faulty.runpod.served.listing + faulty.runpod.served.status).toBeGreaterThan(0);
    const keysSeenByFakes = Object.values(faulty)
      .flatMap((f) => f.log)
      .filter((r) => PROVIDER_SECRETS.some((k) => r.authorization === `Bearer ${k}`));
    expect(keysSeenByFakes.length).toBeGreaterThan(10);
  });

  it("keys travel only in the Authorization header of their own provider; no API or call-back token goes to a provider", async () => {
    const problems: string[] = [];
    const owner: Record<string, string> = {
      "runpod.fake": PROVIDER_SECRETS[0]!,
      "vast.fake": PROVIDER_SECRETS[1]!,
      "vramfarm.fake": PROVIDER_SECRETS[2]!,
    };
    for (const request of Object.values(faulty).flatMap((f) => f.log)) {
      const url = new URL(request.url);
      const body = request.body;
      for (const key of [...PROVIDER_SECRETS, ADMIN_TOKEN, ...issuedTokens]) {
        if (request.url.includes(key)) problems.push(`${key.slice(0, 6)}… in URL ${url.origin}${url.pathname}`);
        if (body.includes(key)) problems.push(`${key.slice(0, 6)}… in a request body to ${url.host}`);
      }
      const authorization = request.authorization;
      const expected = owner[url.hostname];
      if (authorization && expected && authorization !== `Bearer ${expected}`)
        problems.push(`wrong key sent to ${url.hostname}`);
      if (authorization && !expected) problems.push(`an Authorization header sent to ${url.hostname}`);
    }
    expect(problems).toEqual([]);
  });
});
