// How long after a model is loaded on its machine the ledger says `running`, over N sim model
// leases of llama3.2:1b, as a ratio to POLL_INTERVAL_S (goal: median ≤ 1.0); and the calls a model
// lease costs besides: the registry's (sizing, the machine's own pull) and the keeper's.
//   node bench/model-ready.mjs [leases=20] [poll_s=2]
//
// "Loaded" is the sim's own moment: its machine writes the model's manifest when the download is
// done (`/api/tags` `modified_at`) and its start command's load then takes size ÷ the sim's load
// speed (src/sim/ollama/machine.ts); GET /v1/sim, sampled, must first show the model ready no
// earlier than that. Each lease's machine downloads at another speed, spread over one poll
// interval, so the loads fall at every phase of the keeper's polls.

import { freePort, startWorker, stats } from "../scripts/lib/local-worker.mjs";
import { startFakeRegistry } from "./lib/fake-registry.mjs";

const total = Number(process.argv[2] ?? 20);
const pollS = Number(process.argv[3] ?? 2);
const MODEL = "llama3.2:1b";
/** the whole run, then everything it started is stopped and it fails */
const RUN_LIMIT_MS = 6 * 60_000;
/** how often the sim's state and the ledger are sampled */
const SAMPLE_MS = 200;
/** no machine listens before every rental was sent, so the registry's requests tell sizing from pulls */
const BOOT_S = 10;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const wallStart = Date.now();

const registry = await startFakeRegistry();
const port = await freePort();
const worker = await startWorker({
  port,
  sim: true,
  vars: [
    "--var",
    `OLLAMA_REGISTRY_URL:${registry.url}`,
    "--var",
    "SIM_MODELS:registry",
    "--var",
    `PUBLIC_URL:http://127.0.0.1:${port}`,
    "--var",
    `POLL_INTERVAL_S:${pollS}`,
    "--var",
    "VERIFY_INTERVAL_S:2",
    "--var",
    `MAX_ACTIVE_LEASES:${total + 10}`,
  ],
});
let stopped = false;
async function stopEverything() {
  if (stopped) return;
  stopped = true;
  await worker.stop();
  await registry.close();
}
const limit = setTimeout(async () => {
  console.error(`model-ready: gave up after ${RUN_LIMIT_MS / 1000} s`);
  await stopEverything();
  process.exit(1);
}, RUN_LIMIT_MS);

const json = (path, init) => worker.json(path, init);
const at = (iso) => (iso ? Date.parse(iso) : null);
const clock = (ms) => new Date(ms).toISOString().slice(11, 23);
/** How many of `list` have each `key` (Node 20 has no Object.groupBy). */
function countBy(list, key) {
  const counts = {};
  for (const x of list) counts[key(x)] = (counts[key(x)] ?? 0) + 1;
  return counts;
}

const weightsBytes = registry.models.llama32_1b.layers[0].size;
const loadMs = Math.round((weightsBytes / registry.simOllamaSwitches.loadBytesPerS) * 1000);

try {
  await json("/v1/sim/config", {
    method: "PUT",
    body: JSON.stringify({
      boot_seconds: BOOT_S,
      ready_seconds: 1,
      linger_seconds: 1,
      stock_scale: 10,
      credit_usd: 1_000_000,
    }),
  });

  /** per lease: what was sent, then what was seen */
  const leases = [];
  const posts = [];
  let rentedBy = null;

  // Samples the ledger (every keeper poll writes the lease's cost, which grows with time) and the
  // sim from the first rental on, until every lease has left provisioning.
  async function sample() {
    let previous = Date.now();
    for (;;) {
      const now = Date.now();
      const [{ leases: rows }, sim] = await Promise.all([json(`/v1/leases?limit=${total + 50}`), json("/v1/sim")]);
      const answered = Date.now();
      const byId = new Map(rows.map((row) => [row.id, row]));
      const machines = new Map(sim.machines.map((m) => [m.ref, m]));
      for (const lease of leases) {
        const row = byId.get(lease.id);
        const machine = machines.get(lease.ref);
        if (machine) {
          lease.runningSince ??= at(machine.running_since);
          // The sim looked between `now` and `answered`: the model is ready no later than the first
          // answer that says so, and was not before the last look that said otherwise.
          if (machine.ollama?.probe.phase === "ready") lease.readySeenBy ??= answered;
          else if (lease.readySeenBy === null) lease.notReadyAfter = now;
        }
        if (!row || lease.row?.status === "running" || lease.row?.status === "stopping") continue;
        // The rental's own write (cost 0 or a few µUSD) comes at once; the keeper's first poll a poll interval later.
        const polled = now >= at(row.created_at) + (pollS * 1000) / 2;
        if (polled && row.cost !== lease.lastCost) lease.polls.push((previous + now) / 2);
        lease.lastCost = row.cost;
        lease.row = row;
      }
      previous = now;
      if (rentedBy !== null && leases.every((l) => l.row && l.row.status !== "provisioning")) return;
      await sleep(Math.max(0, SAMPLE_MS - (Date.now() - now)));
    }
  }

  let sampling = null;
  for (let i = 0; i < total; i++) {
    const downloadS = 4 + ((i + 0.5) / total) * pollS;
    await json("/v1/sim/config", {
      method: "PUT",
      body: JSON.stringify({ download_mbs: weightsBytes / 1e6 / downloadS }),
    });
    const sent = Date.now();
    const lease = await json("/v1/leases", {
      method: "POST",
      body: JSON.stringify({ name: `model-ready-${i}`, provider: "sim", model: MODEL, max_minutes: 5 }),
    });
    posts.push([sent, Date.now()]);
    leases.push({
      i,
      id: lease.id,
      ref: lease.provider_ref,
      downloadS,
      polls: [],
      lastCost: lease.cost,
      readySeenBy: null,
      notReadyAfter: null,
    });
    sampling ??= sample().then(
      () => null,
      (error) => error,
    );
  }
  rentedBy = Date.now();
  const samplingError = await sampling;
  if (samplingError) throw samplingError;

  const failed = leases.filter((l) => l.row.status !== "running");
  for (const lease of leases.filter((l) => l.row.status === "running")) {
    const res = await fetch(`${worker.base}/sim/ollama/${lease.ref}/api/tags`);
    const tags = await res.json();
    const entry = (tags.models ?? []).find((m) => m.name === MODEL);
    lease.pulledAt = at(entry?.modified_at);
    lease.loadedAt = lease.pulledAt === null ? null : lease.pulledAt + loadMs;
    lease.runningAt = at(lease.row.running_at);
    lease.lagMs = lease.loadedAt === null ? null : lease.runningAt - lease.loadedAt;
    const { events } = await json(`/v1/leases/${lease.id}/events`);
    lease.phases = events.map((e) => e.kind).filter((k) => ["pulling", "loading"].includes(k));
    // A poll that found the machine running also asked its Ollama server (the sim's probe RPC);
    // the server listens `ready_seconds` (1 s) after the machine runs.
    const polls = lease.polls;
    lease.polls = polls.length;
    lease.probes = polls.filter((t) => lease.runningSince !== null && t >= lease.runningSince).length;
    lease.modelProbes = polls.filter((t) => lease.runningSince !== null && t >= lease.runningSince + 1000).length;
  }

  const measured = leases.filter((l) => typeof l.lagMs === "number");
  console.log(
    `model-ready: ${total} sim leases of ${MODEL} (${(weightsBytes / 1e9).toFixed(2)} GB), POLL_INTERVAL_S=${pollS}, local wrangler dev`,
  );
  console.log(
    " #  lease                       download  loaded (sim)  running_at    lag s  ÷poll  polls  probes  phases seen",
  );
  for (const l of leases) {
    const phases = l.phases?.length
      ? Object.entries(countBy(l.phases, (k) => k))
          .map(([k, n]) => (n > 1 ? `${k}×${n}` : k))
          .join(" ")
      : "-";
    console.log(
      [
        String(l.i + 1).padStart(2),
        l.id.padEnd(26),
        `${l.downloadS.toFixed(2)} s`.padStart(8),
        l.loadedAt ? clock(l.loadedAt) : "-".padEnd(12),
        l.runningAt ? clock(l.runningAt) : l.row.status.padEnd(12),
        typeof l.lagMs === "number" ? (l.lagMs / 1000).toFixed(2).padStart(5) : "    -",
        typeof l.lagMs === "number" ? (l.lagMs / 1000 / pollS).toFixed(2).padStart(5) : "    -",
        String(l.polls ?? "-").padStart(5),
        String(l.probes ?? "-").padStart(6),
        ` ${phases}`,
      ].join("  "),
    );
  }
  if (measured.length) {
    const lag = stats(measured.map((l) => l.lagMs / 1000));
    const median = lag.median / pollS;
    const max = lag.max / pollS;
    console.log(
      `loaded → running: median ${lag.median.toFixed(2)} s = ${median.toFixed(2)} × POLL_INTERVAL_S, max ${lag.max.toFixed(2)} s = ${max.toFixed(2)} ×, min ${lag.min.toFixed(2)} s (goal: median ≤ 1.0: ${median <= 1 ? "met" : "NOT met"})`,
    );
    if (median > 1) process.exitCode = 1;
    // The derived moment must fall between the sim's last "not ready" and its first "ready".
    const bracketed = measured.filter(
      (l) =>
        l.readySeenBy !== null &&
        l.notReadyAfter !== null &&
        l.notReadyAfter < l.loadedAt &&
        l.loadedAt <= l.readySeenBy,
    );
    const width = stats(bracketed.map((l) => (l.readySeenBy - l.notReadyAfter) / 1000));
    console.log(
      `check: the loaded moment falls between GET /v1/sim's last "not ready" and first "ready" (sampled every ${SAMPLE_MS} ms) for ${bracketed.length}/${measured.length} leases (bracket median ${width.median?.toFixed(2)} s)`,
    );
    if (bracketed.length !== measured.length) process.exitCode = 1;
  }

  // Registry requests: blob and CDN reads are sizing only (a machine's pull reads manifests here);
  // a manifest read while a rental was being sent is sizing, one after is a machine's own pull.
  const requests = registry.requests();
  const during = (t) => posts.some(([from, to]) => t >= from && t <= to);
  const sizing = requests.filter((r) => r.kind !== "manifest" || during(r.at));
  const pulls = requests.filter((r) => r.kind === "manifest" && !during(r.at));
  const byKind = (list) =>
    Object.entries(countBy(list, (r) => r.kind))
      .map(([k, n]) => `${k} ${n}`)
      .join(", ");
  const firstMachineUp = Math.min(...leases.map((l) => l.runningSince ?? Number.POSITIVE_INFINITY)) + 1000;
  console.log(
    `registry requests: ${requests.length} = ${(requests.length / total).toFixed(2)} per lease; sizing ${sizing.length} (${byKind(sizing) || "none"}; the D1 cache answers the rest), machines' own pulls ${pulls.length} (${(pulls.length / total).toFixed(2)} per machine)${firstMachineUp < rentedBy ? " [a machine listened before the last rental was sent: the split is approximate]" : ""}`,
  );
  const p = stats(measured.map((l) => l.polls));
  const q = stats(measured.map((l) => l.probes));
  const m = stats(measured.map((l) => l.modelProbes));
  console.log(
    `keeper calls per lease, create → running (sim RPCs; one ledger write per poll, counted from its cost): status median ${p.median} (${p.min}…${p.max}), Ollama probes median ${q.median} (${q.min}…${q.max}), of them after the server listened (pulling, loading, the ready one) median ${m.median} (${m.min}…${m.max})`,
  );

  // Stop them all and wait for every teardown to verify.
  for (const l of leases) await json(`/v1/leases/${l.id}/stop`, { method: "POST" });
  let rows = [];
  for (const deadline = Date.now() + 120_000; Date.now() < deadline; await sleep(2_000)) {
    const byId = new Map((await json(`/v1/leases?limit=${total + 50}`)).leases.map((r) => [r.id, r]));
    rows = leases.map((l) => byId.get(l.id));
    if (rows.every((r) => r?.status === "stopped" && r.teardown_verified_at)) break;
  }
  const verified = rows.filter((r) => r?.status === "stopped" && r.teardown_verified_at).length;
  const alive = (await json("/v1/sim")).machines.filter((mc) => mc.state !== "gone").length;
  console.log(`stopped with teardown verified: ${verified}/${total}; machines still alive at the sim: ${alive}`);
  for (const l of failed)
    console.log(`FAILED ${l.id}: ${l.row.status} ${l.row.stop_reason ?? ""} ${l.row.error ?? ""}`);
  if (measured.length === 0 || failed.length > 0 || verified !== total || alive !== 0) process.exitCode = 1;
} finally {
  clearTimeout(limit);
  await stopEverything();
  console.log(`wall time ${((Date.now() - wallStart) / 1000).toFixed(1)} s`);
}
