// Every create accounted for: rents N leases (short caps) through the RunPod and Vast fakes,
// which answer a share of creates ambiguously (the machine is made, then a 500) and show new
// machines in their listings only after a lag. Waits until every lease is stopped, runs the
// reaper twice, then prints the machines ever created, those still alive (must be 0) and the
// ledger's cost ÷ what the fakes billed (must be ≥ 0.99). Exits 1 otherwise.
//   node bench/ambiguous-rentals.mjs [leases=50] [share=0.2] [lagS=4] [seed=18] [budgetMin=8]

import { freePort, startWorker } from "../scripts/lib/local-worker.mjs";
import { loadFakes, serveFake } from "./lib/fake-cloud.mjs";

const count = Number(process.argv[2] ?? 50);
const ambiguousShare = Number(process.argv[3] ?? 0.2);
const lagS = Number(process.argv[4] ?? 4);
const seed = Number(process.argv[5] ?? 18);
const budgetMin = Number(process.argv[6] ?? 8);

const started = Date.now();
const deadline = started + budgetMin * 60_000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const left = () => deadline - Date.now();

/** mulberry32: the same seed gives the same sequence of ambiguous creates. */
function random(state) {
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

const mod = await loadFakes();
const runpod = new mod.RunpodFake({ proxyDomain: "proxy.runpod.fake" });
// Pages of 20 pods (the real API serves up to the 1000 runpodctl asks for): listings cross pages.
Object.assign(runpod.quirks, { bootMs: 3_000, lingerMs: 2_000, listingLagMs: lagS * 1000, podsPageSize: 20 });
const vast = new mod.VastFake({ bootMs: 3_000, lingerMs: 2_000 });
vast.quirks.listingLagMs = lagS * 1000;
// Vast rents each ask once: enough RTX 4090 asks for every lease to rent there.
const template = vast.offers.find((o) => o.gpu_name === "RTX 4090" && o.verification === "verified");
for (let i = 1; i <= count + 10; i++)
  vast.offers.push({ ...template, id: 19_000_000 + i, ask_contract_id: 19_000_000 + i, dph_base: 0.36 + i / 1000 });

/**
 * Of the creates that make a machine, one in each run of 1/share (in arrival order, its place
 * picked by the seeded sequence) answers a 500: the machine exists and bills, the answer says
 * otherwise. A create the fake refuses (an ask someone just rented) keeps its real answer.
 */
const draw = random(seed);
const every = Math.max(1, Math.round(1 / ambiguousShare));
let pick = 0;
const creates = { runpod: 0, vast: 0, made: 0, ambiguous: 0 };
function ambiguously(name, fake, isCreate, failure) {
  return {
    quirks: fake.quirks,
    async handle(request) {
      if (!isCreate(request)) return fake.handle(request);
      creates[name] += 1;
      const done = await fake.handle(request);
      if (done.status >= 300) return done;
      const n = creates.made++;
      if (n % every === 0) pick = Math.floor(draw() * every);
      if (n % every !== pick) return done;
      creates.ambiguous += 1;
      await done.arrayBuffer();
      return failure();
    },
  };
}

const path = (request) => new URL(request.url).pathname;
const runpodPort = await freePort();
let vastPort = await freePort();
while (vastPort === runpodPort) vastPort = await freePort();
const servers = await Promise.all([
  serveFake(
    ambiguously(
      "runpod",
      runpod,
      (r) => r.method === "POST" && path(r) === "/v2/pods",
      () => new Response("Internal Server Error", { status: 500, headers: { "Content-Type": "text/plain" } }),
    ),
    runpodPort,
    (p) => `http://runpod.fake${p}`,
  ),
  serveFake(
    ambiguously(
      "vast",
      vast,
      (r) => r.method === "PUT" && /^\/api\/v0\/asks\/\d+\/$/.test(path(r)),
      () => new Response("<html><body>500 Server Error</body></html>", { status: 500 }),
    ),
    vastPort,
    (p) => `http://vast.fake${p}`,
  ),
]);
const closeFakes = () => Promise.all(servers.map(({ server }) => new Promise((r) => server.close(r))));

const vars = {
  RUNPOD_GRAPHQL_URL: `http://127.0.0.1:${runpodPort}/graphql`,
  RUNPOD_API_URL: `http://127.0.0.1:${runpodPort}`,
  VAST_API_URL: `http://127.0.0.1:${vastPort}`,
  RUNPOD_API_KEY: mod.RUNPOD_FAKE_KEY,
  VAST_API_KEY: mod.VAST_FAKE_KEY,
  POLL_INTERVAL_S: "2",
  VERIFY_INTERVAL_S: "2",
  REAPER_GRACE_MIN: "1",
  OFFERS_CACHE_S: "0",
  MAX_ACTIVE_LEASES: String(count + 20),
};
let worker = null;
let failed = false;
// The waits below are bounded by the deadline; this catches a request that never returns.
const watchdog = setTimeout(
  async () => {
    console.error(`still running ${budgetMin} min + 1 min after the start: giving up`);
    await worker?.stop();
    await closeFakes();
    process.exit(1);
  },
  budgetMin * 60_000 + 60_000,
);
watchdog.unref();
try {
  worker = await startWorker({ vars: Object.entries(vars).flatMap(([k, v]) => ["--var", `${k}:${v}`]) });
  const api = async (p, init) => {
    const res = await worker.api(p, init);
    return { status: res.status, body: await res.json().catch(() => null) };
  };
  const allLeases = async () => {
    const leases = [];
    let cursor = null;
    do {
      const page = await api(`/v1/leases?limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      if (page.status !== 200) throw new Error(`GET /v1/leases: ${page.status} ${JSON.stringify(page.body)}`);
      leases.push(...page.body.leases);
      cursor = page.body.next_cursor;
    } while (cursor);
    return leases;
  };
  /** Waits (bounded) until every lease on the ledger is stopped; the ones that are not. */
  const settle = async (maxMs) => {
    const until = Math.min(deadline, Date.now() + maxMs);
    let open = [];
    do {
      open = (await allLeases()).filter((l) => l.status !== "stopped");
      if (open.length === 0) return [];
      await sleep(2_000);
    } while (Date.now() < until);
    return open;
  };
  const reaper = async () => {
    const res = await fetch(`${worker.base}/__scheduled?cron=${encodeURIComponent("*/10 * * * *")}`);
    if (!res.ok) throw new Error(`reaper cron: ${res.status}`);
  };

  // Three kinds of body: RunPod only, Vast only, and any provider (RunPod ranks first, so an
  // ambiguous create there fails over to Vast).
  const bodies = Array.from({ length: count }, (_, i) => ({
    name: `ambiguous-${i}`,
    ...(i % 3 === 0 ? { provider: "runpod" } : i % 3 === 1 ? { provider: "vast" } : {}),
    gpu: "4090",
    template: "custom",
    image: "ghcr.io/gpulease/bench:1",
    cmd: "sleep infinity",
    max_minutes: 1,
  }));
  const answers = {};
  let next = 0;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (next < bodies.length) {
        const body = bodies[next++];
        const res = await api("/v1/leases", { method: "POST", body: JSON.stringify(body) });
        answers[res.status] = (answers[res.status] ?? 0) + 1;
      }
    }),
  );
  console.log(
    `${count} rentals answered ${Object.entries(answers)
      .map(([s, n]) => `${n}× ${s}`)
      .join(", ")}; ${creates.runpod + creates.vast} creates (${creates.runpod} RunPod, ${creates.vast} Vast), ` +
      `${creates.made} made a machine, ${creates.ambiguous} of them then answered 500; listings lag ${lagS} s`,
  );

  let open = await settle(5 * 60_000);
  console.log(
    `${open.length} lease(s) not stopped after the keepers' work (${Math.round((Date.now() - started) / 1000)} s)`,
  );
  // The reaper acts on a stopped lease's machine only a grace period (1 min) after the stop.
  for (let run = 1; run <= 2; run++) {
    const lastStop = Math.max(0, ...(await allLeases()).map((l) => Date.parse(l.stopped_at ?? "") || 0));
    await sleep(Math.max(0, Math.min(lastStop + 62_000 - Date.now(), left() - 30_000)));
    await reaper();
    open = await settle(90_000);
    console.log(`reaper run ${run}: ${open.length} lease(s) not stopped afterwards`);
  }
  await sleep(4_000); // a machine verified gone may linger a moment at the fake

  const leases = await allLeases();
  const models = [runpod.model, vast.model];
  const made = models.reduce((n, m) => n + m.machines.size, 0);
  const alive = models.flatMap((m) => m.list());
  const billed = models.reduce(
    (sum, model) =>
      sum + [...model.machines.values()].reduce((s, m) => s + m.pricePerHour * model.billedHours(m.id, "created"), 0),
    0,
  );
  const ledger = leases.reduce((sum, l) => sum + (l.currency === "EUR" ? l.cost * 1.08 : l.cost), 0);
  const ratio = billed > 0 ? ledger / billed : 0;
  const adopted = leases.filter((l) => l.stop_reason === "reaper").length;
  console.log(
    `machines ever created at the fakes: ${made} (RunPod ${runpod.model.machines.size}, Vast ${vast.model.machines.size})`,
  );
  console.log(
    `machines still alive at the end: ${alive.length}${alive.length ? ` (${alive.map((m) => `${m.id} ${m.label}`).join(", ")})` : ""} (must be 0)`,
  );
  console.log(
    `ledger cost ÷ billed by the fakes: ${ledger.toFixed(4)} / ${billed.toFixed(4)} USD = ${ratio.toFixed(3)} (must be ≥ 0.99)`,
  );
  console.log(`leases on the ledger: ${leases.length} (${adopted} adopted by the reaper), not stopped: ${open.length}`);
  // Where the ledger falls short: per rental label, what its machines billed against the cost of
  // the leases carrying that label (an adopted machine's lease is labelled `<label>~<ref>`).
  const gaps = new Map();
  for (const model of models)
    for (const m of model.machines.values()) {
      const gap = gaps.get(m.label) ?? { billed: 0, ledger: 0, machines: 0 };
      gap.billed += m.pricePerHour * model.billedHours(m.id, "created");
      gap.machines += 1;
      gaps.set(m.label, gap);
    }
  for (const l of leases) {
    const gap = gaps.get(l.label.split("~")[0]);
    if (gap) gap.ledger += l.cost;
  }
  const short = [...gaps]
    .filter(([, g]) => g.ledger < 0.99 * g.billed)
    .sort((a, b) => b[1].billed - b[1].ledger - (a[1].billed - a[1].ledger));
  console.log(`rentals whose leases cost < 0.99 × what their machines billed: ${short.length}`);
  for (const [label, g] of short.slice(0, 8))
    console.log(
      `  ${label}: ${g.machines} machine(s) billed ${g.billed.toFixed(4)}, ledger ${g.ledger.toFixed(4)} USD`,
    );
  console.log(`wall time ${Math.round((Date.now() - started) / 1000)} s`);
  failed = made === 0 || alive.length > 0 || ratio < 0.99 || open.length > 0;
} catch (error) {
  console.error(error);
  if (worker) console.error(worker.log().slice(-4_000));
  failed = true;
} finally {
  await worker?.stop();
  await closeFakes();
}
process.exit(failed ? 1 : 0);
