// Issue 3: GET /v1/offers with RunPod, Vast.ai and VRAMfarm each answering after D ms.
// Concurrent fan-out means latency / D close to 1 (RunPod needs two queries, run in parallel too),
// not 3. Also the latency of a cached repeat.   node bench/offers-latency.mjs [D=300] [rounds=10]

import { startWorker, stats } from "../scripts/lib/local-worker.mjs";
import { startFakeCloud } from "./lib/fake-cloud.mjs";

const delayMs = Number(process.argv[2] ?? 300);
const rounds = Number(process.argv[3] ?? 10);
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
  const c = stats(cold);
  const h = stats(cached);
  console.log(`D = ${delayMs} ms, ${rounds} rounds, providers: runpod, vast, vramfarm (fakes on loopback)`);
  console.log(
    `uncached: median ${c.median.toFixed(0)} ms, max ${c.max.toFixed(0)} ms -> latency/D = ${(c.median / delayMs).toFixed(2)} (sequential would be >= 3)`,
  );
  console.log(`cached per round: ${cached.map((v) => v.toFixed(0)).join(" ")} ms`);
  console.log(`cached repeat: median ${h.median.toFixed(1)} ms, max ${h.max.toFixed(1)} ms`);
} finally {
  worker.stop();
  await cloud.close();
}
