// RunPod's 429 is "back off using Retry-After, then resume": rents one lease through the RunPod
// REST fake while it answers the first two creates 429 with Retry-After: 2 (RunPod's
// TooManyRequestsError, problem+json). Prints whether the rental succeeded on the first offer,
// the creates sent and the time it took; stops the lease. Exits 1 if nothing was measured or the
// rental did not succeed on its first offer.
//   node bench/runpod-429.mjs [retryAfterS=2] [times=2]

import { freePort, startWorker } from "../scripts/lib/local-worker.mjs";
import { loadFakes, serveFake } from "./lib/fake-cloud.mjs";

const retryAfterS = Number(process.argv[2] ?? 2);
const times = Number(process.argv[3] ?? 2);

const mod = await loadFakes();
const runpod = new mod.RunpodFake({ proxyDomain: "proxy.runpod.fake" });
Object.assign(runpod.quirks, { bootMs: 2_000, lingerMs: 0 });
const port = await freePort();
const { server, state } = await serveFake(runpod, port, (p) => `http://runpod.fake${p}`);
const control = (body) =>
  fetch(`http://127.0.0.1:${port}/__control`, { method: "POST", body: JSON.stringify(body) }).then((r) => r.json());

const vars = {
  RUNPOD_API_URL: `http://127.0.0.1:${port}`,
  RUNPOD_GRAPHQL_URL: `http://127.0.0.1:${port}/graphql`,
  RUNPOD_API_KEY: mod.RUNPOD_FAKE_KEY,
  OFFERS_CACHE_S: "0",
};
let worker = null;
let failed = true;
const watchdog = setTimeout(async () => {
  console.error("still running after 3 min: giving up");
  await worker?.stop();
  server.close();
  process.exit(1);
}, 180_000);
watchdog.unref();
try {
  worker = await startWorker({ vars: Object.entries(vars).flatMap(([k, v]) => ["--var", `${k}:${v}`]) });
  const problem = JSON.stringify({ title: "Too Many Requests", status: 429, detail: "rate limit exceeded" });
  await control({
    fault: {
      operation: "deploy",
      times,
      fault: {
        kind: "status",
        status: 429,
        body: problem,
        headers: { "Content-Type": "application/problem+json", "Retry-After": String(retryAfterS) },
      },
    },
  });
  const isCreate = (e) => e.method === "POST" && new URL(e.url).pathname === "/v2/pods";
  const before = state.log.length;
  const t0 = Date.now();
  const res = await worker.api("/v1/leases", {
    method: "POST",
    body: JSON.stringify({
      provider: "runpod",
      gpu: "4090",
      template: "custom",
      image: "ghcr.io/gpulease/bench:1",
      cmd: "sleep infinity",
      max_minutes: 5,
    }),
  });
  const ms = Date.now() - t0;
  const lease = await res.json().catch(() => null);
  const creates = state.log.slice(before).filter(isCreate);
  const offers = [
    ...new Set(
      creates.map((e) => {
        const body = JSON.parse(e.body);
        return `${body.cloud}:${body.gpu?.id}:${body.gpu?.count ?? 1}`;
      }),
    ),
  ];
  const rented = res.status >= 200 && res.status < 300 && Boolean(lease?.provider_ref);
  const firstOffer = rented && offers.length === 1;
  console.log(`RunPod answers the first ${times} creates 429 with Retry-After: ${retryAfterS}`);
  console.log(
    `rental answered HTTP ${res.status}${lease?.status ? ` (lease ${lease.status})` : ""}${lease?.error ? `: ${lease.error}` : ""}`,
  );
  console.log(
    `rented on the first offer: ${firstOffer ? "yes" : "no"} (offers tried: ${offers.length ? offers.join(", ") : "none"})`,
  );
  console.log(`create attempts made: ${creates.length}`);
  console.log(`time to the rental's answer: ${(ms / 1000).toFixed(2)} s`);
  if (lease?.id) await worker.api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
  failed = creates.length === 0 || !firstOffer;
} catch (error) {
  console.error(error);
  if (worker) console.error(worker.log().slice(-4_000));
} finally {
  await worker?.stop();
  server.close();
}
process.exit(failed ? 1 : 0);
