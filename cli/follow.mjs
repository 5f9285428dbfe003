// @ts-check
// The two live views: a rental coming up (`rent --follow`) and a lease's event stream
// (`events --follow`, Server-Sent Events).
import { EventSourceParserStream } from "eventsource-parser/stream";
import { ApiFailure, call, jsonOnly } from "./api.mjs";
import { elapsed, money, pc } from "./format.mjs";

const POLL_MS = 1000;
const sleep = (/** @type {number} */ ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** @typedef {import("../client/index.d.mts").Lease} Lease */
/** @typedef {import("../client/index.d.mts").GpuleaseClient} Client */

/** The phase a lease's keeper last reported while it comes up. */
const phases = /** @type {Record<string, string>} */ ({
  created: "renting",
  rented: "booting",
  booting: "booting",
  waiting_for_ollama: "waiting for Ollama",
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

/**
 * Shows the lease coming up (booting → waiting for Ollama → running, elapsed time and cost so
 * far) until it runs, then prints its access URLs. A lease that stops instead is exit code 1.
 * @param {Client} client @param {string} url @param {Lease} lease @param {{ json: boolean }} options
 */
export async function followRent(client, url, lease, options) {
  const id = lease.id;
  const started = Date.parse(lease.created_at);
  const line = progressLine();
  let seq = 0;
  let phase = "booting";
  for (;;) {
    const { events } = jsonOnly(
      await call(client.GET("/v1/leases/{id}/events", { params: { path: { id }, query: { after: seq } } }), url),
    );
    lease = await call(client.GET("/v1/leases/{id}", { params: { path: { id } } }), url);
    const rest = () => `${elapsed(Date.now() - started)} · ${money(lease.cost, lease.currency)} so far · ${id}`;
    for (const event of events) {
      seq = Math.max(seq, event.seq);
      // Every phase is shown, even one that came and went between two polls.
      const next = phases[event.kind];
      if (next && next !== phase) {
        phase = next;
        line.show(phase, rest());
      }
    }
    if (lease.status === "running") {
      line.done();
      if (options.json) process.stdout.write(`${JSON.stringify(lease, null, 2)}\n`);
      else {
        process.stderr.write(`${pc.green("running")} · ${elapsed(Date.now() - started)} to start\n`);
        const urls = lease.access?.urls ?? [];
        process.stdout.write(urls.length ? `${urls.join("\n")}\n` : `${id} is running (no HTTP port exposed)\n`);
        if (lease.access?.openai_base_url) process.stdout.write(`openai: ${lease.access.openai_base_url}\n`);
        if (lease.access?.ssh) process.stdout.write(`ssh -p ${lease.access.ssh.port} root@${lease.access.ssh.host}\n`);
      }
      return;
    }
    if (lease.status !== "provisioning") {
      line.done();
      const why = [lease.stop_reason, lease.error].filter(Boolean).join(": ");
      throw new ApiFailure(
        "lease_failed",
        `lease ${id} is ${lease.status} before it ran${why ? ` (${why})` : ""}`,
        null,
      );
    }
    line.show(phase, rest());
    await sleep(POLL_MS);
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
    const events = /** @type {ReadableStream<Uint8Array>} */ (/** @type {unknown} */ (stream))
      .pipeThrough(/** @type {TransformStream<Uint8Array, string>} */ (new TextDecoderStream()))
      .pipeThrough(new EventSourceParserStream());
    for await (const message of events) {
      const event = JSON.parse(message.data);
      lastId = Number(message.id) || lastId;
      process.stdout.write(options.json ? `${JSON.stringify(event)}\n` : `${eventLine(event)}\n`);
    }
    const lease = await call(client.GET("/v1/leases/{id}", { params: { path: { id } } }), url);
    if (lease.status === "stopped") return;
  }
}
