// Starts the local worker (wrangler dev) on a free loopback port with a throwaway state folder and
// its D1 migrated. Used by the benches and the end-to-end suites (test/e2e).
import { spawn } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { copyDocsAssets } from "../docs-assets.mjs";

export const ADMIN = "local-e2e-admin-token";
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const wrangler = join(root, "node_modules", ".bin", "wrangler");

/** A TCP port nobody listens on right now (the OS picks it). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/**
 * Starts `wrangler dev` and waits for /health. `vars` are extra `--var NAME:VALUE` arguments
 * (already split: ["--var", "X:1", ...]). The rate limits are lifted unless `liftRateLimits` is
 * false (then wrangler.toml's apply). Returns the base URL, an authorised fetch helper, the
 * combined log, the inspector port (Chrome DevTools Protocol, for CPU profiles), the state folder
 * and stop(). `main`: another entry than wrangler.toml's (a bench's instrumented worker).
 * `configs`: other wrangler configs than wrangler.toml; `persistFrom`: the state folder of a worker
 * already started, shared (bench/lib/split-config.mjs runs the Durable Objects in a worker of their
 * own that way). `keepWarm`: two /health requests a second while it runs (keepConnectionsWarm).
 */
export async function startWorker({
  port,
  vars = [],
  sim = false,
  admin = ADMIN,
  liftRateLimits = true,
  main = null,
  configs = null,
  persistFrom = null,
  keepWarm = false,
} = {}) {
  port ??= await freePort();
  copyDocsAssets();
  const inspectorPort = await freePort();
  // A second worker of a split pair shares the first one's local state (its D1 and the dev registry).
  const persist = persistFrom ?? mkdtempSync(join(tmpdir(), "gpulease-local-"));
  const env = { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true" };
  if (!persistFrom) cpSync(await migratedState(env), persist, { recursive: true });
  const child = spawn(
    wrangler,
    [
      "dev",
      ...(main ? [main] : []),
      ...(configs ?? []).flatMap((config) => ["--config", config]),
      "--ip",
      "127.0.0.1",
      "--port",
      String(port),
      "--inspector-port",
      String(inspectorPort),
      "--persist-to",
      persist,
      "--test-scheduled",
      "--show-interactive-dev-session=false",
      "--var",
      `ADMIN_TOKEN:${admin}`,
      "--var",
      `ENABLE_SIM:${sim}`,
      ...(liftRateLimits ? ["--var", "RATE_LIMIT_PER_MIN:1000000", "--var", "RENT_RATE_LIMIT_PER_MIN:1000000"] : []),
      ...vars,
    ],
    { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] },
  );
  let log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${base}/health`, { signal: AbortSignal.timeout(2_000) })).ok) break;
    } catch {}
    if (child.exitCode !== null || i >= 120) {
      child.kill("SIGTERM");
      throw new Error(`worker did not start:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  const warm = keepWarm ? keepConnectionsWarm(base) : null;
  const api = (path, init = {}) =>
    fetch(`${base}${path}`, {
      ...init,
      headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json", ...(init.headers ?? {}) },
    });
  /** The answer's JSON; throws with the status and body unless it is 2xx. */
  const json = async (path, init) => {
    const res = await api(path, init);
    const body = await res.json();
    if (!res.ok) throw new Error(`${init?.method ?? "GET"} ${path}: ${res.status} ${JSON.stringify(body)}`);
    return body;
  };
  const stop = async () => {
    if (warm) clearInterval(warm);
    if (child.exitCode === null) {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
    }
    if (!persistFrom) rmSync(persist, { recursive: true, force: true });
    // What the worker logged, kept for a failed run to be read afterwards (E2E_WORKER_LOGS=dir).
    if (process.env.E2E_WORKER_LOGS) {
      mkdirSync(process.env.E2E_WORKER_LOGS, { recursive: true });
      writeFileSync(join(process.env.E2E_WORKER_LOGS, `worker-${port}.log`), log);
    }
  };
  return { base, admin, api, json, log: () => log, inspectorPort, persist, stop };
}

let migrated;
/**
 * A state folder with the local D1 migrated, made once per process: each worker starts from a
 * copy, so the e2e suites' six workers pay for one migration, not six. The migrations run as one
 * `wrangler d1 execute` of their files in order, with the bookkeeping rows `wrangler d1
 * migrations apply` would write: that command runs each file in a Miniflare of its own (18 s for
 * 20 files on 2 cores, against 4 s).
 */
function migratedState(env) {
  migrated ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), "gpulease-migrated-"));
    process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, "migrations.sql");
    writeFileSync(file, migrationsScript());
    const migrate = await run(
      wrangler,
      ["d1", "execute", "DB", "--local", "--persist-to", dir, "--file", file, "--yes"],
      env,
    );
    rmSync(file);
    if (migrate.status !== 0) throw new Error(`migrations failed: ${migrate.output}`);
    return dir;
  })();
  return migrated;
}

/** Every file of migrations/ in order, then the rows that record them as applied. */
export function migrationsScript() {
  const folder = join(root, "migrations");
  const names = readdirSync(folder)
    .filter((name) => name.endsWith(".sql"))
    .sort();
  // As wrangler writes it, whitespace included: the schema is the same as after `migrations apply`.
  const table = `CREATE TABLE IF NOT EXISTS d1_migrations(
\t\tid         INTEGER PRIMARY KEY AUTOINCREMENT,
\t\tname       TEXT UNIQUE,
\t\tapplied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL
);`;
  const rows = names.map((name) => `INSERT INTO d1_migrations (name) VALUES ('${name}');`);
  return [...names.map((name) => readFileSync(join(folder, name), "utf8")), table, ...rows].join("\n");
}

/**
 * `wrangler dev` forwards each request from its proxy to the worker over pooled connections, and
 * both ends drop a connection idle for 5 s: a request sent on one just then fails, and a POST is
 * answered 503 "Your worker restarted mid-request" though nothing restarted
 * (cloudflare/workers-sdk#14641, not fixed in the wrangler this project pins). The pool hands out
 * the connection returned last, so two requests every second keep the ones a request gets fresh.
 */
function keepConnectionsWarm(base) {
  const timer = setInterval(() => {
    for (let i = 0; i < 2; i++) {
      fetch(`${base}/health`, { signal: AbortSignal.timeout(5_000) })
        .then((res) => res.body?.cancel())
        .catch(() => undefined);
    }
  }, 1_000);
  timer.unref();
  return timer;
}

/** Runs a command to its end: its exit status and combined output. */
function run(command, args, env) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (d) => (output += d));
    child.stderr.on("data", (d) => (output += d));
    child.once("error", reject);
    child.once("close", (status) => resolve({ status, output }));
  });
}

export function stats(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return { n: sorted.length, min: sorted[0], median: at(0.5), p95: at(0.95), max: sorted[sorted.length - 1] };
}
