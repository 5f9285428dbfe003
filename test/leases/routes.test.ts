import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { type Lease, LeaseInputSchema } from "../../src/leases/schema";
import { sha256Hex } from "../../src/lib/crypto";
import { simCloud } from "../../src/sim/cloud";
import { ADMIN_TOKEN, api, errorBody, PROVIDER_SECRETS } from "../helpers";
import { TestClock } from "../support/clock";
import { driveTo } from "../support/keeper";
import { rent as rentLease, rentOk as rentLeaseOk, simBody } from "../support/lease";

const clock = new TestClock(Date.parse("2032-06-01T00:00:00Z"));
const seen: string[] = [];

/** Every body these tests read is kept, to prove no secret ever appears in one. */
async function bodyText(res: Response): Promise<string> {
  const text = await res.text();
  seen.push(text);
  return text;
}

const rent = (body: Record<string, unknown>) => rentLease(simBody(body));
const rentOk = (body: Record<string, unknown> = {}) => rentLeaseOk(simBody(body), { seen });

async function getLease(leaseId: string): Promise<Lease> {
  return JSON.parse(await bodyText(await api(`/v1/leases/${leaseId}`))) as Lease;
}

/** Runs the keeper's alarms (the sim is set to boot and answer at once) until `status`. */
const driveUntil = (leaseId: string, status: Lease["status"]) =>
  driveTo(leaseId, status, { clock, read: getLease, maxAlarms: 50 });

async function stopAll(): Promise<void> {
  const { leases } = (await (await api("/v1/leases?status=active&limit=200")).json()) as { leases: Lease[] };
  for (const lease of leases) {
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await driveUntil(lease.id, "stopped");
  }
}

beforeAll(async () => {
  // Alarms set in a faked future never fire on their own: only driveUntil runs them.
  clock.install();
  await simCloud(env.SIM_CLOUD).reset();
  await simCloud(env.SIM_CLOUD).configure({ bootSeconds: 0, readySeconds: 0, lingerSeconds: 0 });
});

describe("POST /v1/leases validation", () => {
  const cases: [string, Record<string, unknown>, string][] = [
    ["custom without image", { template: "custom", cmd: "x" }, "image"],
    ["cmd on the ollama template", { cmd: "echo hi" }, "cmd"],
    ["cmd over 4000 characters", { template: "custom", image: "a/b", cmd: "x".repeat(4001) }, "cmd"],
    ["max_minutes 0", { max_minutes: 0 }, "max_minutes"],
    ["max_minutes over a week", { max_minutes: 10081 }, "max_minutes"],
    ["max_minutes missing", { max_minutes: undefined }, "max_minutes"],
    ["max_cost 0", { max_cost: 0 }, "max_cost"],
    ["an env name with a dash", { env: { "BAD-NAME": "1" } }, "env"],
    ["an env name that starts with a digit", { env: { "1X": "1" } }, "env"],
    ["a reserved env name", { env: { GPULEASE_CALLBACK_TOKEN: "mine" } }, "env"],
    ["port 0", { ports: [0] }, "ports.0"],
    ["port 65536", { ports: [65536] }, "ports.0"],
    ["context_length on custom", { template: "custom", image: "a/b", context_length: 4096 }, "context_length"],
    ["an unknown field", { colour: "blue" }, ""],
    ["an unknown provider", { provider: "aws" }, "provider"],
  ];
  for (const [what, body, path] of cases) {
    it(`rejects ${what} with 400 naming the field`, async () => {
      const res = await rent(body);
      expect(res.status).toBe(400);
      const error = await errorBody(res);
      expect(error.code).toBe("invalid_request");
      if (path) expect(error.issues?.some((i) => i.path === path || i.path.startsWith(`${path}.`))).toBe(true);
    });
  }

  it("accepts the largest valid values", () => {
    const parsed = LeaseInputSchema.parse({
      template: "custom",
      image: "ghcr.io/you/batch:1",
      cmd: "x".repeat(4000),
      env: { _OK: "1", A1: "2" },
      ports: [1, 65535],
      max_minutes: 10080,
      max_cost: 0.01,
    });
    expect(parsed.template).toBe("custom");
    expect(LeaseInputSchema.parse({ max_minutes: 1 }).template).toBe("ollama");
  });

  it("rejects an unknown offer_id with 400 and rents nothing", async () => {
    const res = await rent({ offer_id: "sim:no-such-gpu:1" });
    expect(res.status).toBe(400);
    expect((await errorBody(res)).code).toBe("invalid_request");
  });

  it("needs the rent scope", async () => {
    const token = "gl_readonly_token_0123456789abcdef";
    await env.DB.prepare("INSERT INTO tokens (id, name, token_hash, scopes, created_at) VALUES (?, ?, ?, ?, ?)")
      .bind("tok_readonly", "ro", await sha256Hex(token), JSON.stringify(["read"]), new Date().toISOString())
      .run();
    const res = await api("/v1/leases", { method: "POST", token, json: { provider: "sim", max_minutes: 5 } });
    expect(res.status).toBe(403);
    expect((await api("/v1/leases", { token })).status).toBe(200);
    const stop = await api("/v1/leases/lse_0000000000000000000000/stop", { method: "POST", token });
    expect(stop.status).toBe(403);
  });
});

describe("reading leases", () => {
  it("answers 404 for a malformed or unknown id, never a database error", async () => {
    for (const id of ["nope", "lse_", "lse_0000000000000000000000", "lse_'; DROP TABLE leases;--", "x".repeat(300)]) {
      for (const path of [`/v1/leases/${encodeURIComponent(id)}`, `/v1/leases/${encodeURIComponent(id)}/events`]) {
        const res = await api(path);
        expect(res.status, path).toBe(404);
        expect((await errorBody(res)).code).toBe("not_found");
      }
      const stop = await api(`/v1/leases/${encodeURIComponent(id)}/stop`, { method: "POST" });
      expect(stop.status).toBe(404);
    }
  });

  it("lists newest first with a status filter and cursor paging", async () => {
    const later = () => clock.advance(1000);
    const a = await rentOk({ name: "page-a" });
    later();
    const b = await rentOk({ name: "page-b" });
    later();
    const c = await rentOk({ name: "page-c" });
    await api(`/v1/leases/${a.id}/stop`, { method: "POST" });
    await driveUntil(a.id, "stopped");

    const first = (await (await api("/v1/leases?limit=2")).json()) as { leases: Lease[]; next_cursor: string | null };
    expect(first.leases.map((l) => l.id)).toEqual([c.id, b.id]);
    expect(first.next_cursor).not.toBeNull();
    const second = (await (
      await api(`/v1/leases?limit=2&cursor=${encodeURIComponent(first.next_cursor!)}`)
    ).json()) as {
      leases: Lease[];
    };
    expect(second.leases[0]!.id).toBe(a.id);

    const active = (await (await api("/v1/leases?status=active&limit=200")).json()) as { leases: Lease[] };
    expect(active.leases.map((l) => l.id)).toEqual(expect.arrayContaining([b.id, c.id]));
    expect(active.leases.map((l) => l.id)).not.toContain(a.id);
    const stopped = (await (await api("/v1/leases?status=stopped&limit=200")).json()) as { leases: Lease[] };
    expect(stopped.leases.map((l) => l.id)).toContain(a.id);

    expect((await api("/v1/leases?status=bogus")).status).toBe(400);
    expect((await api("/v1/leases?cursor=garbage")).status).toBe(400);
    expect((await api("/v1/leases?limit=0")).status).toBe(400);
    await stopAll();
  });
});

describe("the job's call-back", () => {
  it("stops the lease with job_done and the exit code; a wrong token is 401; a repeat is already", async () => {
    const lease = await rentOk({ template: "custom", image: "ghcr.io/you/batch:1", cmd: "python run.py" });
    await driveUntil(lease.id, "running");
    // The real token only ever reaches the machine; give the row the hash of one we know.
    const token = "callback-token-for-the-test-0123456789";
    await env.DB.prepare("UPDATE leases SET callback_hash = ? WHERE id = ?")
      .bind(await sha256Hex(token), lease.id)
      .run();
    const done = (auth: string | null, body: unknown = { exit_code: 3 }) =>
      api(`/v1/leases/${lease.id}/done`, {
        method: "POST",
        token: null,
        headers: auth ? { Authorization: auth } : {},
        json: body,
      });

    for (const auth of [null, "Bearer wrong-token", `Bearer ${ADMIN_TOKEN}`, `Bearer ${token}x`]) {
      const res = await done(auth);
      expect(res.status, String(auth)).toBe(401);
      expect((await errorBody(res)).code).toBe("unauthorized");
    }
    // Not even the body is looked at before the token is checked.
    expect((await done("Bearer nope", { exit_code: "x" })).status).toBe(401);
    expect((await getLease(lease.id)).status).toBe("running");

    const res = await done(`Bearer ${token}`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true });
    const stopping = await getLease(lease.id);
    expect(stopping).toMatchObject({ status: "stopping", stop_reason: "job_done", exit_code: 3 });
    expect(await (await done(`Bearer ${token}`)).json()).toEqual({ ok: true, already: true });
    const stopped = await driveUntil(lease.id, "stopped");
    expect(stopped.teardown_verified_at).not.toBeNull();
    expect(await (await done(`Bearer ${token}`)).json()).toEqual({ ok: true, already: true });
    expect(JSON.stringify(seen)).not.toContain(token);
  });

  it("answers 404 for an unknown lease", async () => {
    const res = await api("/v1/leases/lse_0000000000000000000000/done", {
      method: "POST",
      token: "x",
      json: { exit_code: 0 },
    });
    expect(res.status).toBe(404);
  });
});

interface SseEvent {
  id: string;
  data: { seq: number; kind: string };
}

function parseSse(text: string): SseEvent[] {
  return text
    .split("\n\n")
    .filter((block) => block.includes("data:"))
    .map((block) => {
      const lines = block.split("\n");
      const id =
        lines
          .find((l) => l.startsWith("id:"))
          ?.slice(3)
          .trim() ?? "";
      const data =
        lines
          .find((l) => l.startsWith("data:"))
          ?.slice(5)
          .trim() ?? "{}";
      return { id, data: JSON.parse(data) as SseEvent["data"] };
    });
}

describe("events", () => {
  it("streams a lease live until it is stopped, and resumes after Last-Event-ID", async () => {
    const lease = await rentOk();
    const res = await api(`/v1/leases/${lease.id}/events`, { headers: { Accept: "text/event-stream" } });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    while (!text.includes('"rented"')) {
      const { value, done } = await reader.read();
      if (done) throw new Error("stream ended early");
      text += decoder.decode(value, { stream: true });
    }
    // The lease moves on while the stream is open.
    await driveUntil(lease.id, "running");
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await driveUntil(lease.id, "stopped");
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    seen.push(text);
    const streamed = parseSse(text);
    const kinds = streamed.map((e) => e.data.kind);
    expect(kinds).toEqual(expect.arrayContaining(["created", "rented", "running", "stop_requested", "stopped"]));
    expect(kinds.at(-1)).toBe("stopped");
    expect(streamed.every((e) => e.id === String(e.data.seq))).toBe(true);

    const json = (await (await api(`/v1/leases/${lease.id}/events`)).json()) as {
      events: { seq: number; kind: string }[];
    };
    expect(json.events.map((e) => e.kind)).toEqual(kinds);

    const third = streamed[2]!.id;
    const resumed = await api(`/v1/leases/${lease.id}/events`, {
      headers: { Accept: "text/event-stream", "Last-Event-ID": third },
    });
    const rest = parseSse(await bodyText(resumed));
    expect(rest.map((e) => e.data.seq)).toEqual(streamed.slice(3).map((e) => e.data.seq));
    const after = (await (await api(`/v1/leases/${lease.id}/events?after=${third}`)).json()) as {
      events: { seq: number }[];
    };
    expect(after.events.map((e) => e.seq)).toEqual(rest.map((e) => e.data.seq));
  });

  it("shows an event an older version stored with a kind no longer written, as stored", async () => {
    const lease = await rentOk();
    await env.DB.prepare("INSERT INTO lease_events (lease_id, at, kind, detail) VALUES (?, ?, 'state:unknown', NULL)")
      .bind(lease.id, new Date(clock.now).toISOString())
      .run();
    const res = await api(`/v1/leases/${lease.id}/events`);
    expect(res.status).toBe(200);
    const { events } = (await res.json()) as { events: { kind: string }[] };
    expect(events.map((e) => e.kind)).toContain("state:unknown");
    expect((await api(`/v1/leases/${lease.id}`)).status).toBe(200);
    await stopAll();
  });
});

describe("secrets", () => {
  it("appear in no lease, event or error body", async () => {
    await simCloud(env.SIM_CLOUD).configure({ faults: { no_capacity: true } });
    seen.push(await bodyText(await rent({ env: { HF_TOKEN: "hf_user_secret_value" } })));
    await simCloud(env.SIM_CLOUD).configure({ faults: { no_capacity: false } });
    const { leases } = JSON.parse(await bodyText(await api("/v1/leases?limit=200"))) as { leases: Lease[] };
    expect(leases.length).toBeGreaterThan(2);
    for (const lease of leases) await bodyText(await api(`/v1/leases/${lease.id}/events`));
    const everything = seen.join("\n");
    for (const secret of [...PROVIDER_SECRETS, ADMIN_TOKEN, "hf_user_secret_value"])
      expect(everything).not.toContain(secret);
    expect(everything).not.toMatch(/callback_hash|GPULEASE_CALLBACK_TOKEN/);
  });
});
