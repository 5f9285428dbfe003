// CPU time of the local worker's isolate, from V8's sampling profiler over the Chrome DevTools
// Protocol (the inspector `wrangler dev --inspector-port` serves; the same profiler the Workers
// docs use for "Profiling CPU usage").
//
// The profile is a list of samples, each with the time since the one before. workerd labels the
// isolate's waits "(idle)", and takes no samples at all while no JavaScript of the worker runs (an
// I/O wait between two pieces of work), so the sample after such a gap carries the whole gap as its
// time delta. CPU is therefore counted as: every non-idle sample is credited with its delta, capped
// at twice the median delta (the sampler's real interval). `boundMs` credits every delta in full:
// an upper bound that counts the gaps too. One isolate runs the Worker and its Durable Objects, and
// after an await a sample's stack starts at the resumed function, so the profile cannot tell a
// Durable Object call (an invocation of its own on Cloudflare) from the Worker's code around it.
import { readdirSync, readFileSync } from "node:fs";
import WebSocket from "ws";

export async function connectProfiler(inspectorPort, intervalUs = 100) {
  const targets = await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json();
  const url = targets[0]?.webSocketDebuggerUrl;
  if (!url) throw new Error(`no inspector target at port ${inspectorPort}`);
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  let next = 1;
  const pending = new Map();
  ws.on("message", (data) => {
    const message = JSON.parse(String(data));
    const waiter = pending.get(message.id);
    if (!waiter) return;
    // wrangler's inspector proxy echoes some commands back before (or instead of) the answer.
    if (!("result" in message || "error" in message) && waiter.needsResult) return;
    pending.delete(message.id);
    if (message.error) waiter.reject(new Error(`${waiter.method}: ${JSON.stringify(message.error)}`));
    else waiter.resolve(message.result);
  });
  const send = (method, params = {}, needsResult = false) =>
    new Promise((resolve, reject) => {
      const id = next++;
      pending.set(id, { resolve, reject, method, needsResult });
      ws.send(JSON.stringify({ id, method, params }));
    });
  await send("Profiler.enable");
  await send("Profiler.setSamplingInterval", { interval: intervalUs });
  return {
    start: () => send("Profiler.start"),
    /** Stops and returns the busy samples: [{ at (µs, profile clock), deltaUs, fn, entry }]. */
    async stop() {
      const { profile } = await send("Profiler.stop", {}, true);
      const name = new Map(profile.nodes.map((n) => [n.id, n.callFrame.functionName || n.callFrame.url || "?"]));
      const parent = new Map();
      for (const n of profile.nodes) for (const child of n.children ?? []) parent.set(child, n.id);
      // The outermost frame: the handler, or after an await the async function that resumed.
      const entryOf = (id) => {
        let at = id;
        while (parent.has(at) && parent.has(parent.get(at))) at = parent.get(at);
        return name.get(at);
      };
      const samples = [];
      let at = profile.startTime;
      for (let i = 0; i < profile.samples.length; i++) {
        at += profile.timeDeltas[i];
        const fn = name.get(profile.samples[i]);
        if (fn !== "(idle)")
          samples.push({ at, deltaUs: profile.timeDeltas[i], fn, entry: entryOf(profile.samples[i]) });
      }
      return samples;
    },
    close: () => ws.close(),
  };
}

/** The sampler's real interval: the median delta between busy samples (µs). */
export function intervalOf(samples) {
  const deltas = samples.map((s) => s.deltaUs).sort((a, b) => a - b);
  return deltas[Math.floor(deltas.length / 2)] ?? 0;
}

/** CPU ms of `samples` (see the top of this file) and the upper bound. */
export function cpuOf(samples, intervalUs) {
  const cap = 2 * intervalUs;
  let cpu = 0;
  let bound = 0;
  for (const s of samples) {
    cpu += Math.min(s.deltaUs, cap);
    bound += s.deltaUs;
  }
  return { cpuMs: cpu / 1000, boundMs: bound / 1000, samples: samples.length };
}

/** Busy samples split where the isolate was quiet for longer than `gapMs`: one group per invocation. */
export function bursts(samples, gapMs) {
  const groups = [];
  let current = [];
  for (const s of samples) {
    // A sample's delta is the time since the one before: the quiet time, after a gap.
    if (current.length && s.deltaUs > gapMs * 1000) {
      groups.push(current);
      current = [];
    }
    current.push(s);
  }
  if (current.length) groups.push(current);
  return groups;
}

/**
 * The workerd process that runs the worker started with `inspectorPort` (wrangler dev runs two:
 * a proxy and the worker's own, the one with an inspector), found through /proc.
 */
export function workerdOf(inspectorPort) {
  const procs = readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .map((pid) => {
      try {
        const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
        const ppid = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ")[1];
        return { pid, ppid, cmd };
      } catch {
        return null;
      }
    })
    .filter(Boolean);
  const ours = new Set(
    procs.filter((p) => p.cmd.includes("--inspector-port") && p.cmd.includes(String(inspectorPort))).map((p) => p.pid),
  );
  // Descendants of our wrangler processes.
  for (let grew = true; grew; ) {
    grew = false;
    for (const p of procs) {
      if (ours.has(p.ppid) && !ours.has(p.pid)) {
        ours.add(p.pid);
        grew = true;
      }
    }
  }
  const workerd = procs.filter(
    (p) => ours.has(p.pid) && p.cmd[0].endsWith("workerd") && p.cmd.some((a) => a.startsWith("--inspector-addr")),
  );
  if (workerd.length !== 1) throw new Error(`expected one workerd with an inspector, found ${workerd.length}`);
  return workerd[0].pid;
}

/** CPU time of every thread of a process so far, ms (/proc/<pid>/task/<tid>/schedstat, ns). */
export function processCpuMs(pid) {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
    } catch {}
  }
  return ns / 1e6;
}
