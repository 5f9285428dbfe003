import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import OpenAI from "openai";
import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from "vitest";
import { loadConfig, overlayVars } from "../../src/config";
import worker from "../../src/index";
import { getLease } from "../../src/leases/ledger";
import type { Lease } from "../../src/leases/schema";
import { createServices } from "../../src/services";
import { simCloud } from "../../src/sim/cloud";
import { deliverDue } from "../../src/webhooks/sender";
import { issueToken } from "../auth/tokens-helper";
import { type FakeService, type InstalledFakes, installFakes } from "../fakes/install";
import { OllamaRegistryFake } from "../fakes/ollama-registry";
import { RunpodFake } from "../fakes/runpod";
import { api, apiRequest, errorBody } from "../helpers";
import { TestClock } from "../support/clock";
import { emptyTables, WEBHOOK_TABLES } from "../support/fresh";
import { alarmAt, driveTo, fireNext as fireNextAlarm } from "../support/keeper";
import { rent, simBody } from "../support/lease";

// The LLM gateway through the worker's fetch handler: `/llm/{lease_id}/…` in front of a sim model
// lease's Ollama (the sim's servers stream in real time, 20 ms a token, on the test's Date), the
// keeper's meter flushed by its alarms, and a RunPod lease whose proxy the fakes record.
const clock = new TestClock(Date.parse("2035-04-01T00:00:00Z"));
const fireNext = (leaseId: string) => fireNextAlarm(clock, leaseId);
const cloud = () => simCloud(env.SIM_CLOUD);
const MODEL = "llama3.2:1b";

let registry: OllamaRegistryFake;
let fakes: InstalledFakes;

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  registry = new OllamaRegistryFake();
  fakes = installFakes(registry);
  await cloud().reset();
  await cloud().configure({ bootSeconds: 20, readySeconds: 5, lingerSeconds: 0, creditUsd: 100_000, downloadMbs: 500 });
});

afterEach(async () => {
  overlayVars({});
  const leases = ((await (await api("/v1/leases?limit=200")).json()) as { leases: Lease[] }).leases;
  for (const lease of leases) {
    if (lease.status === "stopped") continue;
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await driveTo(lease.id, "stopped", { clock, maxAlarms: 400 });
  }
  fakes.restore();
});

interface Rented {
  id: string;
  key: string;
  /** the 202 answer as sent */
  text: string;
}

/** Rents a sim model lease (provisioning); its 202 answer carries the inference key. */
async function rentModel(extra: Record<string, unknown> = {}): Promise<Rented> {
  const res = await rent({ provider: "sim", model: MODEL, max_minutes: 30, ...extra });
  const text = await res.text();
  if (res.status !== 202) throw new Error(`rent: ${res.status} ${text}`);
  const body = JSON.parse(text) as Lease & { inference_key?: string };
  if (!body.inference_key) throw new Error(`no inference_key in ${text}`);
  return { id: body.id, key: body.inference_key, text };
}

/** A sim model lease driven to running (its model pulled and loaded). */
async function runningModel(extra: Record<string, unknown> = {}): Promise<Rented> {
  const rented = await rentModel(extra);
  await driveTo(rented.id, "running", { clock, maxAlarms: 200 });
  return rented;
}

interface LlmInit {
  /** the bearer credential (an inference key or a token); null: none */
  key: string | null;
  method?: string;
  json?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

/**
 * One request to the gateway through the worker's fetch handler. The usage of a request is
 * recorded when its body has passed (a waitUntil then), so `settled` is awaited after reading.
 */
async function llmCall(leaseId: string, path: string, init: LlmInit) {
  const request = apiRequest(`/llm/${leaseId}/${path}`, {
    method: init.method ?? (init.json === undefined ? "GET" : "POST"),
    json: init.json,
    token: init.key,
    headers: init.headers,
    signal: init.signal,
  });
  const ctx = createExecutionContext();
  const res = await worker.fetch(request as Request<unknown, IncomingRequestCfProperties>, env, ctx);
  return { res, settled: () => waitOnExecutionContext(ctx) };
}

/** llmCall with the body read whole. */
async function llm(leaseId: string, path: string, init: LlmInit): Promise<{ res: Response; text: string }> {
  const { res, settled } = await llmCall(leaseId, path, init);
  const text = await res.text();
  await settled();
  return { res, text };
}

const chatBody = (content: string, extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [{ role: "user", content }],
  ...extra,
});

async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * A gateway error in the caller's dialect: OpenAI's `{"error": {"message", "type", "param", "code"}}`
 * under v1/, Ollama's `{"error": "<message>"}` under api/ (no code there), gpulease's envelope else.
 */
async function gatewayError(res: Response, path: string): Promise<{ code: string | null; message: string }> {
  const body = (await res.json()) as { error: unknown; code?: string };
  if (path.startsWith("v1")) {
    expect(body).toEqual({
      error: { message: expect.any(String), type: expect.any(String), param: null, code: expect.any(String) },
    });
    const error = body.error as { message: string; code: string };
    return { code: error.code, message: error.message };
  }
  if (path.startsWith("api")) {
    expect(Object.keys(body)).toEqual(["error"]);
    expect(typeof body.error).toBe("string");
    return { code: null, message: body.error as string };
  }
  expect(typeof body.code).toBe("string");
  return { code: body.code ?? null, message: body.error as string };
}

async function leaseBody(id: string): Promise<{ lease: Lease; text: string }> {
  const res = await api(`/v1/leases/${id}`);
  expect(res.status).toBe(200);
  const text = await res.text();
  return { lease: JSON.parse(text) as Lease, text };
}

async function eventsText(id: string): Promise<string> {
  const res = await api(`/v1/leases/${id}/events`);
  expect(res.status).toBe(200);
  return res.text();
}

describe("keys: shown once, stored hashed, scoped to their lease, rotated", () => {
  it("the 202 answer carries a glk_ key once; GET, lists, events and a replay never do; the row keeps its SHA-256", async () => {
    const res = await rent(
      { provider: "sim", model: MODEL, max_minutes: 30 },
      { headers: { "Idempotency-Key": "k-1" } },
    );
    expect(res.status).toBe(202);
    const rented = (await res.json()) as Lease & { inference_key: string };
    expect(rented.inference_key).toMatch(/^glk_[A-Za-z0-9_-]{43}$/);
    const key = rented.inference_key;
    const hash = await sha256Hex(key);
    const row = await env.DB.prepare("SELECT inference_key_hash FROM leases WHERE id = ?")
      .bind(rented.id)
      .first<{ inference_key_hash: string }>();
    expect(row?.inference_key_hash).toBe(hash);

    const replay = await rent(
      { provider: "sim", model: MODEL, max_minutes: 30 },
      { headers: { "Idempotency-Key": "k-1" } },
    );
    expect(replay.status).toBe(200);
    const replayText = await replay.text();
    expect(JSON.parse(replayText).id).toBe(rented.id);
    const seen = [
      replayText,
      (await leaseBody(rented.id)).text,
      await (await api("/v1/leases?limit=50")).text(),
      await eventsText(rented.id),
    ];
    for (const text of seen) {
      expect(text).not.toContain(key);
      expect(text).not.toContain(hash);
      expect(text).not.toContain("inference_key");
    }

    // A lease without a model has no key.
    const plain = await rent(simBody());
    expect(plain.status).toBe(202);
    expect(await plain.json()).not.toHaveProperty("inference_key");
  });

  it("the key opens its own lease's /llm/… only; wrong key, another lease's key, /v1 and read tokens get 401", async () => {
    const a = await runningModel();
    // The other lease need not run: authorization comes before the lease's state.
    const b = await rentModel();
    expect(a.key).not.toBe(b.key);

    const tags = await llm(a.id, "api/tags", { key: a.key });
    expect(tags.res.status).toBe(200);
    expect(JSON.parse(tags.text).models.map((m: { name: string }) => m.name)).toEqual([MODEL]);
    const chat = await llm(a.id, "v1/chat/completions", { key: a.key, json: chatBody("Say hi") });
    expect(chat.res.status).toBe(200);
    expect(JSON.parse(chat.text)).toMatchObject({ object: "chat.completion", model: MODEL });

    const refused = async (leaseId: string, key: string | null, path = "api/tags") => {
      const { res } = await llmCall(leaseId, path, { key });
      expect(res.status, `${key?.slice(0, 8)} on ${leaseId}/${path}`).toBe(401);
      expect(res.headers.get("WWW-Authenticate")).toContain("Bearer");
      const body = await gatewayError(res, path);
      if (path.startsWith("v1")) expect(body.code).toBe("unauthorized");
      expect(body.message).toContain("inference key");
      if (key) expect(JSON.stringify(body)).not.toContain(key);
    };
    // One character off, the right shape.
    const wrong = `${a.key.slice(0, -1)}${a.key.endsWith("A") ? "B" : "A"}`;
    await refused(a.id, wrong);
    await refused(a.id, "glk_");
    await refused(a.id, null);
    await refused(a.id, b.key);
    await refused(a.id, b.key, "v1/chat/completions");
    await refused(b.id, a.key);

    // The key is nothing under /v1.
    for (const path of ["/v1/leases", `/v1/leases/${a.id}`, `/v1/leases/${a.id}/events`]) {
      const res = await api(path, { token: a.key });
      expect(res.status, path).toBe(401);
      expect((await errorBody(res)).code).toBe("unauthorized");
    }
    expect((await api(`/v1/leases/${a.id}/stop`, { method: "POST", token: a.key })).status).toBe(401);
    expect((await api(`/v1/leases/${a.id}/inference-key`, { method: "POST", token: a.key })).status).toBe(401);

    // Tokens: without `infer` 401 (even with every other scope), with `infer` or admin through.
    const reader = await issueToken(["read"]);
    const renter = await issueToken(["read", "rent", "stop"]);
    const inferer = await issueToken(["infer"]);
    await refused(a.id, reader.token);
    await refused(a.id, renter.token);
    expect((await llm(a.id, "api/tags", { key: inferer.token })).res.status).toBe(200);
    expect((await llm(a.id, "v1/chat/completions", { key: inferer.token, json: chatBody("hi") })).res.status).toBe(200);
    expect((await llm(a.id, "api/tags", { key: "test-admin-token-0123456789" })).res.status).toBe(200);
    // An infer-only token reads nothing under /v1.
    expect((await api(`/v1/leases/${a.id}`, { token: inferer.token })).status).toBe(403);
    // A revoked infer token is refused at once.
    expect((await api(`/v1/tokens/${inferer.id}`, { method: "DELETE" })).status).toBeLessThan(300);
    await refused(a.id, inferer.token);
  });

  it("rotation: the old key is refused at once, the new one works, shown only in the rotation's answer", async () => {
    const a = await runningModel();
    expect((await llm(a.id, "api/tags", { key: a.key })).res.status).toBe(200);
    const res = await api(`/v1/leases/${a.id}/inference-key`, { method: "POST" });
    expect(res.status).toBe(200);
    const { inference_key: fresh } = (await res.json()) as { inference_key: string };
    expect(fresh).toMatch(/^glk_[A-Za-z0-9_-]{43}$/);
    expect(fresh).not.toBe(a.key);

    expect((await llm(a.id, "api/tags", { key: a.key })).res.status).toBe(401);
    expect((await llm(a.id, "api/tags", { key: fresh })).res.status).toBe(200);
    const row = await env.DB.prepare("SELECT inference_key_hash FROM leases WHERE id = ?")
      .bind(a.id)
      .first<{ inference_key_hash: string }>();
    expect(row?.inference_key_hash).toBe(await sha256Hex(fresh));
    const events = await eventsText(a.id);
    expect(events).toContain("inference_key_rotated");
    expect(events).not.toContain(fresh);
    expect((await leaseBody(a.id)).text).not.toContain(fresh);

    // Rotating needs `rent`; a lease without a model has no key to rotate.
    const reader = await issueToken(["read"]);
    expect((await api(`/v1/leases/${a.id}/inference-key`, { method: "POST", token: reader.token })).status).toBe(403);
    const plain = (await (await rent(simBody())).json()) as Lease;
    const none = await api(`/v1/leases/${plain.id}/inference-key`, { method: "POST" });
    expect(none.status).toBe(404);
  });
});

describe("routes: what the gateway forwards and what it does not", () => {
  it("refuses Ollama's model-changing routes (403) and answers 404 for any route it does not forward", async () => {
    const a = await runningModel();
    const before = await llm(a.id, "api/tags", { key: a.key });
    for (const path of [
      "api/pull",
      "api/delete",
      "api/create",
      "api/copy",
      "api/push",
      "api/pull/",
      "api/blobs/sha256:00",
    ]) {
      const method = path === "api/delete" ? "DELETE" : "POST";
      const { res } = await llmCall(a.id, path, { key: a.key, method, json: { model: "qwen3:0.6b", name: "x" } });
      expect(res.status, path).toBe(403);
      expect((await gatewayError(res, path)).message).toContain("changes the server's models");
    }
    for (const path of ["api/nothing", "v1/audio/speech", "v1", "metrics", "v1/chat", "api//pull", "api/PULL"]) {
      const { res } = await llmCall(a.id, path, { key: a.key });
      expect(res.status, path).toBe(404);
      const error = await gatewayError(res, path);
      expect(error.message).toContain("no gateway route");
      if (!path.startsWith("api")) expect(error.code).toBe("not_found");
    }
    // Nothing of it reached the server: still only the lease's model, nothing pulled.
    const after = await llm(a.id, "api/tags", { key: a.key });
    expect(after.text).toBe(before.text);
    // A refused route is refused only to a caller who may come in at all.
    expect((await llmCall(a.id, "api/pull", { key: null, json: {} })).res.status).toBe(401);
  });

  it("404 for a lease without a model, an unknown lease id and a malformed one, even to the admin", async () => {
    const plain = (await (await rent(simBody())).json()) as Lease;
    await driveTo(plain.id, "running", { clock, maxAlarms: 200 });
    const admin = "test-admin-token-0123456789";
    const unknown = `lse_${"0".repeat(22)}`;
    for (const id of [plain.id, unknown, "lse_short", "..%2f..%2fv1"]) {
      const { res } = await llmCall(id, "api/tags", { key: admin });
      expect(res.status, id).toBe(404);
      // An id with encoded slashes is no gateway path at all: the API's own 404.
      if (id.includes("%2f")) expect((await errorBody(res)).code).toBe("not_found");
      else expect((await gatewayError(res, "api/tags")).message).toBe("no such model lease");
    }
  });
});

describe("the surface clients call: routes, errors in each API's shape, options the lease cannot give", () => {
  /** The official openai client, its requests sent through the worker's fetch handler. */
  function openaiClient(leaseId: string, key: string): OpenAI {
    return new OpenAI({
      apiKey: key,
      baseURL: `https://gpulease.test/llm/${leaseId}/v1`,
      maxRetries: 0,
      fetch: async (input: string | URL | Request, init?: RequestInit) => {
        const { res, settled } = await llmCall(leaseId, new URL(String(input)).pathname.split(`/llm/${leaseId}/`)[1]!, {
          key,
          method: init?.method ?? "GET",
          json: typeof init?.body === "string" ? JSON.parse(init.body) : undefined,
        });
        const text = await res.text();
        await settled();
        return new Response(text, { status: res.status, headers: res.headers });
      },
    });
  }

  it("/v1/models/{id} (models.retrieve), /api/version and /api/embeddings are forwarded", async () => {
    const a = await runningModel();
    const client = openaiClient(a.id, a.key);
    expect(await client.models.retrieve(MODEL)).toMatchObject({ id: MODEL, object: "model", owned_by: "library" });
    const version = await llm(a.id, "api/version", { key: a.key });
    expect(version.res.status).toBe(200);
    expect(JSON.parse(version.text)).toEqual({ version: expect.stringMatching(/^\d+\.\d+\.\d+/) });
    const embedding = await llm(a.id, "api/embeddings", { key: a.key, json: { model: MODEL, prompt: "hi" } });
    expect(embedding.res.status).toBe(200);
    expect((JSON.parse(embedding.text) as { embedding: number[] }).embedding.length).toBeGreaterThan(0);
    const listed = await client.embeddings.create({ model: MODEL, input: ["a", "b"] });
    expect(listed.data).toHaveLength(2);
  });

  it("the openai client reads the gateway's errors as OpenAI errors: status, message, type and code", async () => {
    const a = await rentModel();
    const client = openaiClient(a.id, a.key);
    const notRunning = await client.chat.completions.create(chatBody("hi") as never).catch((e: unknown) => e);
    expect(notRunning).toBeInstanceOf(OpenAI.APIError);
    const error = notRunning as InstanceType<typeof OpenAI.APIError>;
    expect(error.status).toBe(409);
    expect(error.code).toBe("lease_not_running");
    expect(error.type).toBe("conflict_error");
    expect(error.message).toContain("the lease is provisioning");
    const badKey = await openaiClient(a.id, "glk_nope")
      .models.list()
      .catch((e: unknown) => e);
    expect(badKey).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((badKey as InstanceType<typeof OpenAI.APIError>).code).toBe("unauthorized");
  });

  it("options.num_ctx above the sized context and a keep_alive that unloads the model are a 400; other options pass", async () => {
    const a = await runningModel();
    // Sized for 4096 tokens (the default context).
    for (const [path, json, words] of [
      ["api/generate", { model: MODEL, prompt: "hi", options: { num_ctx: 8192 } }, "num_ctx 8192 is above the 4096"],
      ["api/chat", { ...chatBody("hi"), options: { num_ctx: 4097 } }, "num_ctx 4097"],
      ["api/embed", { model: MODEL, input: "hi", options: { num_ctx: 32_768 } }, "num_ctx 32768"],
      ["api/generate", { model: MODEL, prompt: "hi", keep_alive: 0 }, "keep_alive 0 would unload the model"],
      ["api/chat", { ...chatBody("hi"), keep_alive: "0s" }, 'keep_alive "0s" would unload'],
      ["api/embeddings", { model: MODEL, prompt: "hi", keep_alive: "5m" }, "after 300 s"],
      ["api/generate", { model: MODEL, prompt: "hi", keep_alive: 30 }, "after 30 s"],
    ] as const) {
      const { res, text } = await llm(a.id, path, { key: a.key, json });
      expect(res.status, `${path} ${text}`).toBe(400);
      expect(JSON.parse(text)).toEqual({ error: expect.stringContaining(words) });
    }
    // Forever (negative, as Ollama reads it), a smaller context and other options go through.
    for (const json of [
      { model: MODEL, prompt: "hi", stream: false, keep_alive: -1 },
      { model: MODEL, prompt: "hi", stream: false, keep_alive: "-1m" },
      { model: MODEL, prompt: "hi", stream: false, options: { num_ctx: 4096, temperature: 0.2, num_predict: 5 } },
      { model: MODEL, prompt: "hi", stream: false, options: { num_ctx: 2048 } },
    ]) {
      const { res, text } = await llm(a.id, "api/generate", { key: a.key, json });
      expect(res.status, JSON.stringify(json)).toBe(200);
      expect(JSON.parse(text)).toMatchObject({ done: true });
    }
    // The model is still loaded for good on the machine.
    const ps = JSON.parse((await llm(a.id, "api/ps", { key: a.key })).text) as { models: { name: string }[] };
    expect(ps.models.map((m) => m.name)).toContain(MODEL);
  });
});

describe("409 lease_not_running", () => {
  it("while provisioning, while stopping and once stopped (the key still checked first)", async () => {
    const a = await rentModel();
    const notRunning = async (status: string) => {
      for (const path of ["api/tags", "v1/chat/completions"]) {
        const init = path === "api/tags" ? { key: a.key } : { key: a.key, json: chatBody("hi") };
        const { res } = await llmCall(a.id, path, init);
        expect(res.status, `${status} ${path}`).toBe(409);
        const body = await gatewayError(res, path);
        if (path.startsWith("v1")) expect(body.code).toBe("lease_not_running");
        expect(body.message).toContain(status);
      }
      expect((await llmCall(a.id, "api/tags", { key: "glk_nope" })).res.status).toBe(401);
    };
    await notRunning("provisioning");
    await driveTo(a.id, "running", { clock });
    expect((await llm(a.id, "api/tags", { key: a.key })).res.status).toBe(200);
    expect((await api(`/v1/leases/${a.id}/stop`, { method: "POST" })).ok).toBe(true);
    await notRunning("stopping");
    await driveTo(a.id, "stopped", { clock, maxAlarms: 400 });
    await notRunning("stopped");
    // No new key for a stopped lease.
    const rotate = await api(`/v1/leases/${a.id}/inference-key`, { method: "POST" });
    expect(rotate.status).toBe(409);
    expect((await errorBody(rotate)).code).toBe("lease_not_running");
  });
});

/** Reads a streamed body chunk by chunk, with the real time each chunk arrived. */
async function readChunks(body: ReadableStream<Uint8Array>): Promise<{ text: string; at: number }[]> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const out: { text: string; at: number }[] = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return out;
    out.push({ text: decoder.decode(value, { stream: true }), at: performance.now() });
  }
}

describe("streaming passes through as it is produced", () => {
  it("OpenAI SSE: chunks arrive one by one, the first long before the last (the sim makes one per 20 ms)", async () => {
    const a = await runningModel();
    const { res, settled } = await llmCall(a.id, "v1/chat/completions", {
      key: a.key,
      json: chatBody("Stream me a greeting please", { stream: true }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const chunks = await readChunks(res.body!);
    await settled();
    const first = chunks[0]!;
    expect(first.text.startsWith("data: ")).toBe(true);
    expect(first.text).toContain("chat.completion.chunk");
    expect(first.text).not.toContain("[DONE]");
    const text = chunks.map((c) => c.text).join("");
    const events = text.split("\n\n").filter(Boolean);
    expect(events.at(-1)).toBe("data: [DONE]");
    const contentEvents = events.filter((e) => e.includes('"content"'));
    expect(contentEvents.length).toBeGreaterThan(10);
    // More than one piece arrived on its own, and the last came at least a token's time per piece
    // after the first: a buffering gateway would hand them all over at once at the end.
    expect(chunks.length).toBeGreaterThan(10);
    expect(chunks.at(-1)!.at - first.at).toBeGreaterThanOrEqual((contentEvents.length - 1) * 15);
    // The gateway asked for the usage chunk (stream_options.include_usage) to count the tokens;
    // this client did not, so it never sees that chunk (`choices: []` would break a naive reader).
    expect(events.some((e) => e.includes('"usage"'))).toBe(false);
    expect(events.every((e) => e === "data: [DONE]" || JSON.parse(e.slice(6)).choices.length === 1)).toBe(true);
    await fireNext(a.id);
    const counted = (await leaseBody(a.id)).lease.usage;
    expect(counted?.requests).toBe(1);
    expect(counted?.completion_tokens).toBe(contentEvents.length);
  });

  it("a client that asks for the usage chunk gets it, as the server sent it", async () => {
    const a = await runningModel();
    const { text } = await llm(a.id, "v1/chat/completions", {
      key: a.key,
      json: chatBody("Count for me", { stream: true, stream_options: { include_usage: true } }),
    });
    const events = text.split("\n\n").filter(Boolean);
    const usage = events.filter((e) => e.includes('"usage"')).map((e) => JSON.parse(e.slice(6)));
    expect(usage).toHaveLength(1);
    expect(usage[0]).toMatchObject({ choices: [], usage: { completion_tokens: expect.any(Number) } });
    expect(events.at(-1)).toBe("data: [DONE]");
  });

  it("Ollama NDJSON from /api/generate: lines arrive one by one, the counts on the last", async () => {
    const a = await runningModel();
    const { res, settled } = await llmCall(a.id, "api/generate", {
      key: a.key,
      json: { model: MODEL, prompt: "Stream me a greeting please" },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("application/x-ndjson");
    const chunks = await readChunks(res.body!);
    await settled();
    const lines = chunks
      .map((c) => c.text)
      .join("")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { done: boolean; eval_count?: number });
    expect(lines.length).toBeGreaterThan(10);
    expect(JSON.parse(chunks[0]!.text.split("\n")[0]!).done).toBe(false);
    expect(lines.at(-1)).toMatchObject({ done: true });
    expect(lines.at(-1)!.eval_count).toBe(lines.length - 1);
    expect(chunks.length).toBeGreaterThan(10);
    expect(chunks.at(-1)!.at - chunks[0]!.at).toBeGreaterThanOrEqual((lines.length - 2) * 15);
  });

  it("only an allow-list of headers reaches the machine: no credentials, no caller address (a RunPod lease, its proxy recorded)", async () => {
    fakes.restore();
    const runpod = new RunpodFake({ quirks: { bootMs: 12_000, lingerMs: 0 } });
    fakes = installFakes(registry, runpod);
    const res = await rent({ provider: "runpod", gpu: "4090", model: MODEL, max_minutes: 30 });
    expect(res.status).toBe(202);
    const lease = (await res.json()) as Lease & { inference_key: string };
    await driveTo(lease.id, "running", { clock, maxAlarms: 200 });

    const headers = {
      Cookie: "session=s3cret-cookie",
      "X-Client-Trace": "trace-42",
      "True-Client-IP": "203.0.113.7",
      "CF-Connecting-IPv6": "2001:db8::7",
      Forwarded: "for=203.0.113.7",
      "CF-IPCountry": "NL",
      "User-Agent": "openai-node/4.0",
    };
    // The keeper's own probes reached the proxy before: only what the gateway sends from here on.
    const sentBefore = fakes.requests.length;
    const chat = await llm(lease.id, "v1/chat/completions", {
      key: lease.inference_key,
      headers,
      json: chatBody("hi"),
    });
    expect(chat.res.status).toBe(200);
    expect(JSON.parse(chat.text)).toMatchObject({ object: "chat.completion" });
    const tags = await llm(lease.id, "api/tags", { key: "test-admin-token-0123456789", headers });
    expect(tags.res.status).toBe(200);

    const through = fakes.requests
      .slice(sentBefore)
      .filter((r) => new URL(r.url).hostname === `${lease.provider_ref}-11434.proxy.runpod.fake`);
    expect(through.map((r) => `${r.method} ${new URL(r.url).pathname}`)).toEqual([
      "POST /v1/chat/completions",
      "GET /api/tags",
    ]);
    for (const request of through) {
      expect(request.headers.get("authorization")).toBeNull();
      expect(request.headers.get("cookie")).toBeNull();
      // The caller's address and anything not on the allow-list stay with the worker.
      for (const name of ["x-client-trace", "true-client-ip", "cf-connecting-ipv6", "forwarded", "cf-ipcountry"])
        expect(request.headers.get(name), name).toBeNull();
      expect(request.headers.get("user-agent")).toBe("openai-node/4.0");
      if (request.method === "POST") expect(request.headers.get("content-type")).toContain("application/json");
      const sent = [...request.headers].map(([k, v]) => `${k}: ${v}`).join("\n");
      expect(sent).not.toContain("203.0.113.7");
      expect(sent).not.toContain(lease.inference_key);
      expect(sent).not.toContain("test-admin-token");
    }
  });
});

/** The lease_usage row as D1 has it (what GET shows), or null. */
async function usageRow(id: string) {
  return env.DB.prepare("SELECT requests, updated_at FROM lease_usage WHERE lease_id = ?")
    .bind(id)
    .first<{ requests: number; updated_at: string }>();
}

/** The median as the meter rounds it. */
function medianOf(values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y);
  const mid = Math.floor(sorted.length / 2);
  const value = sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return Math.round(value * 100) / 100;
}

describe("metering", () => {
  it("usage from both APIs, streamed and not, equals the server's own counts; cost per million from the lease's cost", async () => {
    const a = await runningModel();
    let prompt = 0;
    let completion = 0;
    const decode: number[] = [];
    const ollamaCounts = (o: { prompt_eval_count?: number; eval_count?: number; eval_duration?: number }) => {
      prompt += o.prompt_eval_count ?? 0;
      completion += o.eval_count ?? 0;
      if (o.eval_count && o.eval_duration)
        // Timed from the first token, as the runner times it: eval_count − 1 tokens in eval_duration.
        decode.push(Math.round(((o.eval_count - 1) / (o.eval_duration / 1e9)) * 100) / 100);
    };
    const openaiCounts = (usage: { prompt_tokens: number; completion_tokens: number }) => {
      prompt += usage.prompt_tokens;
      completion += usage.completion_tokens;
    };
    const ok = async (path: string, init: LlmInit) => {
      const r = await llm(a.id, path, init);
      expect(r.res.status, `${path} ${r.text}`).toBe(200);
      return r.text;
    };
    // 1-2: OpenAI JSON
    for (const content of ["What is one plus one?", "Name a colour."]) {
      openaiCounts(JSON.parse(await ok("v1/chat/completions", { key: a.key, json: chatBody(content) })).usage);
    }
    // 3-4: OpenAI SSE, asking for the usage chunk as a metering client would
    for (const content of ["Count to three.", "Tell a very short story about a GPU that rents itself."]) {
      const json = chatBody(content, { stream: true, stream_options: { include_usage: true } });
      const text = await ok("v1/chat/completions", { key: a.key, json });
      const usage = text
        .split("\n\n")
        .map((e) => e.replace(/^data: /, ""))
        .filter((e) => e.startsWith("{"))
        .map((e) => JSON.parse(e))
        .find((e) => e.usage)?.usage;
      openaiCounts(usage);
    }
    // 5-6: Ollama JSON (generate, chat)
    ollamaCounts(
      JSON.parse(await ok("api/generate", { key: a.key, json: { model: MODEL, prompt: "Hi", stream: false } })),
    );
    ollamaCounts(JSON.parse(await ok("api/chat", { key: a.key, json: { ...chatBody("Hello there"), stream: false } })));
    // 7-8: Ollama NDJSON (generate, chat)
    for (const path of ["api/generate", "api/chat"]) {
      const json = path === "api/generate" ? { model: MODEL, prompt: "Stream it" } : chatBody("Stream it too");
      const lines = (await ok(path, { key: a.key, json })).split("\n").filter(Boolean);
      ollamaCounts(JSON.parse(lines.at(-1)!));
    }
    // 9: no tokens; 10: the server's own error (an unknown model) counts as an error.
    await ok("api/tags", { key: a.key });
    const missing = await llm(a.id, "v1/chat/completions", {
      key: a.key,
      json: { ...chatBody("x"), model: "nope:1b" },
    });
    expect(missing.res.status).toBe(404);
    expect(prompt).toBeGreaterThan(0);
    expect(completion).toBeGreaterThan(0);
    expect(decode).toHaveLength(4);

    // The first request was written at once; the rest waits for the next flush (the keeper's alarm).
    expect((await usageRow(a.id))?.requests).toBe(1);
    await fireNext(a.id);
    const { lease } = await leaseBody(a.id);
    // From the lease's own cost beside it (a sim lease bills in USD).
    const cost = lease.cost;
    expect(lease.currency).toBe("USD");
    expect(cost).toBeGreaterThan(0);
    expect(lease.usage).toEqual({
      requests: 10,
      errors: 1,
      prompt_tokens: prompt,
      completion_tokens: completion,
      decode_tokens_per_s: medianOf(decode),
      first_token_ms: expect.any(Number),
      usd_per_million_tokens: Math.round((cost / (prompt + completion)) * 1e6 * 10_000) / 10_000,
      // the sim's answers are well formed: nothing dropped, no line over the bound
      dropped_answers: 0,
      unparsed_lines: 0,
    });
    expect(lease.usage!.first_token_ms).toBeGreaterThanOrEqual(0);
    // Lists leave usage out.
    const listed = ((await (await api("/v1/leases")).json()) as { leases: Lease[] }).leases;
    expect(listed.find((l) => l.id === a.id)?.usage).toBeNull();
  });

  it("a lease with no request through the gateway has usage null", async () => {
    const a = await runningModel();
    expect((await leaseBody(a.id)).lease.usage).toBeNull();
  });

  it("D1 writes are bounded: 20 requests within 5 s of fake time make at most 2 writes; the next alarm writes the rest", async () => {
    const a = await runningModel();
    /** Each write stamps its own time (the clock moves between requests): new stamps count writes. */
    const stamps = new Set<string>();
    const twentyRequests = async (spanMs: number) => {
      const before = stamps.size;
      const start = clock.now;
      for (let i = 0; i < 20; i++) {
        clock.set(start + Math.round((i * spanMs) / 19));
        expect((await llm(a.id, "api/tags", { key: a.key })).res.status).toBe(200);
        const row = await usageRow(a.id);
        if (row) stamps.add(row.updated_at);
      }
      return stamps.size - before;
    };
    // 20 requests in 4.75 s: the first is written, the other 19 wait.
    expect(await twentyRequests(4_750)).toBe(1);
    expect((await usageRow(a.id))!.requests).toBe(1);
    // 20 more over exactly 5 s: the first of them and the one 5 s after it.
    clock.advance(5_000);
    expect(await twentyRequests(5_000)).toBe(2);
    expect((await usageRow(a.id))!.requests).toBe(40);
    // 20 more starting 1 s after that write and ending 4.5 s after it: none written.
    clock.advance(1_000);
    expect(await twentyRequests(3_500)).toBe(0);
    expect((await usageRow(a.id))!.requests).toBe(40);
    await fireNext(a.id);
    const flushed = await usageRow(a.id);
    expect(flushed?.requests).toBe(60);
    expect(flushed?.updated_at).toBe(new Date(clock.now).toISOString());
    expect((await leaseBody(a.id)).lease.usage?.requests).toBe(60);
    // Nothing new: the next alarm writes nothing.
    const stamp = flushed!.updated_at;
    await fireNext(a.id);
    expect((await usageRow(a.id))?.updated_at).toBe(stamp);
  });

  it("counts left unwritten wake the keeper 5 s after the last write, without a provider poll, then it sleeps on", async () => {
    const a = await runningModel();
    const stepAt = (await alarmAt(a.id)) as number;
    expect(stepAt - clock.now).toBeGreaterThan(10_000);
    await llm(a.id, "api/tags", { key: a.key });
    const writtenAt = clock.now;
    clock.advance(1_000);
    await llm(a.id, "api/tags", { key: a.key });
    expect((await usageRow(a.id))?.requests).toBe(1);
    // The flush wake comes 5 s after the write, not at the step's beat.
    expect(await alarmAt(a.id)).toBe(writtenAt + 5_000);
    const costBefore = (await getLease(env.DB, a.id))?.cost;
    await fireNext(a.id);
    expect((await usageRow(a.id))?.requests).toBe(2);
    // A flush-only wake polls no provider (a poll would have moved the cost on), and hands back
    // to the step's own time.
    expect((await getLease(env.DB, a.id))?.cost).toBe(costBefore);
    expect(await alarmAt(a.id)).toBe(stepAt);
  });

  it("a request that arrives 5 s after the last write writes at once", async () => {
    const a = await runningModel();
    await llm(a.id, "api/tags", { key: a.key });
    await llm(a.id, "api/tags", { key: a.key });
    expect((await usageRow(a.id))?.requests).toBe(1);
    clock.advance(5_000);
    await llm(a.id, "api/tags", { key: a.key });
    expect((await usageRow(a.id))?.requests).toBe(3);
  });
});

describe("a client that goes away mid-stream", () => {
  it("after the first chunk (its signal aborted, its body cancelled, or both): no error, the machine keeps serving, each request counted", async () => {
    const a = await runningModel();
    const errors: string[] = [];
    const spy: MockInstance = vi.spyOn(console, "error").mockImplementation((...args: unknown[]) => {
      errors.push(args.map(String).join(" "));
    });
    try {
      for (const mode of ["abort", "cancel", "both"] as const) {
        const controller = new AbortController();
        const { res, settled } = await llmCall(a.id, "v1/chat/completions", {
          key: a.key,
          json: chatBody("A long answer, please, that I will not wait for", { stream: true }),
          signal: controller.signal,
        });
        expect(res.status).toBe(200);
        const reader = res.body!.getReader();
        const first = await reader.read();
        expect(first.done).toBe(false);
        expect(new TextDecoder().decode(first.value)).toContain("chat.completion.chunk");
        if (mode !== "cancel") controller.abort();
        if (mode !== "abort") await reader.cancel();
        else await reader.read().catch(() => undefined);
        await settled();
      }
      // The streams' remaining 20 ms pieces would have come by now.
      await new Promise((resolve) => setTimeout(resolve, 600));

      // The server still answers the next request.
      const next = await llm(a.id, "v1/chat/completions", { key: a.key, json: chatBody("Still there?") });
      expect(next.res.status).toBe(200);
      await fireNext(a.id);
      const usage = (await leaseBody(a.id)).lease.usage;
      expect(errors).toEqual([]);
      // All four are counted: the three cut short (no tokens: the server states them at the end,
      // which never came) as requests but not errors (the machine did not fail), and the last.
      expect(usage).toMatchObject({ requests: 4, errors: 0 });
      expect(usage?.completion_tokens).toBe(JSON.parse(next.text).usage.completion_tokens);
    } finally {
      spy.mockRestore();
    }
  });
});

describe("INFER_RATE_LIMIT_PER_MIN", () => {
  it("the 4th request of a minute per key is refused with Retry-After; tokens and /v1 keep their own counts", async () => {
    const a = await runningModel();
    // The rental's own /v1 requests out of the window.
    clock.advance(61_000);
    overlayVars({ INFER_RATE_LIMIT_PER_MIN: "3", RATE_LIMIT_PER_MIN: "4" });
    for (let i = 0; i < 3; i++) expect((await llm(a.id, "api/tags", { key: a.key })).res.status).toBe(200);
    const { res } = await llmCall(a.id, "api/tags", { key: a.key });
    expect(res.status).toBe(429);
    expect((await gatewayError(res, "api/tags")).message).toContain("requests a minute");
    const retry = Number(res.headers.get("Retry-After"));
    expect(retry).toBeGreaterThan(0);
    expect(retry).toBeLessThanOrEqual(60);

    // The admin's inference requests have their own count, apart from the key's and from /v1's.
    const admin = "test-admin-token-0123456789";
    for (let i = 0; i < 3; i++) expect((await llm(a.id, "api/tags", { key: admin })).res.status).toBe(200);
    expect((await llmCall(a.id, "api/tags", { key: admin })).res.status).toBe(429);
    // /v1 for the admin: its 4 a minute are untouched by the 4 /llm requests above.
    for (let i = 0; i < 4; i++) expect((await api(`/v1/leases/${a.id}`)).status).toBe(200);
    expect((await api(`/v1/leases/${a.id}`)).status).toBe(429);

    // A minute later the key gets through again.
    clock.advance(retry * 1000);
    expect((await llm(a.id, "api/tags", { key: a.key })).res.status).toBe(200);
  });

  it("fails open, logged, when the limiter cannot be reached (as /v1 and sign-in do)", async () => {
    const a = await runningModel();
    overlayVars({ INFER_RATE_LIMIT_PER_MIN: "3" });
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const unreachable = {
        getByName: () => ({ admit: () => Promise.reject(new Error("Durable Object is overloaded")) }),
      };
      const ctx = createExecutionContext();
      const res = await worker.fetch(
        apiRequest(`/llm/${a.id}/api/tags`, { token: a.key }) as Request<unknown, IncomingRequestCfProperties>,
        { ...env, RATE_LIMITER: unreachable } as unknown as Env,
        ctx,
      );
      await res.text();
      await waitOnExecutionContext(ctx);
      expect(res.status).toBe(200);
      expect(logged).toHaveBeenCalledWith(
        expect.objectContaining({
          level: "error",
          event: "rate_limiter_unavailable",
          outcome: "request let through",
          request_id: expect.stringMatching(/^req_/),
        }),
      );
    } finally {
      logged.mockRestore();
    }
  });

  it("unlimited by default", async () => {
    const a = await runningModel();
    for (let i = 0; i < 30; i++) expect((await llm(a.id, "api/tags", { key: a.key })).res.status).toBe(200);
  });
});

/** Records webhook deliveries (the sender posts them to hooks.example.com). */
class HookSink implements FakeService {
  readonly bodies: string[] = [];
  handles(url: URL): boolean {
    return url.hostname === "hooks.example.com";
  }
  async handle(request: Request): Promise<Response> {
    this.bodies.push(await request.text());
    return new Response("ok");
  }
}

describe("no key and no prompt text in logs, events, D1 or webhooks", () => {
  it("a prompt with a marker, streamed and not, through both APIs, and a rotation", async () => {
    const lines: string[] = [];
    const spies = (["log", "info", "warn", "error", "debug"] as const).map((method) =>
      vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
        lines.push(args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" "));
      }),
    );
    try {
      fakes.restore();
      const hooks = new HookSink();
      fakes = installFakes(registry, hooks);
      const hook = await api("/v1/webhooks", {
        method: "POST",
        json: { url: "https://hooks.example.com/x", events: ["*"] },
      });
      expect(hook.status).toBe(201);

      const a = await runningModel();
      const marker = "zq-marker-7f3e9b21-prompt";
      const send = [
        ["v1/chat/completions", chatBody(`tell me about ${marker}`)],
        ["v1/chat/completions", chatBody(`stream about ${marker}`, { stream: true })],
        ["api/generate", { model: MODEL, prompt: `generate ${marker}`, stream: false }],
        ["api/chat", chatBody(`chat ${marker}`)],
      ] as const;
      for (const [path, json] of send) {
        const r = await llm(a.id, path, { key: a.key, json });
        expect(r.res.status).toBe(200);
        // The answer itself echoes the prompt (the sim's model does, a streamed one token by token): it went through.
        expect(r.text).toContain("marker");
      }
      // A refused request and a bad key, with the marker in the body.
      await llm(a.id, "api/pull", { key: a.key, json: { model: marker } });
      await llm(a.id, "api/generate", { key: `glk_${marker}`, json: { model: MODEL, prompt: marker } });
      const rotated = (await (await api(`/v1/leases/${a.id}/inference-key`, { method: "POST" })).json()) as {
        inference_key: string;
      };
      await fireNext(a.id);
      await api(`/v1/leases/${a.id}/stop`, { method: "POST" });
      await driveTo(a.id, "stopped", { clock, maxAlarms: 400 });
      // The sender's alarm is set on the test's clock, which workerd never reaches: one round by hand.
      const round = await deliverDue(createServices(env, loadConfig(env)), (request) => hooks.handle(request));
      expect(round.delivered).toBeGreaterThan(0);
      expect(hooks.bodies.join("\n")).toContain(a.id);

      const places: { where: string; text: string }[] = [
        { where: "events", text: await eventsText(a.id) },
        { where: "lease", text: (await leaseBody(a.id)).text },
        { where: "console", text: lines.join("\n") },
        { where: "webhook deliveries", text: hooks.bodies.join("\n") },
      ];
      const tables = await env.DB.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%' AND name NOT LIKE 'sqlite_%'",
      ).all<{ name: string }>();
      for (const { name } of tables.results) {
        const rows = await env.DB.prepare(`SELECT * FROM "${name}"`).all();
        places.push({ where: `D1 ${name}`, text: JSON.stringify(rows.results) });
      }
      // Not vacuous: the lease's webhooks were written and logs were kept.
      const outbox = places.find((p) => p.where === "D1 webhook_events")!.text;
      expect(outbox).toContain("lease.running");
      expect(places.find((p) => p.where === "events")!.text).toContain("inference_key_rotated");
      for (const { where, text } of places) {
        expect(text, where).not.toContain(marker);
        expect(text, where).not.toContain(a.key);
        expect(text, where).not.toContain(rotated.inference_key);
        expect(text, where).not.toContain(a.key.slice(4, 24));
      }
    } finally {
      for (const spy of spies) spy.mockRestore();
    }
  });
});

describe("a schedule's model lease: its key comes in the lease.running webhook only", () => {
  it("not in the run's answer, GET, events or D1 in plain text; a JSON webhook carries it (every try), Slack never; rotation and stop clear the seal", async () => {
    await emptyTables(WEBHOOK_TABLES);
    fakes.restore();
    const hooks = new FailingOnceHookSink();
    fakes = installFakes(registry, hooks);
    for (const [path, format] of [
      ["json", "json"],
      ["slack", "slack"],
    ] as const) {
      const hook = await api("/v1/webhooks", {
        method: "POST",
        json: { url: `https://hooks.example.com/${path}`, events: ["lease.running"], format },
      });
      expect(hook.status).toBe(201);
    }
    const schedule = await api("/v1/schedules", {
      method: "POST",
      json: { name: "nightly-llm", cron: "0 2 * * *", lease: { provider: "sim", model: MODEL, max_minutes: 30 } },
    });
    expect(schedule.status).toBe(201);
    const { id: scheduleId } = (await schedule.json()) as { id: string };
    const run = await api(`/v1/schedules/${scheduleId}/run`, { method: "POST" });
    const runText = await run.text();
    expect(run.status).toBe(202);
    expect(runText).not.toContain("glk_");
    const leaseId = (JSON.parse(runText) as Lease).id;
    await driveTo(leaseId, "running", { clock, maxAlarms: 200 });

    const services = createServices(env, loadConfig(env));
    // The JSON receiver fails its first try: the retry must carry the key again.
    expect((await deliverDue(services, (request) => hooks.handle(request))).delivered).toBe(1);
    clock.advance(60_000);
    expect((await deliverDue(services, (request) => hooks.handle(request))).delivered).toBe(1);
    const json = hooks.received.filter((r) => r.path === "/json").map((r) => JSON.parse(r.body));
    expect(json).toHaveLength(2);
    const key = json[0].data.inference_key as string;
    expect(key).toMatch(/^glk_[A-Za-z0-9_-]{40,}$/);
    expect(json[1].data.inference_key).toBe(key);
    expect(json[0].data.lease.id).toBe(leaseId);
    const slack = hooks.received.filter((r) => r.path === "/slack");
    expect(slack).toHaveLength(1);
    expect(slack[0]!.body).toContain(leaseId);
    expect(slack[0]!.body).not.toContain("glk_");

    // The key opens the lease's gateway.
    expect((await llm(leaseId, "v1/models", { key })).res.status).toBe(200);

    const row = await env.DB.prepare("SELECT inference_key_sealed, inference_key_hash FROM leases WHERE id = ?")
      .bind(leaseId)
      .first<{ inference_key_sealed: string | null; inference_key_hash: string }>();
    expect(row?.inference_key_sealed).toMatch(/^v1:/);
    expect(row?.inference_key_hash).toBe(await sha256Hex(key));
    const places = [(await leaseBody(leaseId)).text, await eventsText(leaseId)];
    for (const table of ["leases", "webhook_events", "lease_events", "schedule_runs"]) {
      places.push(JSON.stringify((await env.DB.prepare(`SELECT * FROM ${table}`).all()).results));
    }
    for (const text of places) {
      expect(text).not.toContain(key);
      expect(text).not.toContain(key.slice(4, 24));
    }

    // A rotation answers the new key to its caller and the seal goes: no later delivery sends the old key.
    const rotated = await api(`/v1/leases/${leaseId}/inference-key`, { method: "POST" });
    expect(rotated.status).toBe(200);
    const sealedAfter = () =>
      env.DB.prepare("SELECT inference_key_sealed AS s FROM leases WHERE id = ?")
        .bind(leaseId)
        .first<{ s: string | null }>();
    expect((await sealedAfter())?.s).toBeNull();
    expect((await llm(leaseId, "v1/models", { key })).res.status).toBe(401);
  });

  it("a lease the worker rents for a schedule gets its seal cleared once stopped", async () => {
    const schedule = await api("/v1/schedules", {
      method: "POST",
      json: { name: "nightly-llm-2", cron: "0 2 * * *", lease: { provider: "sim", model: MODEL, max_minutes: 30 } },
    });
    const { id: scheduleId } = (await schedule.json()) as { id: string };
    const leaseId = ((await (await api(`/v1/schedules/${scheduleId}/run`, { method: "POST" })).json()) as Lease).id;
    const sealed = () =>
      env.DB.prepare("SELECT inference_key_sealed AS s FROM leases WHERE id = ?")
        .bind(leaseId)
        .first<{ s: string | null }>();
    expect((await sealed())?.s).toMatch(/^v1:/);
    await driveTo(leaseId, "running", { clock, maxAlarms: 200 });
    await api(`/v1/leases/${leaseId}/stop`, { method: "POST" });
    await driveTo(leaseId, "stopped", { clock, maxAlarms: 400 });
    expect((await sealed())?.s).toBeNull();
  });
});

/** Records deliveries by path; the JSON path answers 500 to its first try. */
class FailingOnceHookSink implements FakeService {
  readonly received: { path: string; body: string }[] = [];
  private failedJson = false;
  handles(url: URL): boolean {
    return url.hostname === "hooks.example.com";
  }
  async handle(request: Request): Promise<Response> {
    const path = new URL(request.url).pathname;
    this.received.push({ path, body: await request.text() });
    if (path === "/json" && !this.failedJson) {
      this.failedJson = true;
      return new Response("busy", { status: 500 });
    }
    return new Response("ok");
  }
}
