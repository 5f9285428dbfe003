// Model endpoints on the sim's defaults (boot 15 s, Ollama ready 5 s, 250 MB/s download), local
// `wrangler dev`, the fake Ollama registry on loopback:
//   node bench/endpoints.mjs [warm_pairs=200]
// - cold start: an endpoint at min_replicas 0, one streamed request held (cold_start_wait_s 180)
//   until its first token, as a ratio to its replica lease's own boot + pull + load (created_at →
//   running_at in the ledger; goal ≤ 1.1); with the replica's cost until it answered
// - added latency per warm request: /llm/v1/chat/completions (model = the endpoint) vs the
//   replica's own /llm/{lease_id}/v1/chat/completions, paired (goal ≤ 1 ms p50)
// - idle cost after the window: idle_minutes 1, then machines alive at the sim after the window
//   and one keeper interval (goal 0), and the replica's teardown verified
// - requests lost during 20 scale-downs (goal 0): the workerd suite's scale-down test
//   (test/endpoints/scale-down.test.ts, fake clock) — a real idle window is minutes per cycle.

import { freePort, startWorker, stats } from "../scripts/lib/local-worker.mjs";
import { startFakeRegistry } from "./lib/fake-registry.mjs";
import { runVitest } from "./lib/vitest-run.mjs";

const pairs = Number(process.argv[2] ?? 200);
/** `warm`: only the cold start and the added latency (no scale-down suite, no idle wait) */
const warmOnly = process.argv[3] === "warm";
const MODEL = "llama3.2:1b";
const RUN_LIMIT_MS = 8 * 60_000;
const POLL_S = 10;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const f2 = (x) => (typeof x === "number" ? x.toFixed(2) : String(x));

let measured = 0;
class Done extends Error {}
let failed = false;

// 1. Requests lost during 20 scale-downs, in the workerd suite (fake clock and alarms).
process.env.ENDPOINT_SCALE_DOWNS = "20";
const lost = warmOnly ? null : runVitest(["test/endpoints/scale-down.test.ts"]);
const lostLine = lost?.out.match(/ENDPOINT_SCALE_DOWNS scale_downs=(\d+) requests=(\d+) lost=(\d+)/);
if (!lost) {
  // warm only
} else if (lost.status === 0 && lostLine) {
  console.log(
    `requests lost during ${lostLine[1]} scale-downs: ${lostLine[3]} of ${lostLine[2]} (goal 0: ${lostLine[3] === "0" ? "met" : "NOT met"})`,
  );
  measured += 1;
  if (lostLine[3] !== "0") failed = true;
} else {
  console.error(`scale-down suite failed or printed no figure:\n${lost.out.slice(-2000)}`);
  failed = true;
}

const registry = await startFakeRegistry();
const worker = await startWorker({
  port: await freePort(),
  sim: true,
  vars: [
    "--var",
    `OLLAMA_REGISTRY_URL:${registry.url}`,
    "--var",
    "SIM_MODELS:registry",
    "--var",
    `POLL_INTERVAL_S:${POLL_S}`,
  ],
});
const json = (path, init) => worker.json(path, init);
const limit = setTimeout(async () => {
  console.error(`endpoints: gave up after ${RUN_LIMIT_MS / 1000} s`);
  await worker.stop();
  await registry.close();
  process.exit(1);
}, RUN_LIMIT_MS);

const chat = (model, stream) =>
  JSON.stringify({ model, messages: [{ role: "user", content: "Say hi." }], max_tokens: 4, stream });

/** ms to the first body chunk and to the end; throws on a non-200. */
async function timed(url, key, body) {
  const t0 = performance.now();
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${key}` },
    body,
  });
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  const reader = res.body.getReader();
  let first = null;
  for (;;) {
    const { done } = await reader.read();
    if (done) break;
    first ??= performance.now() - t0;
  }
  return { first, total: performance.now() - t0 };
}

try {
  const created = await json("/v1/endpoints", {
    method: "POST",
    body: JSON.stringify({ name: "bench", model: MODEL, provider: "sim", cold_start_wait_s: 180, idle_minutes: 1 }),
  });
  const key = created.key;
  if (!key?.startsWith("gle_")) throw new Error(`no endpoint key in ${JSON.stringify(created)}`);

  // 2. Cold start: request → first token, against the replica's own boot + pull + load.
  const cold = await timed(`${worker.base}/llm/v1/chat/completions`, key, chat("bench", true));
  const shown = await json("/v1/endpoints/bench");
  const leaseId = shown.replicas[0]?.lease_id;
  if (!leaseId) throw new Error(`no replica after the cold start: ${JSON.stringify(shown)}`);
  const lease = await json(`/v1/leases/${leaseId}`);
  const own = Date.parse(lease.running_at) - Date.parse(lease.created_at);
  const ratio = cold.first / own;
  console.log(
    `cold start (sim defaults, ${MODEL}): first token after ${(cold.first / 1000).toFixed(1)} s; the replica's own boot + pull + load ${(own / 1000).toFixed(1)} s; ratio ${f2(ratio)} (goal ≤ 1.1: ${ratio <= 1.1 ? "met" : "NOT met"}); replica cost so far ${lease.cost} ${lease.currency} at ${lease.price_per_hour} ${lease.currency}/h`,
  );
  measured += 1;
  if (!(ratio <= 1.1)) failed = true;

  // 3. Added latency of the endpoint's routing over the lease's own gateway, paired, alternating order.
  const viaEndpoint = `${worker.base}/llm/v1/chat/completions`;
  const viaLease = `${worker.base}/llm/${leaseId}/v1/chat/completions`;
  const admin = worker.admin;
  for (let i = 0; i < 10; i++) {
    await timed(viaEndpoint, key, chat("bench", false));
    await timed(viaLease, admin, chat(MODEL, false));
  }
  const added = [];
  for (let i = 0; i < pairs; i++) {
    const order = i % 2 ? ["e", "l"] : ["l", "e"];
    const t = {};
    for (const which of order)
      t[which] =
        which === "e"
          ? (await timed(viaEndpoint, key, chat("bench", false))).total
          : (await timed(viaLease, admin, chat(MODEL, false))).total;
    added.push(t.e - t.l);
  }
  const a = stats(added);
  console.log(
    `added latency per warm request over the lease's gateway (${pairs} pairs, non-streaming): p50 ${f2(a.median)} ms, p95 ${f2(a.p95)} ms (goal p50 ≤ 1 ms: ${a.median <= 1 ? "met" : "NOT met"})`,
  );
  measured += 1;
  if (!(a.median <= 1)) failed = true;

  if (warmOnly) throw new Done();
  // 4. Idle cost after the window: idle_minutes (1) + one keeper interval + the teardown's verification.
  const lastRequest = Date.now();
  let alive = null;
  let verified = null;
  for (const deadline = lastRequest + 60_000 + POLL_S * 1000 + 60_000; Date.now() < deadline; ) {
    await sleep(2_000);
    const sim = await json("/v1/sim");
    const row = await json(`/v1/leases/${leaseId}`);
    alive = sim.machines.length;
    verified = row.teardown_verified_at;
    if (verified && alive === 0) break;
  }
  const after = (Date.now() - lastRequest) / 1000;
  console.log(
    `idle cost after the window (idle_minutes 1): ${alive} machine(s) alive ${after.toFixed(0)} s after the last request; teardown verified ${verified ? "yes" : "no"} (goal 0 alive: ${alive === 0 ? "met" : "NOT met"})`,
  );
  measured += 1;
  if (alive !== 0 || !verified) failed = true;
} catch (error) {
  if (!(error instanceof Done)) {
    console.error(`endpoints bench failed: ${error instanceof Error ? error.message : error}`);
    failed = true;
  }
} finally {
  clearTimeout(limit);
  await worker.stop();
  await registry.close();
}
if (measured === 0) {
  console.error("endpoints bench measured nothing");
  process.exit(1);
}
process.exit(failed ? 1 : 0);
