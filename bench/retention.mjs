// Retention: fills a local ledger with the history of a minutely schedule (`days` of runs, each
// run's stopped lease with its events, billing day, lease.stopped webhook event and delivery, a
// reaper run every 10 minutes, a dashboard session a day; no webhooks row, so the outbox sends
// nothing; a few rows pruning must keep: a running
// lease's old events, pending deliveries, a retrying run), written straight into the local D1's
// sqlite file, then fires the reaper cron (`/__scheduled?cron=*/10+*+*+*+*`) until pruning reports
// nothing left. Prints rows before/after per table, the longest cron run (wall ms of the
// /__scheduled call, and the pruning's own ms from its `retention_pruned` log line) and the D1
// statements pruning sent per run (goal ≤ 20; a Free-plan invocation has 50 subrequests).
// Exits 1 when it measured nothing or a goal was missed.
//   node bench/retention.mjs [days=95] [retention_days=30] [max_runs=80]
// Local `wrangler dev` on a shared machine, not Cloudflare's edge: absolute figures differ there.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startWorker } from "../scripts/lib/local-worker.mjs";
import { localD1File, sqlite } from "./lib/local-d1.mjs";

const days = Number(process.argv[2] ?? 95);
const retentionDays = Number(process.argv[3] ?? 30);
const maxRuns = Number(process.argv[4] ?? 80);
const TABLES = [
  "leases",
  "lease_events",
  "lease_billing",
  "schedule_runs",
  "reaper_runs",
  "webhook_events",
  "webhook_deliveries",
  "dashboard_sessions",
];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The worker's state folder is made under os.tmpdir(): a private one, so its sqlite is ours alone.
const privateTmp = mkdtempSync(join(tmpdir(), "gpulease-retbench-"));
process.env.TMPDIR = privateTmp;

// Report mode: the reaper only records (the bench's leases have no machines to look at).
const worker = await startWorker({
  vars: ["--var", `RETENTION_DAYS:${retentionDays}`, "--var", "REAPER_MODE:report"],
});
let failed = false;

const counts = (file) => Object.fromEntries(TABLES.map((t) => [t, Number(sqlite(file, `SELECT COUNT(*) FROM ${t};`))]));

// Crockford base32 of the time, as src/lib/ids.ts writes the time part of an id.
const B32 = "0123456789abcdefghjkmnpqrstvwxyz";
const timePart = `(SELECT group_concat(substr('${B32}', ((t / (1 << (5 * (9 - k)))) % 32) + 1, 1), '') FROM (SELECT 0 AS k UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9))`;

function fill(file) {
  const now = Date.now();
  const start = now - days * 86_400_000;
  const runs = days * 1440;
  const iso = (expr) => `strftime('%Y-%m-%dT%H:%M:%fZ', (${expr}) / 1000.0, 'unixepoch')`;
  sqlite(
    file,
    `
PRAGMA journal_mode = DELETE;
BEGIN;
CREATE TEMP TABLE n AS WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ${runs - 1}) SELECT i, ${start} + i * 60000 AS t FROM c;
INSERT INTO schedules (id, name, cron, timezone, enabled, lease_spec, next_run_at, created_at, updated_at)
  VALUES ('sch_bench', 'minutely', '* * * * *', 'UTC', 0, '{"provider":"sim","max_minutes":1}', NULL, ${iso(start)}, ${iso(start)});
INSERT INTO leases (id, status, provider, label, template, spec, max_minutes, schedule_id, created_at, stopped_at, teardown_verified_at, stop_reason)
  SELECT 'lse_b' || i, 'stopped', 'sim', 'gpulease-lse_b' || i, 'custom', '{}', 1, 'sch_bench', ${iso("t")}, ${iso("t + 50000")}, ${iso("t + 50000")}, 'max_minutes' FROM n;
INSERT INTO schedule_runs (schedule_id, due_at, status, lease_id, attempts, created_at, updated_at)
  SELECT 'sch_bench', ${iso("t")}, 'started', 'lse_b' || i, 1, ${iso("t")}, ${iso("t")} FROM n;
INSERT INTO lease_events (lease_id, at, kind, detail)
  SELECT 'lse_b' || i, ${iso("t + k * 10000")}, kind, NULL FROM n,
    (SELECT 0 AS k, 'created' AS kind UNION ALL SELECT 1, 'running' UNION ALL SELECT 4, 'stopping' UNION ALL SELECT 5, 'stopped')
  ORDER BY i, k;
INSERT INTO lease_billing (lease_id, provider, day, billed, currency, checked_at)
  SELECT 'lse_b' || i, 'sim', substr(${iso("t")}, 1, 10), 0.01, 'USD', ${iso("t + 600000")} FROM n;
INSERT INTO webhook_events (id, type, lease_id, detail, data, created_at)
  SELECT 'evt_' || ${timePart.replaceAll("t /", "(t + 50000) /")} || printf('%012d', i), 'lease.stopped', 'lse_b' || i, NULL, '{}', ${iso("t + 50000")} FROM n;
INSERT INTO webhook_deliveries (id, webhook_id, event_id, status, attempts, next_attempt_at, created_at, delivered_at)
  SELECT 'dlv_b' || e.rowid, 'whk_bench', e.id, 'delivered', 1, CAST(strftime('%s', e.created_at) AS INTEGER) * 1000, e.created_at, e.created_at FROM webhook_events e;
INSERT INTO reaper_runs (at, mode, providers, actions) SELECT ${iso("t")}, 'report', '[]', '[]' FROM n WHERE i % 10 = 0;
INSERT INTO dashboard_sessions (id_hash, token_id, admin_digest, csrf, created_at, expires_at)
  SELECT 'ses_' || i, NULL, 'd', 'c', ${iso("t")}, ${iso("t + 43200000")} FROM n WHERE i % 1440 = 0;
-- What pruning must keep: a lease still running since the start, with old events; pending
-- deliveries of old events; a run still retrying.
INSERT INTO leases (id, status, provider, label, template, spec, max_minutes, created_at)
  VALUES ('lse_keep', 'running', 'sim', 'gpulease-lse_keep', 'custom', '{}', 10080, ${iso(start)});
INSERT INTO lease_events (lease_id, at, kind, detail) SELECT 'lse_keep', ${iso("t")}, 'beat', NULL FROM n WHERE i < 500;
UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ${now + 86_400_000}
  WHERE rowid IN (SELECT rowid FROM webhook_deliveries ORDER BY rowid LIMIT 25);
UPDATE schedule_runs SET status = 'retrying' WHERE rowid IN (SELECT rowid FROM schedule_runs ORDER BY rowid LIMIT 3);
COMMIT;`,
    { write: true },
  );
}

/** The retention_pruned log lines so far: statements, ms, deleted, more. */
function prunedLines() {
  const lines = [];
  for (const m of worker.log().matchAll(/event: 'retention_pruned',([\s\S]*?)\n\}/g)) {
    const body = m[1];
    const num = (key) => Number(new RegExp(`${key}: (\\d+)`).exec(body)?.[1] ?? Number.NaN);
    const more = /more: \[([^\]]*)\]/.exec(body)?.[1].trim() ?? "";
    lines.push({ statements: num("statements"), ms: num("ms"), more: more === "" ? [] : more.split(",") });
  }
  return lines;
}

try {
  const file = localD1File(worker.persist);
  const fillStart = Date.now();
  fill(file);
  const before = counts(file);
  console.log(
    `filled ${days} days of a minutely schedule in ${((Date.now() - fillStart) / 1000).toFixed(1)} s; RETENTION_DAYS=${retentionDays}`,
  );

  const walls = [];
  let runs = 0;
  for (; runs < maxRuns; runs++) {
    const t0 = performance.now();
    const res = await fetch(`${worker.base}/__scheduled?cron=${encodeURIComponent("*/10 * * * *")}`);
    await res.text();
    // The handler's work runs in waitUntil: the run has ended once its log line is out.
    for (let i = 0; prunedLines().length < runs + 1; i++) {
      if (i > 1_200) throw new Error(`no retention_pruned line for run ${runs + 1}:\n${worker.log().slice(-3000)}`);
      await sleep(25);
    }
    walls.push(performance.now() - t0);
    if (prunedLines()[runs].more.length === 0) {
      runs++;
      break;
    }
  }
  // One more run with nothing left: what pruning costs every 10 minutes once caught up.
  await (await fetch(`${worker.base}/__scheduled?cron=${encodeURIComponent("*/10 * * * *")}`)).text();
  for (let i = 0; prunedLines().length < runs + 1 && i < 1_200; i++) await sleep(25);
  const steady = prunedLines()[runs];
  const after = counts(file);
  const lines = prunedLines().slice(0, runs);
  console.log("\ntable                 before      after");
  for (const t of TABLES)
    console.log(`${t.padEnd(20)} ${String(before[t]).padStart(8)} ${String(after[t]).padStart(10)}`);
  const statements = lines.map((l) => l.statements);
  const maxStatements = Math.max(...statements);
  console.log(`\ncron runs until nothing was left: ${runs}`);
  console.log(
    `longest cron run: ${Math.max(...walls).toFixed(0)} ms wall (/__scheduled until its retention_pruned line), pruning's own longest: ${Math.max(...lines.map((l) => l.ms))} ms`,
  );
  console.log(
    `D1 statements of pruning per run: ${statements.join(", ")} (max ${maxStatements}; goal ≤ 20, Free plan 50)`,
  );
  console.log(
    steady
      ? `caught up: a run with nothing to prune sent ${steady.statements} statements in ${steady.ms} ms`
      : "caught up: no log line for the run after",
  );
  const kept = Number(sqlite(file, "SELECT COUNT(*) FROM lease_events WHERE lease_id = 'lse_keep';"));
  const pending = Number(sqlite(file, "SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending';"));
  const pendingEvents = Number(
    sqlite(
      file,
      "SELECT COUNT(*) FROM webhook_events e WHERE EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id AND d.status = 'pending');",
    ),
  );
  const retrying = Number(sqlite(file, "SELECT COUNT(*) FROM schedule_runs WHERE status = 'retrying';"));
  const cutoff = new Date(Date.now() - retentionDays * 86_400_000).toISOString();
  const leftOld = Number(
    sqlite(
      file,
      `SELECT COUNT(*) FROM lease_events e JOIN leases l ON l.id = e.lease_id WHERE l.status = 'stopped' AND e.at < '${cutoff}';`,
    ),
  );
  console.log(
    `kept: ${kept}/500 events of the running lease, ${pending}/25 pending deliveries and ${pendingEvents}/25 of their events, ${retrying}/3 retrying runs; old events of stopped leases left: ${leftOld}`,
  );
  if (lines.length === 0 || before.lease_events === after.lease_events) {
    console.error("retention: measured nothing");
    failed = true;
  }
  if (maxStatements > 20 || kept !== 500 || pending !== 25 || pendingEvents !== 25 || retrying !== 3 || leftOld > 0)
    failed = true;
  if (lines.at(-1)?.more.length) {
    console.error(`retention: rows left after ${runs} runs`);
    failed = true;
  }
} catch (error) {
  console.error(error);
  failed = true;
} finally {
  await worker.stop();
  rmSync(privateTmp, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
