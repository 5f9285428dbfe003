// Offer fan-out latency: GET /v1/offers with RunPod, Vast.ai and VRAMfarm each answering after D ms.
// Concurrent fan-out means latency / D close to 1 (RunPod needs two queries, run in parallel too),
// not 3. Also the latency of a cached repeat (the shared offers cache, OFFERS_CACHE_S), and
// the provider call budget: provider calls a minute while 20 clients ask for offers at once for S seconds.
//   node bench/offers-latency.mjs [D=300] [rounds=10] [S=60]

import { startWorker } from "../scripts/lib/local-worker.mjs";
import { startFakeCloud } from "./lib/fake-cloud.mjs";
import { measured } from "./lib/measured.mjs";

const delayMs = Number(process.argv[2] ?? 300);
// At most 9 cold rounds a minute: with the warm-up that is 10 distinct Vast.ai searches, its whole-worker budget.
const rounds = Math.min(9, Number(process.argv[3] ?? 9));
const seconds = Number(process.argv[4] ?? 60);
const CLIENTS = 20;
const cloud = await startFakeCloud({ delayMs });
const worker = await startWorker({ vars: cloud.varArgs });
try {
  await worker.api("/v1/offers?vram_gb=1"); // warm the isolate
  const cold = [];
  const cached = [];
  for (let i = 0; i < rounds; i++) {
    const query = `/v1/offers?vram_gb=${2 + i}`; // a new query each round: nothing cached
    let t = performance.now();
    const res = await worker.api(query);
    const body = await res.json();
    cold.push(performance.now() - t);
    if (res.status !== 200 || body.errors.length)
      throw new Error(`unexpected: ${res.status} ${JSON.stringify(body.errors)}`);
    t = performance.now();
    await (await worker.api(query)).json();
    cached.push(performance.now() - t);
  }
  const c = measured("uncached offers latencies", cold);
  const h = measured("cached offers latencies", cached);
  console.log(`D = ${delayMs} ms, ${rounds} rounds, providers: runpod, vast, vramfarm (fakes on loopback)`);
  console.log(
    `uncached: median ${c.median.toFixed(0)} ms, max ${c.max.toFixed(0)} ms -> latency/D = ${(c.median / delayMs).toFixed(2)} (sequential would be >= 3)`,
  );
  console.log(`cached per round: ${cached.map((v) => v.toFixed(0)).join(" ")} ms`);
  console.log(`cached repeat: median ${h.median.toFixed(1)} ms, max ${h.max.toFixed(1)} ms`);

  // The cold rounds spent Vast.ai's 10 searches of this minute: let the window pass first.
  await new Promise((resolve) => setTimeout(resolve, 61_000));
  // 20 clients, each asking one of five queries again and again for S seconds.
  const queries = [8, 16, 24, 48, 80].map((v) => `/v1/offers?vram_gb=${v}`);
  const since = Date.now();
  const until = since + seconds * 1000;
  let answered = 0;
  let failed = 0;
  const latencies = [];
  await Promise.all(
    Array.from({ length: CLIENTS }, async (_, client) => {
      for (let i = client; Date.now() < until; i++) {
        const t = performance.now();
        const res = await worker.api(queries[i % queries.length]);
        const body = await res.json();
        latencies.push(performance.now() - t);
        if (res.status === 200 && !body.errors?.length) answered++;
        else failed++;
      }
    }),
  );
  const minutes = (Date.now() - since) / 60_000;
  const perMinute = (name, filter = () => true) =>
    (cloud.states[name].log.filter((e) => e.at >= since && filter(e)).length / minutes).toFixed(1);
  const l = measured("concurrent offers latencies", latencies);
  console.log(
    `${CLIENTS} concurrent clients for ${seconds} s, 5 distinct queries: ${answered} answers (${(answered / (minutes * 60)).toFixed(0)}/s), ${failed} with an error; latency median ${l.median.toFixed(1)} ms, max ${l.max.toFixed(0)} ms`,
  );
  console.log(
    `provider calls a minute: runpod ${perMinute("runpod")}, vast ${perMinute("vast")} (bundle searches ${perMinute("vast", (e) => e.url.includes("/bundles/"))}, limit 10), vramfarm ${perMinute("vramfarm")}`,
  );
} finally {
  worker.stop();
  await cloud.close();
}
