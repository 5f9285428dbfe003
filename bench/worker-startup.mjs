// How long the e2e global setup waits for its local workers: N `wrangler dev` workers (sim on)
// started at once, from spawn to /health answering.
//   node bench/worker-startup.mjs [workers=3]
import { startWorker } from "../scripts/lib/local-worker.mjs";

const n = Number(process.argv[2] ?? 3);
if (!(n >= 1)) throw new Error(`measured nothing: ${process.argv[2]} workers`);
const started = performance.now();
const workers = await Promise.all(Array.from({ length: n }, () => startWorker({ sim: true })));
console.log(`${n} local worker(s) answering /health after ${((performance.now() - started) / 1000).toFixed(1)} s`);
await Promise.all(workers.map((worker) => worker.stop()));
