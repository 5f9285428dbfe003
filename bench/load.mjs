// Throughput under load: N leases against the sim driven concurrently through the API; every one must end
// `stopped` with teardown verified. Reports throughput and p95 latency of POST and GET /v1/leases.
//   node bench/load.mjs [leases=200] [concurrency=20]
import { startWorker } from "../scripts/lib/local-worker.mjs";
import { measured } from "./lib/measured.mjs";

const total = Number(process.argv[2] ?? 200);
const concurrency = Number(process.argv[3] ?? 20);
const worker = await startWorker({
  sim: true,
  vars: ["--var", `MAX_ACTIVE_LEASES:${total + 10}`, "--var", "POLL_INTERVAL_S:2", "--var", "VERIFY_INTERVAL_S:2"],
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Runs `task(i)` for i < n with at most `limit` in flight; returns each call's latency in ms. */
async function drive(n, limit, task) {
  const latencies = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < n) {
        const i = next++;
        const t = performance.now();
        await task(i);
        latencies.push(performance.now() - t);
      }
    }),
  );
  return { latencies, seconds: (performance.now() - started) / 1000 };
}

try {
  const config = await worker.api("/v1/sim/config", {
    method: "PUT",
    body: JSON.stringify({
      boot_seconds: 2,
      ready_seconds: 1,
      linger_seconds: 2,
      stock_scale: 100,
      credit_usd: 1_000_000,
    }),
  });
  if (!config.ok) throw new Error(`sim config: ${config.status} ${await config.text()}`);

  const ids = [];
  const post = await drive(total, concurrency, async (i) => {
    const res = await worker.api("/v1/leases", {
      method: "POST",
      body: JSON.stringify({
        name: `load-${i}`,
        provider: "sim",
        gpu: "4090",
        template: "custom",
        image: "ghcr.io/gpulease/load:1",
        cmd: "true",
        max_minutes: 2,
      }),
    });
    const body = await res.json();
    if (res.status !== 202) throw new Error(`lease ${i}: ${res.status} ${JSON.stringify(body)}`);
    ids.push(body.id);
  });
  const get = await drive(total, concurrency, async () => {
    const res = await worker.api("/v1/leases?limit=50");
    if (res.status !== 200) throw new Error(`list: ${res.status}`);
    await res.json();
  });

  await sleep(8_000); // let them come up, then stop them all through the API
  const stop = await drive(ids.length, concurrency, async (i) => {
    const res = await worker.api(`/v1/leases/${ids[i]}/stop`, { method: "POST" });
    if (res.status !== 200) throw new Error(`stop: ${res.status}`);
    await res.json();
  });

  const deadline = Date.now() + 5 * 60_000;
  let leases = [];
  while (Date.now() < deadline) {
    leases = [];
    let cursor = null;
    do {
      const res = await worker.api(`/v1/leases?limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      const page = await res.json();
      leases.push(...page.leases);
      cursor = page.next_cursor;
    } while (cursor);
    if (leases.length >= total && leases.every((l) => l.status === "stopped")) break;
    await sleep(3_000);
  }
  const verified = leases.filter((l) => l.status === "stopped" && l.teardown_verified_at).length;
  const running = (await (await worker.api("/v1/sim")).json()).machines.filter((m) => m.state !== "gone").length;
  const p = measured("POST /v1/leases latencies", post.latencies);
  const g = measured("GET /v1/leases latencies", get.latencies);
  const s = measured("stop latencies", stop.latencies);
  console.log(`${total} sim leases, concurrency ${concurrency}, local wrangler dev`);
  console.log(
    `POST /v1/leases: ${(total / post.seconds).toFixed(1)} req/s, p50 ${p.median.toFixed(0)} ms, p95 ${p.p95.toFixed(0)} ms, max ${p.max.toFixed(0)} ms`,
  );
  console.log(
    `GET /v1/leases?limit=50: ${(total / get.seconds).toFixed(1)} req/s, p50 ${g.median.toFixed(0)} ms, p95 ${g.p95.toFixed(0)} ms`,
  );
  console.log(`POST /v1/leases/{id}/stop: p50 ${s.median.toFixed(0)} ms, p95 ${s.p95.toFixed(0)} ms`);
  console.log(
    `ended stopped with teardown verified: ${verified}/${total}; machines still alive at the sim: ${running}`,
  );
  if (verified !== total || running !== 0) process.exitCode = 1;
} finally {
  worker.stop();
}
