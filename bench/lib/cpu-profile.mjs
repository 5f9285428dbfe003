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
    /** Stops and returns the busy samples: [{ at (µs, profile clock), deltaUs, fn }]. */
    async stop() {
      const { profile } = await send("Profiler.stop", {}, true);
      const name = new Map(profile.nodes.map((n) => [n.id, n.callFrame.functionName || n.callFrame.url || "?"]));
      const samples = [];
      let at = profile.startTime;
      for (let i = 0; i < profile.samples.length; i++) {
        at += profile.timeDeltas[i];
        const fn = name.get(profile.samples[i]);
        if (fn !== "(idle)") samples.push({ at, deltaUs: profile.timeDeltas[i], fn });
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
