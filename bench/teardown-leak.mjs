// Money leaked after a time cap: leases stopped by their time cap; machines linger L s after an honoured terminate and
// the keeper verifies every V s. Leaked seconds = machine gone − cap moment (target max ≤ L+V+2),
// and provider calls per keeper alarm invocation (target ≤ 3), seen at the fake.
//   node bench/teardown-leak.mjs [leases=20] [L=3] [V=2]

import { startWorker } from "../scripts/lib/local-worker.mjs";
import { startFakeCloud } from "./lib/fake-cloud.mjs";
import { measured } from "./lib/measured.mjs";

const count = Number(process.argv[2] ?? 20);
const lingerS = Number(process.argv[3] ?? 3);
const verifyS = Number(process.argv[4] ?? 2);
const cloud = await startFakeCloud({ bootMs: 2_000, lingerMs: lingerS * 1000 });
const runpod = cloud.fakes.runpod;
const worker = await startWorker({
  vars: [
    ...cloud.varArgs,
    "--var",
    `VERIFY_INTERVAL_S:${verifyS}`,
    "--var",
    "POLL_INTERVAL_S:2",
    "--var",
    `MAX_ACTIVE_LEASES:${count + 5}`,
  ],
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
try {
  const body = {
    provider: "runpod",
    gpu: "4090",
    template: "custom",
    image: "ghcr.io/gpulease/bench:1",
    cmd: "sleep infinity",
    max_minutes: 1,
  };
  const leases = await Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const res = await worker.api("/v1/leases", {
        method: "POST",
        body: JSON.stringify({ ...body, name: `leak-${i}` }),
      });
      const lease = await res.json();
      if (res.status !== 202) throw new Error(`rent ${i}: ${res.status} ${JSON.stringify(lease)}`);
      return lease;
    }),
  );
  console.log(`${count} leases rented at the RunPod fake; waiting for their 1-minute caps…`);
  const deadline = Date.now() + 5 * 60_000;
  let done = [];
  while (Date.now() < deadline) {
    done = await Promise.all(leases.map(async (l) => (await worker.api(`/v1/leases/${l.id}`)).json()));
    if (done.every((l) => l.status === "stopped")) break;
    await sleep(2_000);
  }
  const leaked = [];
  for (const lease of done) {
    if (lease.status !== "stopped" || lease.stop_reason !== "max_minutes")
      throw new Error(`lease ${lease.id}: ${lease.status} ${lease.stop_reason} ${lease.error}`);
    const machine = runpod.model.get(lease.provider_ref);
    const goneAt = machine.terminateRequestedAt + machine.lingerMs;
    const capAt = Date.parse(lease.running_at) + lease.max_minutes * 60_000;
    leaked.push((goneAt - capAt) / 1000);
  }
  // Calls the keeper made for each pod, grouped into alarm invocations (calls < 400 ms apart).
  // RunPod's REST API names the pod in the path (GET/DELETE /v2/pods/{id}), GraphQL in the body;
  // the create itself (POST /v2/pods, podFindAndDeployOnDemand) is the rent, not the keeper's.
  const names = (r, ref) => r.url.includes(`/${ref}`) || r.body.includes(ref);
  const isCreate = (r) =>
    r.body.includes("podFindAndDeployOnDemand") || (r.method === "POST" && new URL(r.url).pathname === "/v2/pods");
  const perAlarm = [];
  for (const lease of done) {
    const times = cloud.servers[0].state.log
      .filter((r) => !isCreate(r) && names(r, lease.provider_ref))
      .map((r) => r.at);
    let group = 0;
    for (let i = 0; i < times.length; i++) {
      group += 1;
      if (i === times.length - 1 || times[i + 1] - times[i] > 400) {
        perAlarm.push(group);
        group = 0;
      }
    }
  }
  const l = measured("leaked seconds", leaked);
  const p = measured("keeper alarm invocations at the RunPod fake", perAlarm);
  console.log(`L = ${lingerS} s, V = ${verifyS} s, ${count} leases stopped by max_minutes, all teardown-verified`);
  console.log(
    `leaked seconds (gone − cap): median ${l.median.toFixed(1)}, max ${l.max.toFixed(1)} (target ≤ ${lingerS + verifyS + 2})`,
  );
  console.log(
    `provider calls per keeper alarm invocation: median ${p.median}, max ${p.max} over ${p.n} invocations (target ≤ 3)`,
  );
} finally {
  worker.stop();
  await cloud.close();
}
