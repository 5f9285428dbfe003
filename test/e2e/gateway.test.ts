import { Ollama } from "ollama";
import OpenAI from "openai";
import { beforeAll, describe, expect, inject, test } from "vitest";
import { type LeaseBase, leaseApi } from "./lease-api";
import { openaiCalls } from "./openai-calls";

/*
 * A model lease called as the README shows it, through the worker's LLM gateway: rented with the
 * admin token, its inference key kept from the 202 answer, followed on its event stream until
 * `running`, then called at `/llm/{lease_id}` with the official `openai` and `ollama` npm clients.
 * The worker keeps the API's default rate limits (60 requests a minute), so the lease is followed
 * on one event stream and its usage polled a few times only.
 */

const { baseUrl: base, adminToken } = inject("workers").gateway;
const MODEL = "llama3.2:1b";
const WRONG_KEY = `glk_${"0".repeat(43)}`;

interface Usage {
  requests: number;
  errors: number;
  prompt_tokens: number;
  completion_tokens: number;
  decode_tokens_per_s: number | null;
  first_token_ms: number | null;
  usd_per_million_tokens: number | null;
}

interface Lease extends LeaseBase {
  inference_key?: string;
  usage?: Usage | null;
}

const { api, getLease, eventsUntil, stopAndVerify, quickModelBoots, rentModel } = leaseApi<Lease>(base, adminToken);

/** Calls made through the openai client: a completion, a stream, the model list. */
function throughOpenAI(baseURL: string, key: string): Promise<number> {
  return openaiCalls(new OpenAI({ baseURL, apiKey: key }), MODEL);
}

/** Calls made through the ollama client: a chat, a streamed chat, the model list. */
async function throughOllama(host: string, key: string): Promise<number> {
  const ollama = new Ollama({ host, headers: { Authorization: `Bearer ${key}` } });
  const answer = await ollama.chat({ model: MODEL, messages: [{ role: "user", content: "Say hi" }] });
  expect(answer.done).toBe(true);
  expect(answer.message.content.trim()).toBeTruthy();
  expect(answer.eval_count).toBeGreaterThan(0);

  const parts = await ollama.chat({ model: MODEL, messages: [{ role: "user", content: "Say hi" }], stream: true });
  let streamed = "";
  let chunks = 0;
  let done = false;
  for await (const part of parts) {
    chunks += 1;
    streamed += part.message.content;
    done ||= part.done;
  }
  expect(chunks).toBeGreaterThan(1);
  expect(done).toBe(true);
  expect(streamed.trim()).toBeTruthy();

  const { models } = await ollama.list();
  expect(models.map((m) => m.name)).toContain(MODEL);
  return 3;
}

/** The gateway's 401 as each client reports it: the error carries the status. */
async function wrongKeyRefused(host: string): Promise<void> {
  const openai = new OpenAI({ baseURL: `${host}/v1`, apiKey: WRONG_KEY, maxRetries: 0 });
  const refused = await openai.models.list().then(
    () => null,
    (error: unknown) => error,
  );
  expect(refused).toBeInstanceOf(OpenAI.AuthenticationError);
  expect(refused).toMatchObject({ status: 401 });

  const ollama = new Ollama({ host, headers: { Authorization: `Bearer ${WRONG_KEY}` } });
  await expect(ollama.list()).rejects.toMatchObject({ name: "ResponseError", status_code: 401 });
}

/**
 * Polls the lease until its usage counts `requests` calls. The keeper writes its counts at most
 * every 5 s when a request comes in, and at its next step: after a burst, the last counts wait for
 * a running lease's beat (a minute), so the lease is looked at every 5 s for 75 s, well within the
 * API's 60 a minute.
 */
async function usageOnceFlushed(id: string, requests: number): Promise<Usage | null | undefined> {
  let usage: Usage | null | undefined;
  for (let look = 0; look < 16; look += 1) {
    usage = (await getLease(id)).usage;
    if (usage && usage.requests >= requests) return usage;
    await new Promise((resolve) => setTimeout(resolve, 5_000));
  }
  return usage;
}

/** Follows the rented lease to running, calls it through the gateway with both clients, stops it. */
async function callThenStop(id: string, key: string): Promise<boolean> {
  const events = await eventsUntil(id, "running");
  expect(events.at(-1)?.kind, JSON.stringify(events)).toBe("running");
  const running = await getLease(id);
  expect(running.status).toBe("running");
  // Shown once: the key is in no later answer.
  expect(running).not.toHaveProperty("inference_key");

  const host = `${base}/llm/${id}`;
  const calls = (await throughOpenAI(`${host}/v1`, key)) + (await throughOllama(host, key));
  await wrongKeyRefused(host);
  // The key opens its lease's gateway only, nothing under /v1.
  expect((await api(`/v1/leases/${id}`, { headers: { Authorization: `Bearer ${key}` } })).status).toBe(401);

  const usage = await usageOnceFlushed(id, calls);
  expect(usage?.requests).toBeGreaterThanOrEqual(calls);
  expect(usage?.prompt_tokens).toBeGreaterThan(0);
  expect(usage?.completion_tokens).toBeGreaterThan(0);

  await stopAndVerify(id, events.at(-1)?.seq ?? 0);
  // The stop's step writes what was counted; nothing is lost with the machine.
  expect((await getLease(id)).usage).toMatchObject({ requests: usage?.requests, errors: 0 });
  // A stopped lease's gateway answers 409, to the right key too.
  const after = new OpenAI({ baseURL: `${host}/v1`, apiKey: key, maxRetries: 0 });
  await expect(after.models.list()).rejects.toMatchObject({ status: 409 });
  return true;
}

beforeAll(() => quickModelBoots());

describe("a model lease through the LLM gateway", () => {
  test("rent llama3.2:1b, call it with the openai and ollama clients and its inference key, read its usage", async () => {
    const rented = await rentModel(MODEL);
    const key = rented.inference_key as string;
    expect(key).toMatch(/^glk_/);
    const id = rented.id;
    let verified = false;
    try {
      verified = await callThenStop(id, key);
    } finally {
      // A failed expectation above must not leave the machine to max_minutes.
      if (!verified) await api(`/v1/leases/${id}/stop`, { method: "POST" });
    }
  }, 200_000);
});
