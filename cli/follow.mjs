// @ts-check
// The two live views: a rental coming up (`rent --follow`) and a lease's event stream
// (`events --follow`, Server-Sent Events).
import { EventSourceParserStream } from "eventsource-parser/stream";
import { ApiFailure, call } from "./api.mjs";
import { elapsed, money, pc } from "./format.mjs";

/** @typedef {import("../client/index.d.mts").Lease} Lease */
/** @typedef {import("../client/index.d.mts").GpuleaseClient} Client */
/** @typedef {import("../client/index.d.mts").LeaseEvent} LeaseEvent */
/** @typedef {import("../client/index.d.mts").LeaseEventKind} LeaseEventKind */

/** The phase a lease's keeper last reported while it comes up. */
const phases = /** @type {Partial<Record<LeaseEventKind, string>>} */ ({
  created: "renting",
  rented: "booting",
  booting: "booting",
  waiting_for_ollama: "waiting for Ollama",
  pulling: "pulling the model",
  loading: "loading the model",
});

/** One status line on stderr: rewritten in place on a terminal, one line per change otherwise. */
function progressLine() {
  const tty = Boolean(process.stderr.isTTY);
  let last = "";
  return {
    /** @param {string} phase @param {string} rest */
    show(phase, rest) {
      if (tty) process.stderr.write(`\r\x1b[2K${pc.cyan("●")} ${phase} · ${rest}`);
      else if (phase !== last) process.stderr.write(`${phase} · ${rest}\n`);
      last = phase;
    },
    done() {
      if (tty) process.stderr.write("\r\x1b[2K");
    },
  };
}

/** Event kinds that only move a rental along: the lease itself is read again on anything else. */
/** @type {ReadonlySet<LeaseEventKind>} */
const PROGRESS = new Set(["created", "rented", "booting", "waiting_for_ollama", "pulling", "loading", "machine_state"]);
/** How often a terminal's status line redraws its clock (no request: the time is counted here). */
const TICK_MS = 1000;

/**
 * Shows the lease coming up (booting → waiting for Ollama → running, elapsed time and cost so
 * far) until it runs, then prints its access URLs. A lease that stops instead is exit code 1.
 * It listens to the lease's event stream (one request, resumed when the worker ends it) and reads
 * the lease only when an event may have changed its status, so a boot of many minutes stays far
 * inside the API's 60 requests a minute.
 * @param {Client} client @param {string} url @param {Lease} lease @param {{ json: boolean }} options
 */
export async function followRent(client, url, lease, options) {
  const id = lease.id;
  const started = Date.parse(lease.created_at);
  const line = progressLine();
  let phase = "booting";
  let current = lease;
  const rest = () => `${elapsed(Date.now() - started)} · ${money(current.cost, current.currency)} so far · ${id}`;
  const tick = process.stderr.isTTY ? setInterval(() => line.show(phase, rest()), TICK_MS) : null;
  try {
    line.show(phase, rest());
    const read = async () => {
      current = await call(client.GET("/v1/leases/{id}", { params: { path: { id } } }), url);
    };
    // Once first: the lease may have run (or failed) before the stream opened.
    await read();
    // A stream the worker ended: look at the lease before opening the next.
    const more = async () => {
      await read();
      return current.status === "provisioning";
    };
    if (current.status === "provisioning") {
      for await (const event of leaseEvents(client, url, id, more)) {
        const next = phases[event.kind];
        if (next && next !== phase) {
          phase = next;
          line.show(phase, rest());
        }
        if (!PROGRESS.has(event.kind)) await read();
        if (current.status !== "provisioning") break;
      }
    }
  } finally {
    if (tick) clearInterval(tick);
    line.done();
  }
  if (current.status === "running") {
    if (options.json) process.stdout.write(`${JSON.stringify(current, null, 2)}\n`);
    else {
      process.stderr.write(`${pc.green("running")} · ${elapsed(Date.now() - started)} to start\n`);
      const urls = current.access?.urls ?? [];
      process.stdout.write(urls.length ? `${urls.join("\n")}\n` : `${id} is running (no HTTP port exposed)\n`);
      if (current.access?.openai_base_url) process.stdout.write(`openai: ${current.access.openai_base_url}\n`);
      if (current.access?.ssh)
        process.stdout.write(`ssh -p ${current.access.ssh.port} root@${current.access.ssh.host}\n`);
    }
    return;
  }
  const why = [current.stop_reason, current.error].filter(Boolean).join(": ");
  throw new ApiFailure("lease_failed", `lease ${id} is ${current.status} before it ran${why ? ` (${why})` : ""}`, null);
}

/**
 * A lease's events as the worker streams them (SSE), reopened with Last-Event-ID when the worker
 * ends a long stream, for as long as `more()` says (asked whenever a stream ends).
 * @param {Client} client @param {string} url @param {string} id @param {() => Promise<boolean>} more
 * @returns {AsyncGenerator<LeaseEvent>}
 */
async function* leaseEvents(client, url, id, more) {
  let lastId = 0;
  for (;;) {
    const stream = await call(
      client.GET("/v1/leases/{id}/events", {
        params: { path: { id } },
        headers: { Accept: "text/event-stream", ...(lastId ? { "Last-Event-ID": String(lastId) } : {}) },
        parseAs: "stream",
      }),
      url,
    );
    if (!stream) return;
    const messages = /** @type {ReadableStream<Uint8Array>} */ (/** @type {unknown} */ (stream))
      .pipeThrough(/** @type {TransformStream<Uint8Array, string>} */ (new TextDecoderStream()))
      .pipeThrough(new EventSourceParserStream());
    for await (const message of messages) {
      lastId = Number(message.id) || lastId;
      yield JSON.parse(message.data);
    }
    if (!(await more())) return;
  }
}

/** @param {{ at: string; kind: string; detail?: string | null }} event */
export function eventLine(event) {
  return `${pc.dim(event.at)}  ${event.kind.padEnd(20)}  ${event.detail ?? ""}`.trimEnd();
}

/**
 * Streams a lease's events as the worker sends them (SSE) until the lease is stopped; resumes
 * with Last-Event-ID when the worker ends a long stream early.
 * @param {Client} client @param {string} url @param {string} id @param {{ json: boolean }} options
 */
export async function followEvents(client, url, id, options) {
  let stopped = false;
  const more = async () =>
    !stopped && (await call(client.GET("/v1/leases/{id}", { params: { path: { id } } }), url)).status !== "stopped";
  for await (const event of leaseEvents(client, url, id, more)) {
    process.stdout.write(options.json ? `${JSON.stringify(event)}\n` : `${eventLine(event)}\n`);
    if (event.kind === "stopped") stopped = true;
  }
}
