// Starts the local worker (wrangler dev) with extra --var arguments and a throwaway state folder.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const ADMIN = "bench-admin-token";

export async function startWorker({ port = 8911, vars = [], sim = false } = {}) {
  const taken = await fetch(`http://127.0.0.1:${port}/health`).then(() => true, () => false);
  if (taken) throw new Error(`port ${port} is already serving: stop that worker first`);
  const persist = mkdtempSync(join(tmpdir(), "gpulease-bench-"));
  const env = { ...process.env, WRANGLER_SEND_METRICS: "false" };
  const migrate = spawnSync("node_modules/.bin/wrangler", ["d1", "migrations", "apply", "DB", "--local", "--persist-to", persist], { env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  if (migrate.status !== 0) throw new Error(`migrations failed: ${migrate.stderr}`);
  const child = spawn(
    "node_modules/.bin/wrangler",
    ["dev", "--port", String(port), "--persist-to", persist, "--test-scheduled",
      "--var", `ADMIN_TOKEN:${ADMIN}`, "--var", `ENABLE_SIM:${sim}`,
      "--var", "RATE_LIMIT_PER_MIN:1000000", "--var", "RENT_RATE_LIMIT_PER_MIN:1000000", ...vars],
    { env, stdio: ["ignore", "pipe", "pipe"] },
  );
  let log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 120; i++) {
    try {
      if ((await fetch(`${base}/health`, { signal: AbortSignal.timeout(2_000) })).ok) break;
    } catch {}
    await new Promise((r) => setTimeout(r, 500));
    if (i === 119) throw new Error(`worker did not start:\n${log}`);
  }
  const api = (path, init = {}) =>
    fetch(`${base}${path}`, {
      ...init,
      headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json", ...(init.headers ?? {}) },
    });
  return { base, api, log: () => log, stop: () => child.kill("SIGTERM") };
}

export function stats(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return { n: sorted.length, min: sorted[0], median: at(0.5), p95: at(0.95), max: sorted[sorted.length - 1] };
}
