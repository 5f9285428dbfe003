// The LLM gateway's cost, against a fake Ollama on loopback (bench/lib/fake-ollama.mjs) behind a
// RunPod model lease (the RunPod fake, its proxy template pointed at the fake Ollama), through
// `/llm/{lease}/v1/chat/completions` vs the machine's own URL:
//   node bench/gateway.mjs [sequential=300] [concurrent=200] [d1_requests=1000]
// - the goal, measured side by side (each round: direct, gateway, the worker's GET /health, in
//   rotating order): gateway p50 ≤ 1.25 × (/health p50 + direct p50), non-streaming and for the
//   first streamed chunk; the ratio holds on a loaded machine where milliseconds drift
// - D1 statements and Durable Object calls per gateway request, counted inside the worker
//   (bench/lib/counting-entry.ts: the worker with its bindings counted; goal 0 D1, ≤ 1 DO call)
// - added latency p50/p95 (paired gateway − direct, non-streaming; goal ≤ 5 ms p50)
// - time to first streamed chunk added (paired, SSE; goal ≤ 5 ms p50)
// - `concurrent` streams through the gateway at once, held open together (goal: 0 errors)
// - D1 writes per 1,000 requests (goal ≤ 10): the local D1's lease_usage row (the worker's state
//   folder, sqlite) sampled every 50 ms; each new updated_at is one write of the meter.
// Local `wrangler dev` on a shared machine, not Cloudflare's edge: absolute figures differ there.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, startWorker, stats } from "../scripts/lib/local-worker.mjs";
import { startFakeCloud } from "./lib/fake-cloud.mjs";
import { startFakeOllama } from "./lib/fake-ollama.mjs";
import { startFakeRegistry } from "./lib/fake-registry.mjs";
import { localD1File, sqlite } from "./lib/local-d1.mjs";

const sequential = Number(process.argv[2] ?? 300);
const concurrent = Number(process.argv[3] ?? 200);
const d1Requests = Number(process.argv[4] ?? 1000);
const RUN_LIMIT_MS = 10 * 60_000;
const MODEL = "llama3.2:1b";
const wallStart = Date.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The worker's state folder is made under os.tmpdir(): a private one, so its sqlite is ours alone.
const privateTmp = mkdtempSync(join(tmpdir(), "gpulease-gwbench-"));
process.env.TMPDIR = privateTmp;

const registry = await startFakeRegistry();
const size = registry.models.llama32_1b.layers[0].size;
const ollama = await startFakeOllama({ model: MODEL, size, delayMs: 10, chunkMs: 2, chunks: 8 });
const cloud = await startFakeCloud({ basePort: await freePort(), bootMs: 1_000, lingerMs: 500 });
const worker = await startWorker({
  main: "bench/lib/counting-entry.ts",
  vars: [
    ...cloud.varArgs,
    "--var",
    `RUNPOD_PROXY_TEMPLATE:${ollama.url}/pod/{id}-{port}`,
    "--var",
    `OLLAMA_REGISTRY_URL:${registry.url}`,
    "--var",
    "SIM_MODELS:registry",
  ],
});
let stopped = false;
async function stopEverything() {
  if (stopped) return;
  stopped = true;
  await worker.stop();
  await Promise.all([cloud.close(), registry.close(), ollama.close()]);
  rmSync(privateTmp, { recursive: true, force: true });
}
const limit = setTimeout(async () => {
  console.error(`gateway: gave up after ${RUN_LIMIT_MS / 1000} s`);
  await stopEverything();
  process.exit(1);
}, RUN_LIMIT_MS);

const json = (path, init) => worker.json(path, init);

function usageRow(file, leaseId) {
  let row;
  try {
    row = sqlite(file, `SELECT requests, updated_at FROM lease_usage WHERE lease_id = '${leaseId}';`);
  } catch (error) {
    return { error: error.message };
  }
  const [requests, updatedAt] = row.split("|");
  return requests ? { requests: Number(requests), updatedAt } : { requests: 0, updatedAt: null };
}

const chatBody = (stream) =>
  JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Say hi." }], max_tokens: 8, stream });

/** One request: ms to the headers, ms to the first body chunk, ms to the end; throws on a non-200. */
async function timed(url, key, stream) {
  const t0 = performance.now();
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...(key ? { Authorization: `Bearer ${key}` } : {}) },
    body: chatBody(stream),
  });
  const headers = performance.now() - t0;
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  const reader = res.body.getReader();
  let first = null;
  let text = "";
  const decoder = new TextDecoder();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    first ??= performance.now() - t0;
    text += decoder.decode(value, { stream: true });
  }
  const total = performance.now() - t0;
  if (stream && !text.includes("data: [DONE]")) throw new Error(`${url}: stream ended without [DONE]`);
  if (!stream && !JSON.parse(text).choices?.[0]?.message) throw new Error(`${url}: no completion`);
  return { headers, first, total };
}

const f1 = (x) => (typeof x === "number" ? x.toFixed(2) : String(x));
let failed = false;
let measured = 0;
try {
  const lease = await json("/v1/leases", {
    method: "POST",
    body: JSON.stringify({
      name: "gateway-bench",
      provider: "runpod",
      template: "ollama",
      model: MODEL,
      max_minutes: 10,
    }),
  });
  if (!lease.inference_key?.startsWith("glk_")) throw new Error(`no inference key in ${JSON.stringify(lease)}`);
  let row = lease;
  for (const deadline = Date.now() + 120_000; row.status === "provisioning" && Date.now() < deadline; ) {
    await sleep(1_000);
    row = await json(`/v1/leases/${lease.id}`);
  }
  if (row.status !== "running") throw new Error(`lease ${lease.id} is ${row.status}: ${row.error ?? ""}`);
  const direct = `${row.access.urls[0].replace(/\/+$/, "")}/v1/chat/completions`;
  if (!direct.startsWith(ollama.url)) throw new Error(`the lease's URL ${row.access.urls[0]} is not the fake Ollama`);
  const gateway = `${worker.base}/llm/${lease.id}/v1/chat/completions`;
  const key = lease.inference_key;
  console.log(
    `gateway bench: RunPod fake lease ${lease.id} (${MODEL}) running after ${((Date.now() - wallStart) / 1000).toFixed(1)} s; fake Ollama ${ollama.state.delayMs} ms to first token, ${ollama.state.chunks} tokens ${ollama.state.chunkMs} ms apart; local wrangler dev`,
  );
  const file = localD1File(worker.persist);
  let gatewayRequests = 0;

  // Warm both paths (connections, the worker's isolate, the keeper's object).
  for (let i = 0; i < 20; i++) {
    await timed(direct, null, false);
    await timed(gateway, key, false);
    gatewayRequests += 1;
  }

  // 0. The local worker's own cost per request (wrangler dev's proxy in front of workerd, no D1):
  // GET /health vs the fake's GET /api/version, paired. Not the gateway's; absent at the edge.
  const floor = [];
  for (let i = 0; i < 100; i++) {
    const t0 = performance.now();
    await (await fetch(`${row.access.urls[0].replace(/\/+$/, "")}/api/version`)).text();
    const t1 = performance.now();
    await (await fetch(`${worker.base}/health`)).text();
    floor.push(performance.now() - t1 - (t1 - t0));
  }
  const fl = stats(floor);

  const health = `${worker.base}/health`;
  const healthTimed = async () => {
    const t0 = performance.now();
    const res = await fetch(health);
    await res.text();
    if (res.status !== 200) throw new Error(`/health: ${res.status}`);
    return performance.now() - t0;
  };
  const rounds = ["dgh", "ghd", "hdg", "gdh", "hgd", "dhg"];
  const counts = async () => (await fetch(`${worker.base}/__bench/counts`)).json();
  const countsBefore = await counts();
  const requestsBefore = gatewayRequests;

  // 1. Added latency, non-streaming: direct, gateway and /health side by side, in rotating order
  // so drift falls on all three.
  const plain = { direct: [], gateway: [], added: [], health: [] };
  for (let i = 0; i < sequential; i++) {
    const t = {};
    for (const which of rounds[i % rounds.length]) {
      if (which === "h") t.h = await healthTimed();
      else t[which] = (await timed(which === "d" ? direct : gateway, which === "d" ? null : key, false)).total;
    }
    gatewayRequests += 1;
    plain.direct.push(t.d);
    plain.gateway.push(t.g);
    plain.health.push(t.h);
    plain.added.push(t.g - t.d);
  }
  // 2. Time to the first streamed chunk, SSE.
  const ttfb = { direct: [], gateway: [], added: [], totalAdded: [], health: [] };
  for (let i = 0; i < sequential; i++) {
    const t = {};
    const whole = {};
    for (const which of rounds[i % rounds.length]) {
      if (which === "h") {
        t.h = await healthTimed();
        continue;
      }
      const r = await timed(which === "d" ? direct : gateway, which === "d" ? null : key, true);
      t[which] = r.first;
      whole[which] = r.total;
    }
    gatewayRequests += 1;
    ttfb.totalAdded.push(whole.g - whole.d);
    ttfb.direct.push(t.d);
    ttfb.gateway.push(t.g);
    ttfb.health.push(t.h);
    ttfb.added.push(t.g - t.d);
  }
  // Read at once: the last request's usage still waits in the gateway's hold
  // (GATEWAY_USAGE_HOLD_MS) for a next request; once the hold passes it is sent on its own.
  const countsAfter = await counts();
  await sleep(2_000);
  const idleFlush = (await counts()).durableObject - countsAfter.durableObject;
  const perRequest = (n) => n / (gatewayRequests - requestsBefore);
  const d1PerRequest = perRequest(countsAfter.d1 - countsBefore.d1);
  const doPerRequest = perRequest(countsAfter.durableObject - countsBefore.durableObject);
  const byObject = Object.entries(countsAfter.byObject)
    .map(([name, n]) => [name, n - (countsBefore.byObject[name] ?? 0)])
    .filter(([, n]) => n > 0)
    .map(([name, n]) => `${name} ${n}`)
    .join(", ");
  console.log(
    `local worker floor (GET /health through wrangler dev − GET /api/version direct, 100 pairs): p50 ${f1(fl.median)} ms, p95 ${f1(fl.p95)} ms — included in the figures below`,
  );
  const a = stats(plain.added);
  const d = stats(plain.direct);
  const g = stats(plain.gateway);
  console.log(
    `added latency (non-streaming, ${sequential} pairs): p50 ${f1(a.median)} ms, p95 ${f1(a.p95)} ms  [direct p50 ${f1(d.median)} / p95 ${f1(d.p95)} ms; gateway p50 ${f1(g.median)} / p95 ${f1(g.p95)} ms] (goal p50 ≤ 5 ms: ${a.median <= 5 ? "met" : "NOT met"})`,
  );
  const ta = stats(ttfb.added);
  const td = stats(ttfb.direct);
  const tg = stats(ttfb.gateway);
  console.log(
    `first streamed chunk added (SSE, ${sequential} pairs): p50 ${f1(ta.median)} ms, p95 ${f1(ta.p95)} ms  [direct p50 ${f1(td.median)} ms; gateway p50 ${f1(tg.median)} ms] (goal p50 ≤ 5 ms: ${ta.median <= 5 ? "met" : "NOT met"}); whole stream added p50 ${f1(stats(ttfb.totalAdded).median)} ms`,
  );
  console.log(
    `less the local worker floor: added latency p50 ≈ ${f1(a.median - fl.median)} ms, first chunk added p50 ≈ ${f1(ta.median - fl.median)} ms`,
  );
  const ratio = (gatewayP50, healthP50, directP50) => gatewayP50 / (healthP50 + directP50);
  const h1 = stats(plain.health).median;
  const h2 = stats(ttfb.health).median;
  const plainRatio = ratio(g.median, h1, d.median);
  const firstRatio = ratio(tg.median, h2, td.median);
  console.log(
    `GOAL gateway p50 / (/health p50 + direct p50), side by side: non-streaming ${f1(plainRatio)} (${f1(g.median)} / (${f1(h1)} + ${f1(d.median)})), first streamed chunk ${f1(firstRatio)} (${f1(tg.median)} / (${f1(h2)} + ${f1(td.median)})) (goal ≤ 1.25: ${plainRatio <= 1.25 && firstRatio <= 1.25 ? "met" : "NOT met"})`,
  );
  console.log(
    `GOAL per gateway request, counted in the worker over ${gatewayRequests - requestsBefore} requests: ${f1(d1PerRequest)} D1 statements, ${f1(doPerRequest)} Durable Object calls [${byObject || "none"}], and ${idleFlush} call sending the last request's usage once the hold passed with no next request (goal 0 D1, ≤ 1 DO call: ${d1PerRequest === 0 && doPerRequest <= 1 ? "met" : "NOT met"})`,
  );
  if (plain.added.length && ttfb.added.length && Number.isFinite(plainRatio)) measured += 2;
  else failed = true;

  // 3. Concurrent streams: each lasts ~2 s at the fake, so all are open together.
  const saved = { ...ollama.state };
  Object.assign(ollama.state, { chunkMs: 100, chunks: 20, peakOpen: ollama.state.open });
  const started = performance.now();
  const results = await Promise.allSettled(
    Array.from({ length: concurrent }, () =>
      fetch(gateway, {
        method: "POST",
        headers: { "Content-Type": "application/json", Authorization: `Bearer ${key}` },
        body: JSON.stringify({
          model: MODEL,
          messages: [{ role: "user", content: "hi" }],
          max_tokens: 20,
          stream: true,
        }),
      }).then(async (res) => {
        const text = await res.text();
        if (res.status !== 200) throw new Error(`${res.status} ${text.slice(0, 200)}`);
        const chunks = (text.match(/"content":"tok "/g) ?? []).length;
        if (chunks !== 20 || !text.includes("data: [DONE]")) throw new Error(`stream cut short: ${chunks}/20 chunks`);
      }),
    ),
  );
  gatewayRequests += concurrent;
  const heldFor = (performance.now() - started) / 1000;
  const errors = results.filter((r) => r.status === "rejected");
  Object.assign(ollama.state, { chunkMs: saved.chunkMs, chunks: saved.chunks });
  console.log(
    `concurrent streams through the gateway: ${concurrent - errors.length}/${concurrent} complete, ${errors.length} errors, peak ${ollama.state.peakOpen} open at the fake Ollama at once, all done in ${heldFor.toFixed(2)} s (each stream ~2 s)`,
  );
  if (errors.length) {
    failed = true;
    const kinds = {};
    for (const e of errors) kinds[String(e.reason).slice(0, 120)] = (kinds[String(e.reason).slice(0, 120)] ?? 0) + 1;
    for (const [k, n] of Object.entries(kinds)) console.log(`  ${n}× ${k}`);
  }
  measured += 1;

  // 4. D1 writes of the meter: the lease_usage row sampled every 50 ms while `d1Requests`
  // sequential requests (half streaming) go through; every new updated_at is one write.
  await sleep(6_000); // lets the previous phases' counts settle into a flush first
  const before = usageRow(file, lease.id);
  if (before.error) throw new Error(`cannot read the local D1: ${before.error}`);
  const seen = new Set(before.updatedAt ? [before.updatedAt] : []);
  let writes = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const r = usageRow(file, lease.id);
      if (r.updatedAt && !seen.has(r.updatedAt)) {
        seen.add(r.updatedAt);
        writes += 1;
      }
      await sleep(50);
    }
  })();
  const d1Start = performance.now();
  for (let i = 0; i < d1Requests; i++) {
    await timed(gateway, key, i % 2 === 1);
    gatewayRequests += 1;
  }
  const d1Seconds = (performance.now() - d1Start) / 1000;
  sampling = false;
  await sampler;
  console.log(
    `D1 writes of the meter (lease_usage upserts seen in the local D1): ${writes} over ${d1Requests} requests in ${d1Seconds.toFixed(1)} s = ${f1((writes / d1Requests) * 1000)} per 1,000 requests (goal ≤ 10: ${(writes / d1Requests) * 1000 <= 10 ? "met" : "NOT met"}; the 5 s flush bound allows ${Math.ceil(d1Seconds / 5)} + the keeper's polls)`,
  );
  if (d1Requests === 0 || (writes / d1Requests) * 1000 > 10) failed = true;
  measured += 1;

  // The meter counted every request: wait for the keeper's next step to flush what is left.
  const flushWait = performance.now();
  let usage = null;
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; await sleep(500)) {
    usage = (await json(`/v1/leases/${lease.id}`)).usage;
    if (usage?.requests >= gatewayRequests) break;
  }
  const after = usageRow(file, lease.id);
  console.log(
    `meter check: ${gatewayRequests} sent through the gateway; lease_usage.requests ${after.requests}, usage.requests ${usage?.requests} (${((performance.now() - flushWait) / 1000).toFixed(1)} s after the last request), errors ${usage?.errors}, tokens ${usage?.prompt_tokens}+${usage?.completion_tokens}, first_token_ms ${usage?.first_token_ms}`,
  );
  const meterShort = usage?.requests !== gatewayRequests || usage?.errors !== 0;

  await json(`/v1/leases/${lease.id}/stop`, { method: "POST" });
  for (const deadline = Date.now() + 60_000; Date.now() < deadline; await sleep(1_000)) {
    row = await json(`/v1/leases/${lease.id}`);
    if (row.status === "stopped" && row.teardown_verified_at) break;
  }
  console.log(
    `lease stopped: ${row.status}, teardown verified ${row.teardown_verified_at ? "yes" : "NO"}; usage.requests after the stop ${row.usage?.requests} of ${gatewayRequests}`,
  );
  if (meterShort && row.usage?.requests !== gatewayRequests) failed = true;
  if (!row.teardown_verified_at) failed = true;
} catch (error) {
  failed = true;
  console.error(`gateway: ${error?.stack ?? error}`);
} finally {
  clearTimeout(limit);
  await stopEverything();
  console.log(`wall time ${((Date.now() - wallStart) / 1000).toFixed(1)} s`);
}
if (failed || measured === 0) process.exitCode = 1;
