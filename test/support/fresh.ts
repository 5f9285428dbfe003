import { abortAllDurableObjects, applyD1Migrations, reset } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { vi } from "vitest";

/**
 * An empty ledger, fresh Durable Objects and the real clock. Test files share one workerd per
 * vitest worker (isolate: false in vitest.config.ts), so test/setup.ts runs this before each file.
 */
export async function freshState(): Promise<void> {
  vi.useRealTimers();
  await abortAllDurableObjects();
  // Every Durable Object's storage and alarms; D1 lives outside them, so it is emptied below.
  await reset();
  await applyD1Migrations(env.DB, env.TEST_MIGRATIONS);
  const { results } = await env.DB.prepare(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%' AND name <> 'd1_migrations'",
  ).all<{ name: string }>();
  await emptyTables(results.map(({ name }) => name));
}

/** The outbox and its subscribers: a webhook left by an earlier test would get this test's events. */
export const WEBHOOK_TABLES = ["webhooks", "webhook_deliveries", "webhook_events"];

/** Empties D1 tables in one batch: D1 has no BEGIN, and deferred foreign keys allow any order. */
export async function emptyTables(names: string[]): Promise<void> {
  await env.DB.batch([
    env.DB.prepare("PRAGMA defer_foreign_keys = ON"),
    ...names.map((name) => env.DB.prepare(`DELETE FROM "${name}"`)),
  ]);
}
