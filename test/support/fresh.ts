import { applyD1Migrations, reset } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { vi } from "vitest";
import { clearOfferCache } from "../../src/offers/cache";
import { simCloud } from "../../src/sim/cloud";

/**
 * An empty ledger, fresh Durable Objects, no cached offer listing and the real clock. Test files share one workerd per
 * vitest worker (isolate: false in vitest.config.ts), so test/setup.ts runs this before each file.
 */
export async function freshState(): Promise<void> {
  vi.useRealTimers();
  // The isolate's own offers cache outlives a file; a listing an earlier file cached (the sim
  // with no RTX 4090 left, say) would answer this file's rentals for up to 30 s.
  clearOfferCache();
  // Aborts every live Durable Object and wipes its storage and alarms. Not after
  // abortAllDurableObjects(): an aborted object is no longer live, and reset() then leaves its
  // storage as it was (the sim's machines lived on into the next file). D1 lives outside the
  // objects, so it is emptied below.
  await reset();
  // An object evicted while idle is not live either; the one singleton whose state a later file
  // would see, the simulated cloud, goes back to its defaults explicitly.
  await simCloud(env.SIM_CLOUD).reset();
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
