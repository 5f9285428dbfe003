// Which Workers plan the worker fits: CPU milliseconds (not wall time) of each kind of invocation
// on workerd under local `wrangler dev`, against the Free plan's 10 ms, and the outbound calls each
// makes. CPU comes from V8's sampling profiler over the inspector (bench/lib/cpu-profile.mjs says
// how it is counted). The profiled run splits the worker as Cloudflare bills it: the Durable
// Objects run in a worker of their own in another `wrangler dev` process (bench/lib/split-config.mjs),
// so a request's or a cron's figure is the Worker's own invocation, and the keeper's alarms are
// profiled in the objects' isolate. Provider calls are counted at the fakes (bench/lib/fake-cloud.mjs). D1 and
// Durable Object calls are not visible from outside workerd: bench/reaper-scale.mjs counts those
// for the reaper inside workerd. A second run on a fresh worker, without the profiler, reads the
// whole workerd process's CPU per invocation (an upper bound). Also the CPU of evaluating the built
// script (start-up).
//   node bench/cpu.mjs [runs=5]
// Exits 1 when a kind got fewer than two measured invocations or a warm one is over 10 ms.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { freePort, startWorker } from "../scripts/lib/local-worker.mjs";
import { bursts, connectProfiler, cpuOf, intervalOf, processCpuMs, workerdOf } from "./lib/cpu-profile.mjs";
import { startFakeCloud } from "./lib/fake-cloud.mjs";
import { localD1File, sqlite } from "./lib/local-d1.mjs";
import { writeSplitConfigs } from "./lib/split-config.mjs";

const runs = Number(process.argv[2] ?? 5);
const FREE_CPU_MS = 10;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const root = join(import.meta.dirname, "..");

let cloud;
let worker;
let profiler; // null in the pass that reads the process's CPU instead
let objectsProfiler; // the Durable Objects' own worker, in the profiled pass
let objects; // that worker
let splitDir; // the folder of its two configs
let workerd;
/** kind → [{ samples, calls, processMs }] */
let measured = new Map();
const record = (kind, samples, calls, processMs = null) => {
  if (!measured.has(kind)) measured.set(kind, []);
  measured.get(kind).push({ samples, calls, processMs });
};
let received = 0; // deliveries at the webhook receiver
const providerCalls = () => Object.values(cloud.states).reduce((n, s) => n + s.log.length, received);
/** What the fakes were asked since `counts` (per fake, its log length then): "METHOD host/path". */
const logLengths = () => Object.values(cloud.states).map((s) => s.log.length);
const callsSince = (counts) =>
  Object.values(cloud.states).flatMap((s, i) =>
    s.log.slice(counts[i]).map((r) => {
      const url = new URL(r.url);
      return `${r.method} ${url.host}${url.pathname.replace(/\/[a-z0-9]{12,}|\/\d{5,}/g, "/{id}")}`;
    }),
  );
/** kind → what its last invocation asked the fakes */
const lastCalls = new Map();

/**
 * One invocation: profiles `fn` and what it leaves running for `settleMs` after, in the worker's
 * isolate (and, with `withObjects`, the Durable Objects' work it sets off too).
 */
async function measure(kind, fn, settleMs = 150, withObjects = false) {
  const before = providerCalls();
  const lengths = logLengths();
  const profilers = [profiler, withObjects ? objectsProfiler : null].filter(Boolean);
  for (const p of profilers) await p.start();
  const cpuBefore = processCpuMs(workerd);
  const value = await retryLocked(fn);
  await sleep(settleMs);
  const processMs = processCpuMs(workerd) - cpuBefore;
  const samples = [];
  for (const p of profilers) samples.push(...(await p.stop()));
  record(kind, samples, providerCalls() - before, processMs);
  if (profiler) lastCalls.set(kind, callsSince(lengths));
  return value;
}

/** A window of Durable Object alarms: one measurement per burst of busy samples. */
async function measureBursts(kind, windowMs, gapMs = 300) {
  if (!objectsProfiler) return await sleep(windowMs);
  const log = cloud.states.runpod.log;
  const from = log.length;
  await objectsProfiler.start();
  await sleep(windowMs);
  const samples = await objectsProfiler.stop();
  const groups = bursts(samples, gapMs).filter((g) => g.length > 1);
  // Provider calls grouped the same way, at the fake (calls < gapMs apart are one invocation).
  const times = log.slice(from).map((r) => r.at);
  const callGroups = [];
  for (let i = 0; i < times.length; i++) {
    if (i === 0 || times[i] - times[i - 1] > gapMs) callGroups.push(0);
    callGroups[callGroups.length - 1] += 1;
  }
  for (const [i, g] of groups.entries()) record(kind, g, callGroups[i] ?? 0);
  return groups.length;
}

const rent = (name, extra = {}) =>
  worker.json("/v1/leases", {
    method: "POST",
    body: JSON.stringify({
      name,
      provider: "runpod",
      gpu: "4090",
      template: "custom",
      image: "ghcr.io/gpulease/bench:1",
      cmd: "sleep infinity",
      max_minutes: 60,
      ...extra,
    }),
  });
async function waitFor(id, status) {
  for (const deadline = Date.now() + 60_000; Date.now() < deadline; await sleep(500)) {
    const lease = await worker.json(`/v1/leases/${id}`);
    if (lease.status === status) return lease;
  }
  throw new Error(`lease ${id} not ${status} within 60 s`);
}

/**
 * The two processes of the split share the local D1's SQLite file, and one may find it locked by
 * the other (SQLITE_BUSY, a 500): a local artifact (on Cloudflare and in one local process D1
 * runs its queries one at a time). Such a call is sent again, at most twice, and the count is
 * printed; its CPU stays in its window (an upper bound).
 */
let lockedD1Retries = 0;
const lockedCount = () => (worker.log() + (objects?.log() ?? "")).split("SQLITE_BUSY").length - 1;
async function retryLocked(fn) {
  for (let attempt = 1; ; attempt++) {
    const locked = objects ? lockedCount() : 0;
    try {
      return await fn();
    } catch (error) {
      // The worker's log line may come after its answer.
      if (objects) await sleep(300);
      if (!objects || attempt >= 3 || lockedCount() === locked) throw error;
      lockedD1Retries += 1;
    }
  }
}
const retryingLockedD1 = (json) => (path, init) => retryLocked(() => json(path, init));

let failed = false;
/** One run of every kind on a fresh worker: profiled, or reading only the process's CPU. */
async function pass(profiled) {
  measured = new Map();
  received = 0;
  cloud = await startFakeCloud({ bootMs: 2_000, lingerMs: 2_000 });
  // 64 offers at Vast.ai: the default few, repeated under new ids.
  const vastOffers = cloud.fakes.vast.offers;
  cloud.fakes.vast.offers = Array.from({ length: 64 }, (_, i) => ({
    ...vastOffers[i % vastOffers.length],
    id: 19_000_000 + i,
  }));
  const vars = [
    ...cloud.varArgs,
    ...["POLL_INTERVAL_S:2", "VERIFY_INTERVAL_S:2", "MAX_ACTIVE_LEASES:100", "ALLOW_HTTP_WEBHOOKS:true"].flatMap(
      (v) => ["--var", v],
    ),
  ];
  if (profiled) {
    // Each invocation in the isolate Cloudflare bills it to: the Durable Objects in a worker of
    // their own (bench/lib/split-config.mjs), profiled apart.
    const configs = writeSplitConfigs(root);
    splitDir = configs.dir;
    objects = await startWorker({ configs: [configs.objects], vars });
    worker = await startWorker({ configs: [configs.worker], persistFrom: objects.persist, vars });
    worker.json = retryingLockedD1(worker.json);
    profiler = await connectProfiler(worker.inspectorPort);
    objectsProfiler = await connectProfiler(objects.inspectorPort);
  } else {
    worker = await startWorker({ vars });
    profiler = null;
    objectsProfiler = null;
  }
  workerd = workerdOf(worker.inspectorPort);

  try {
    // Offers: a new query each time (nothing cached; RunPod, Vast.ai with 64 offers, VRAMfarm), then
    // the same query again (the shared offers cache). Vast.ai allows 10 searches a minute.
    for (let i = 0; i < Math.min(runs, 9); i++) {
      const query = `/v1/offers?vram_gb=${2 + i}`;
      const body = await measure("GET /v1/offers (3 providers, uncached)", () => worker.json(query), 300);
      if (body.errors.length) throw new Error(`offers: ${JSON.stringify(body.errors)}`);
      await measure("GET /v1/offers (cached)", () => worker.json(query));
    }

    const leases = [];
    for (let i = 0; i < runs; i++) leases.push(await measure("POST /v1/leases (RunPod)", () => rent(`cpu-${i}`), 300));
    for (const lease of leases) await waitFor(lease.id, "running");
    await sleep(1_000); // the keepers sleep until their beat: the isolate is quiet
    for (let i = 0; i < runs * 2; i++) {
      await measure("GET /v1/leases/{id}", () => worker.json(`/v1/leases/${leases[i % runs].id}`));
    }

    // Dashboard: sign in with the admin token, keep the session cookie, load the leases page.
    const login = await fetch(`${worker.base}/login`, {
      method: "POST",
      redirect: "manual",
      headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: worker.base },
      body: new URLSearchParams({ token: worker.admin, next: "/" }),
    });
    const cookie = login.headers
      .getSetCookie()
      .map((c) => c.split(";")[0])
      .join("; ");
    if (login.status !== 303 || !cookie) throw new Error(`login: ${login.status} ${await login.text()}`);
    for (let i = 0; i < runs * 2; i++) {
      await measure("dashboard GET / (the leases page)", async () => {
        const res = await fetch(`${worker.base}/`, { headers: { Cookie: cookie } });
        const html = await res.text();
        if (res.status !== 200 || !html.includes(leases[0].id)) throw new Error(`dashboard: ${res.status}`);
      });
    }

    // Webhook send: a test delivery to a receiver on loopback; the WebhookSender's alarm sends it.
    const receiver = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        received += 1;
        res.end("ok");
      });
    });
    const receiverPort = await freePort();
    await new Promise((r) => receiver.listen(receiverPort, "127.0.0.1", r));
    const hook = await worker.json("/v1/webhooks", {
      method: "POST",
      body: JSON.stringify({ url: `http://127.0.0.1:${receiverPort}/hook`, events: ["lease.running"] }),
    });
    for (let i = 0; i < runs; i++) {
      const before = received;
      await measure(
        "webhook send (test delivery, request + sender alarm)",
        async () => {
          await worker.json(`/v1/webhooks/${hook.id}/test`, { method: "POST" });
          for (const deadline = Date.now() + 10_000; received === before && Date.now() < deadline; ) await sleep(20);
          if (received === before) throw new Error("the test delivery did not arrive");
        },
        150,
        true,
      );
    }
    await worker.api(`/v1/webhooks/${hook.id}`, { method: "DELETE" });
    receiver.close();

    // Keeper alarms, one lease at a time so no two keepers share a window: provisioning polls
    // (POLL_INTERVAL_S 2, the fake pod boots in 2 s), then the teardown (terminate, verify every 2 s
    // while the pod lingers 2 s, the confirming read). The RPCs of the rent and the stop are not in
    // these windows.
    for (const lease of leases) await worker.json(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    for (const lease of leases) await waitFor(lease.id, "stopped");
    await sleep(1_000);
    for (let i = 0; i < Math.min(runs, 3); i++) {
      const lease = await rent(`cpu-keeper-${i}`);
      await sleep(50);
      await measureBursts("keeper alarm: provisioning poll", 5_000);
      await waitFor(lease.id, "running");
      await sleep(500);
      await worker.json(`/v1/leases/${lease.id}/stop`, { method: "POST" });
      await sleep(50);
      await measureBursts("keeper alarm: teardown (terminate / verify)", 9_000);
      await waitFor(lease.id, "stopped");
      await sleep(1_000);
    }

    // Dispatcher with 50 schedules, none due this minute (a nightly cron; the steady case).
    for (let i = 0; i < 50; i++) {
      const hour = (new Date().getUTCHours() + 12) % 24;
      await worker.json("/v1/schedules", {
        method: "POST",
        body: JSON.stringify({
          name: `cpu-nightly-${i}`,
          cron: `${i % 60} ${hour} * * *`,
          lease: { provider: "runpod", gpu: "4090", template: "custom", image: "x/y:1", max_minutes: 30 },
        }),
      });
    }
    for (let i = 0; i < runs; i++) {
      await measure(
        "dispatcher cron, 50 schedules",
        async () => {
          const res = await fetch(`${worker.base}/__scheduled?cron=*+*+*+*+*`);
          if (!res.ok) throw new Error(`dispatcher: ${res.status}`);
          await res.text();
        },
        300,
      );
    }

    // Reaper with 1,000 lease rows: stopped leases written straight into the local D1's sqlite.
    seedStoppedLeases(1_000);
    for (let i = 0; i < Math.min(runs, 3); i++) {
      await measure(
        "reaper cron, 1,000 lease rows",
        async () => {
          const res = await fetch(`${worker.base}/__scheduled?cron=*/10+*+*+*+*`);
          if (!res.ok) throw new Error(`reaper: ${res.status}`);
          await res.text();
        },
        500,
      );
      await sleep(1_000);
    }
  } catch (err) {
    console.error(err);
    failed = true;
  } finally {
    profiler?.close();
    objectsProfiler?.close();
    await worker.stop();
    await objects?.stop();
    objects = null;
    if (splitDir) rmSync(splitDir, { recursive: true, force: true });
    splitDir = null;
    await cloud.close();
  }

  return measured;
}
const profiledRun = await pass(true);
const processRun = await pass(false);

/** `count` stopped lease rows written straight into the local D1 (what the reaper run reads). */
function seedStoppedLeases(count) {
  const at = new Date(Date.now() - 24 * 3_600_000).toISOString();
  const spec = JSON.stringify({
    image: "x",
    cmd: null,
    env: {},
    ports: [],
    disk_gb: 40,
    weights_gb: 0,
    context_length: null,
  });
  const providers = ["runpod", "vast", "vramfarm"];
  const rows = Array.from({ length: count }, (_, i) => {
    const id = `lse_cpu${String(i).padStart(6, "0")}`;
    return `('${id}', 'stopped', '${providers[i % 3]}', 'ref-${i}', 'gpulease-${id}', 'custom', '${spec}', 60, 0.5, 'USD', 0.5, 'requested', '${at}', '${at}', '${at}', '${at}')`;
  });
  const sql = `BEGIN; INSERT INTO leases (id, status, provider, provider_ref, label, template, spec, max_minutes, price_per_hour, currency, cost, stop_reason, created_at, rented_at, stopped_at, teardown_verified_at) VALUES ${rows.join(",\n")}; COMMIT;`;
  sqlite(localD1File(worker.persist), sql, { write: true });
}

/** CPU of evaluating the built script once, in Node's V8 (workerd evaluates it at start-up). */
function startupCpu() {
  const out = mkdtempSync(join(tmpdir(), "gpulease-cpu-"));
  try {
    const build = spawnSync(join(root, "node_modules", ".bin", "wrangler"), ["deploy", "--dry-run", "--outdir", out], {
      cwd: root,
      encoding: "utf8",
      env: { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true" },
    });
    if (build.status !== 0) throw new Error(`build failed: ${build.stderr}`);
    // cloudflare:workers only exists in workerd: a stub with the classes the script extends.
    writeFileSync(
      join(out, "hooks.mjs"),
      `export async function resolve(s, c, next) { return s === "cloudflare:workers" ? { url: "data:text/javascript,export class DurableObject {} export class WorkerEntrypoint {} export const env = {};", shortCircuit: true } : next(s, c); }`,
    );
    const measureScript = `
      import { register } from "node:module";
      register(${JSON.stringify(pathToFileURL(join(out, "hooks.mjs")).href)});
      const before = process.cpuUsage();
      await import(${JSON.stringify(pathToFileURL(join(out, "index.js")).href)});
      const used = process.cpuUsage(before);
      console.log(JSON.stringify((used.user + used.system) / 1000));`;
    const values = [];
    for (let i = 0; i < 5; i++) {
      const run = spawnSync(process.execPath, ["--input-type=module", "-e", measureScript], { encoding: "utf8" });
      if (run.status !== 0) throw new Error(`evaluating the script failed: ${run.stderr}`);
      values.push(Number(run.stdout.trim()));
    }
    return values.sort((a, b) => a - b);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

const all = [...profiledRun.values()].flat().flatMap((m) => m.samples);
const interval = intervalOf(all);
const f1 = (x) => x.toFixed(2).padStart(6);
const p50 = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
console.log(
  `CPU ms per invocation, workerd under wrangler dev (V8 sampler interval ${interval} µs; Free plan: ${FREE_CPU_MS} ms).`,
);
console.log(
  "first = the first invocation of that kind in this isolate (V8 compiles each function on its first call); p50 and max over the rest; a request's or a cron's window is the Worker's own invocation (the Durable Objects run in a worker of their own, as on Cloudflare, where each of their calls is an invocation of its own); the webhook send adds the sender's alarm, and the keeper alarms are profiled in the objects' worker; workerd p50 = the whole workerd process's CPU over the same window in a second run without the profiler (/proc schedstat: also the runtime's C++, the local D1's SQLite, Durable Object storage, the inspector; an upper bound; not for the background windows); calls = requests at the provider fakes (and the webhook receiver)",
);
console.log(
  `${"kind".padEnd(54)}   n   first    p50    max   bound  workerd p50  calls p50/max  warm ≤ ${FREE_CPU_MS} ms`,
);
const expected = [
  "GET /v1/offers (3 providers, uncached)",
  "GET /v1/offers (cached)",
  "POST /v1/leases (RunPod)",
  "GET /v1/leases/{id}",
  "dashboard GET / (the leases page)",
  "webhook send (test delivery, request + sender alarm)",
  "keeper alarm: provisioning poll",
  "keeper alarm: teardown (terminate / verify)",
  "dispatcher cron, 50 schedules",
  "reaper cron, 1,000 lease rows",
];
const over = [];
for (const kind of expected) {
  const list = (profiledRun.get(kind) ?? []).filter((m) => m.samples.length > 0);
  if (list.length < 2) {
    console.log(`${kind.padEnd(54)} ${String(list.length).padStart(3)}  measured nothing (fewer than 2 invocations)`);
    failed = true;
    continue;
  }
  const cpu = list.map((m) => cpuOf(m.samples, interval));
  const [first, ...warm] = cpu;
  const top = warm.reduce((a, b) => (b.cpuMs > a.cpuMs ? b : a));
  const calls = list.map((m) => m.calls).sort((a, b) => a - b);
  const whole = (processRun.get(kind) ?? []).slice(1).flatMap((m) => (m.processMs === null ? [] : [m.processMs]));
  const fits = warm.every((x) => x.cpuMs <= FREE_CPU_MS);
  if (!fits) {
    failed = true;
    over.push([kind, list.slice(1).flatMap((m) => m.samples), warm.length]);
  }
  console.log(
    `${kind.padEnd(54)} ${String(list.length).padStart(3)}  ${f1(first.cpuMs)} ${f1(p50(warm.map((x) => x.cpuMs)))} ${f1(top.cpuMs)} ${f1(Math.max(...warm.map((x) => x.boundMs))).padStart(7)}  ${whole.length ? f1(p50(whole)).padStart(11) : "          -"}  ${`${calls[Math.floor(calls.length / 2)]}/${calls.at(-1)}`.padStart(13)}  ${fits ? "yes" : "NO"}`,
  );
}
for (const [kind, calls] of lastCalls) {
  if (calls.length === 0) continue;
  const counted = new Map();
  for (const c of calls) counted.set(c, (counted.get(c) ?? 0) + 1);
  console.log(`calls of the last ${kind}: ${[...counted].map(([c, n]) => `${c} ×${n}`).join(", ")}`);
}
// The Durable Objects' methods (src/keeper/keeper.ts, src/webhooks/sender.ts, src/offers/shared-cache.ts,
// src/auth/rate-limiter.ts): a sample whose outermost frame is one of them is a Durable Object's
// invocation. Helpers they await show as their own outermost frames, so this share is a floor.
const OBJECT_METHODS = new Set(
  "start stop jobDone ensureAlarm settle claim reopen recordUsage setInferenceKey alarm requestStop step markCurrentGone apply reopenIfStopped noteProviderMissing meter flushMeter writeMeter recordBandwidth armAt armFlush wake read write release takeCall reset admit".split(
    " ",
  ),
);
// Where the time goes in a kind over the limit: self time per function, per warm invocation.
for (const [kind, samples, n] of over) {
  const self = new Map();
  const entries = new Map();
  for (const s of samples) {
    self.set(s.fn, (self.get(s.fn) ?? 0) + Math.min(s.deltaUs, 2 * interval));
    entries.set(s.entry, (entries.get(s.entry) ?? 0) + Math.min(s.deltaUs, 2 * interval));
  }
  const top = [...self].sort((a, b) => b[1] - a[1]).slice(0, 10);
  const outer = [...entries].sort((a, b) => b[1] - a[1]).slice(0, 12);
  const total = [...entries.values()].reduce((x, y) => x + y, 0);
  const inObjects = [...entries].filter(([fn]) => OBJECT_METHODS.has(fn)).reduce((x, [, us]) => x + us, 0);
  console.log(
    `over ${FREE_CPU_MS} ms: ${kind}; per invocation ${(total / 1000 / n).toFixed(2)} ms, of it at least ${(inObjects / 1000 / n).toFixed(2)} ms resumed in Durable Object methods (their own invocations on Cloudflare)`,
  );
  console.log(
    `over ${FREE_CPU_MS} ms: ${kind}; ms per invocation by outermost frame (the handler, or the async function resumed after an await): ${outer.map(([fn, us]) => `${fn} ${(us / 1000 / n).toFixed(2)}`).join(", ")}`,
  );
  console.log(
    `over ${FREE_CPU_MS} ms: ${kind}; self ms per invocation: ${top.map(([fn, us]) => `${fn} ${(us / 1000 / n).toFixed(2)}`).join(", ")}`,
  );
}
const startup = startupCpu();
console.log(
  `calls sent again after the split's two processes found the local D1 locked (SQLITE_BUSY): ${lockedD1Retries}`,
);
console.log(
  `start-up: evaluating the built script (Node ${process.version}'s V8, process CPU): p50 ${startup[2].toFixed(1)} ms, max ${startup.at(-1).toFixed(1)} ms over ${startup.length} runs`,
);
if (failed) process.exitCode = 1;
