import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { newId } from "../../src/lib/ids";
import { clock, envWith, fireCron, resetSim, useFakeClock } from "../schedules/support";
import { emptyTables } from "../support/fresh";

const REAPER = "*/10 * * * *";
const NOW = Date.parse("2031-06-01T00:00:00Z");
const DAY = 86_400_000;
const OLD = NOW - 10 * DAY;
const RECENT = NOW - 2 * DAY;
const iso = (ms: number) => new Date(ms).toISOString();
const TABLES = [
  "leases",
  "lease_creates",
  "lease_events",
  "lease_billing",
  "schedule_runs",
  "reaper_runs",
  "webhook_events",
  "webhook_deliveries",
  "dashboard_sessions",
];
// Report mode: the reaper only records, so it never touches the rows laid out here.
const weekly = () => envWith({ RETENTION_DAYS: "7", REAPER_MODE: "report" });

async function lease(id: string, status: string, createdAt: number): Promise<void> {
  await env.DB.prepare(
    `INSERT INTO leases (id, status, provider, label, template, spec, max_minutes, created_at, stopped_at, teardown_verified_at)
     VALUES (?, ?, 'sim', ?, 'custom', '{}', 60, ?, ?, ?)`,
  )
    .bind(id, status, `gpulease-${id}`, iso(createdAt), status === "stopped" ? iso(createdAt + 3_600_000) : null, null)
    .run();
}

async function event(leaseId: string, at: number, kind = "note"): Promise<void> {
  await env.DB.prepare("INSERT INTO lease_events (lease_id, at, kind, detail) VALUES (?, ?, ?, NULL)")
    .bind(leaseId, iso(at), kind)
    .run();
}

async function billingDay(leaseId: string, at: number): Promise<void> {
  await env.DB.prepare(
    "INSERT INTO lease_billing (lease_id, provider, day, billed, currency, checked_at) VALUES (?, 'sim', ?, 1, 'USD', ?)",
  )
    .bind(leaseId, iso(at).slice(0, 10), iso(at))
    .run();
}

async function run(scheduleId: string, dueAt: number, status: string): Promise<void> {
  await env.DB.prepare(
    "INSERT INTO schedule_runs (schedule_id, due_at, status, attempts, created_at, updated_at) VALUES (?, ?, ?, 1, ?, ?)",
  )
    .bind(scheduleId, iso(dueAt), status, iso(dueAt), iso(dueAt))
    .run();
}

async function webhookEvent(at: number, delivery: "pending" | "delivered" | "failed"): Promise<string> {
  const id = newId("evt", at);
  await env.DB.batch([
    env.DB.prepare(
      "INSERT INTO webhook_events (id, type, lease_id, detail, data, created_at) VALUES (?, 'lease.stopped', NULL, NULL, '{}', ?)",
    ).bind(id, iso(at)),
    env.DB.prepare(
      "INSERT INTO webhook_deliveries (id, webhook_id, event_id, status, next_attempt_at, created_at) VALUES (?, 'whk_gone', ?, ?, ?, ?)",
      // A pending one is due after the test: the outbox's wake must not try it now.
    ).bind(newId("dlv", at), id, delivery, delivery === "pending" ? NOW + 3_600_000 : at, iso(at)),
  ]);
  return id;
}

async function ids(sql: string): Promise<string[]> {
  const { results } = await env.DB.prepare(sql).all<{ id: string | number }>();
  return results.map((r) => String(r.id)).sort();
}

async function count(table: string): Promise<number> {
  return (await env.DB.prepare(`SELECT COUNT(*) AS n FROM ${table}`).first<{ n: number }>())?.n ?? 0;
}

beforeEach(async () => {
  useFakeClock(NOW);
  await resetSim();
  await emptyTables(TABLES);
});

afterEach(() => {
  vi.restoreAllMocks();
});

describe("the reaper cron prunes history past RETENTION_DAYS", () => {
  it("deletes old rows nothing open needs, and keeps every row an open lease, create or delivery needs", async () => {
    await lease("lse_stopped", "stopped", OLD);
    await lease("lse_running", "running", OLD);
    await lease("lse_stuck", "stopped", OLD);
    await env.DB.prepare(
      "INSERT INTO lease_creates (lease_id, seq, provider, offer_id, sent_at) VALUES ('lse_stuck', 1, 'sim', 'sim:x:1', ?)",
    )
      .bind(iso(OLD))
      .run();
    for (const at of [OLD, OLD + 1_000, OLD + 2_000]) await event("lse_stopped", at);
    await event("lse_stopped", RECENT, "recent");
    await event("lse_running", OLD, "running-old");
    await event("lse_stuck", OLD, "stuck-old");
    await billingDay("lse_stopped", OLD);
    await billingDay("lse_stopped", RECENT);
    await billingDay("lse_running", OLD);

    await run("sch_a", OLD, "started");
    await run("sch_a", OLD + 60_000, "skipped");
    await run("sch_a", OLD + 120_000, "failed");
    await run("sch_a", OLD + 180_000, "retrying");
    await run("sch_a", OLD + 240_000, "claimed");
    await run("sch_a", RECENT, "started");

    await env.DB.prepare(
      "INSERT INTO reaper_runs (at, mode, providers, actions) VALUES (?, 'report', '[]', '[]'), (?, 'report', '[]', '[]')",
    )
      .bind(iso(OLD), iso(RECENT))
      .run();

    await webhookEvent(OLD, "delivered");
    await webhookEvent(OLD + 1_000, "failed");
    const pendingEvent = await webhookEvent(OLD + 2_000, "pending");
    const recentEvent = await webhookEvent(RECENT, "delivered");

    await env.DB.prepare(
      `INSERT INTO dashboard_sessions (id_hash, token_id, admin_digest, csrf, created_at, expires_at)
       VALUES ('expired', NULL, 'd', 'c', ?, ?), ('live', NULL, 'd', 'c', ?, ?)`,
    )
      .bind(iso(NOW - DAY), iso(NOW - 60_000), iso(NOW - 60_000), iso(NOW + DAY))
      .run();

    clock.set(NOW);
    await fireCron(REAPER, NOW, weekly());

    expect(await ids("SELECT kind AS id FROM lease_events")).toEqual(["recent", "running-old", "stuck-old"]);
    expect(await ids("SELECT lease_id || ' ' || day AS id FROM lease_billing")).toEqual([
      `lse_running ${iso(OLD).slice(0, 10)}`,
      `lse_stopped ${iso(RECENT).slice(0, 10)}`,
    ]);
    expect(await ids("SELECT status AS id FROM schedule_runs")).toEqual(["claimed", "retrying", "started"]);
    // The reaper's own run of this cron is recent too.
    expect(await ids("SELECT at AS id FROM reaper_runs WHERE at < ?".replace("?", `'${iso(NOW - DAY)}'`))).toEqual([
      iso(RECENT),
    ]);
    expect(await ids("SELECT id FROM webhook_events")).toEqual([pendingEvent, recentEvent].sort());
    expect(await ids("SELECT status AS id FROM webhook_deliveries")).toEqual(["delivered", "pending"]);
    expect(await ids("SELECT id_hash AS id FROM dashboard_sessions")).toEqual(["live"]);
    expect(await count("leases")).toBe(3);
  });

  it("keeps 90 days by default", async () => {
    await lease("lse_stopped", "stopped", OLD);
    await event("lse_stopped", NOW - 91 * DAY);
    await event("lse_stopped", OLD);
    await run("sch_a", NOW - 91 * DAY, "started");
    await run("sch_a", OLD, "started");
    await fireCron(REAPER, NOW, envWith({ REAPER_MODE: "report" }));
    expect(await count("lease_events")).toBe(1);
    expect(await ids("SELECT due_at AS id FROM schedule_runs")).toEqual([iso(OLD)]);
  });

  it("works off a backlog in bounded batches, at most 20 statements a run, and logs what it did", async () => {
    await lease("lse_stopped", "stopped", OLD);
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 27000)
       INSERT INTO lease_events (lease_id, at, kind, detail) SELECT 'lse_stopped', ?, 'beat', NULL FROM n`,
    )
      .bind(iso(OLD))
      .run();
    const lines: Record<string, unknown>[] = [];
    vi.spyOn(console, "log").mockImplementation((line: unknown) => {
      if (line && typeof line === "object") lines.push(line as Record<string, unknown>);
    });
    await fireCron(REAPER, NOW, weekly());
    const first = lines.find((l) => l.event === "retention_pruned");
    // Seven tables and the read of the events' seq bound, then twelve more batches of 2,000 for
    // the table with a backlog: 20 statements.
    expect(first).toMatchObject({ statements: 20, deleted: { lease_events: 26_000 }, more: ["lease_events"] });
    expect(await count("lease_events")).toBe(1_000);

    lines.length = 0;
    await fireCron(REAPER, NOW + 600_000, weekly());
    expect(lines.find((l) => l.event === "retention_pruned")).toMatchObject({
      statements: 8,
      deleted: { lease_events: 1_000 },
      more: [],
    });
    expect(await count("lease_events")).toBe(0);
  });

  it("a pruning statement that fails is logged and never fails the reaper's run", async () => {
    await lease("lse_stopped", "stopped", OLD);
    await event("lse_stopped", OLD);
    const warnings: Record<string, unknown>[] = [];
    vi.spyOn(console, "warn").mockImplementation((line: unknown) => {
      if (line && typeof line === "object") warnings.push(line as Record<string, unknown>);
    });
    await env.DB.prepare("ALTER TABLE schedule_runs RENAME TO schedule_runs_away").run();
    try {
      await fireCron(REAPER, NOW, weekly());
    } finally {
      await env.DB.prepare("ALTER TABLE schedule_runs_away RENAME TO schedule_runs").run();
    }
    expect(warnings.some((w) => w.event === "retention_prune_failed" && w.table === "schedule_runs")).toBe(true);
    expect(await count("lease_events")).toBe(0);
    expect(await count("reaper_runs")).toBe(1);
  });
});
