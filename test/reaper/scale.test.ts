import { env } from "cloudflare:workers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config";
import { newId } from "../../src/lib/ids";
import { runReaper } from "../../src/reaper/reaper";
import { createServices } from "../../src/services";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { VramfarmFake } from "../fakes/vramfarm";
import { clock, envWith, useFakeClock } from "../schedules/support";

/** Counts D1 round trips: every first/all/run/raw of a statement and every batch. */
function countingDb(db: D1Database): { db: D1Database; trips: () => number } {
  let trips = 0;
  const real = new WeakMap<object, D1PreparedStatement>();
  const wrap = (stmt: D1PreparedStatement): D1PreparedStatement => {
    const proxy = new Proxy(stmt, {
      get(target, prop) {
        if (prop === "bind") return (...args: unknown[]) => wrap(target.bind(...args));
        if (prop === "first" || prop === "all" || prop === "run" || prop === "raw") {
          return (...args: unknown[]) => {
            trips++;
            return (target[prop] as (...a: unknown[]) => unknown).apply(target, args);
          };
        }
        const value = Reflect.get(target, prop);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    real.set(proxy, stmt);
    return proxy;
  };
  const counting = new Proxy(db, {
    get(target, prop) {
      if (prop === "prepare") return (sql: string) => wrap(target.prepare(sql));
      if (prop === "batch") {
        return (statements: D1PreparedStatement[]) => {
          trips++;
          return target.batch(statements.map((s) => real.get(s) ?? s));
        };
      }
      const value = Reflect.get(target, prop);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { db: counting, trips: () => trips };
}

const providers = ["runpod", "vast", "vramfarm"] as const;

/** `count` stopped lease rows spread over the three providers, stopped a day ago. */
async function seedStoppedLeases(count: number, now: number): Promise<void> {
  const at = new Date(now - 24 * 3_600_000).toISOString();
  const statements: D1PreparedStatement[] = [];
  for (let i = 0; i < count; i++) {
    const id = newId("lse", now - i);
    statements.push(
      env.DB.prepare(
        `INSERT INTO leases (id, status, provider, provider_ref, label, template, spec, max_minutes, price_per_hour, currency,
           cost, stop_reason, created_at, rented_at, stopped_at, teardown_verified_at)
         VALUES (?, 'stopped', ?, ?, ?, 'custom', ?, 60, 0.5, 'USD', 0.5, 'requested', ?, ?, ?, ?)`,
      ).bind(
        id,
        providers[i % 3],
        `ref-${i}`,
        `gpulease-${id}`,
        JSON.stringify({ image: "x", cmd: null, env: {}, ports: [], disk_gb: 40, weights_gb: 0, context_length: null }),
        at,
        at,
        at,
        at,
      ),
    );
  }
  for (let i = 0; i < statements.length; i += 100) await env.DB.batch(statements.slice(i, i + 100));
}

let fakes: InstalledFakes;
const figures: { rows: number; providerCalls: number; d1Trips: number; keeperCalls: number; subrequests: number }[] =
  [];

beforeAll(() => {
  useFakeClock(Date.parse("2031-07-01T00:00:00Z"));
});

afterAll(() => {
  fakes?.restore();
  console.log(`reaper per run, by lease rows in the ledger:\n${figures.map((f) => JSON.stringify(f)).join("\n")}`);
});

describe("the reaper's cost does not grow with the ledger", () => {
  let seeded = 0;
  for (const rows of [10, 100, 1000]) {
    it(`with ${rows} lease rows: one listing per provider, a few D1 round trips, under 50 subrequests`, async () => {
      await seedStoppedLeases(rows - seeded, clock.now);
      seeded = rows;
      const runpod = new RunpodFake();
      const vast = new VastFake();
      const vramfarm = new VramfarmFake();
      fakes?.restore();
      fakes = installFakes(runpod, vast, vramfarm);
      // Two orphans each run, so the run has work to do.
      runpod.plantPod({ name: `gpulease-${newId("lse")}` });
      vast.plant({ label: `gpulease-${newId("lse")}` });
      clock.advance(20 * 60);

      const runEnv = envWith({ ENABLE_SIM: "false" });
      const counted = countingDb(env.DB);
      const services = { ...createServices(runEnv, loadConfig(runEnv)), db: counted.db };
      const run = await runReaper(services);

      const providerCalls = fakes.requests.length;
      const keeperCalls = run.actions.length;
      expect(run.providers.every((p) => p.error === null)).toBe(true);
      expect(run.actions.filter((a) => a.kind === "adopt")).toHaveLength(2);
      // RunPod: one GraphQL listing; Vast.ai: one page; VRAMfarm: running + provisioning.
      expect(providerCalls).toBe(4);
      expect(counted.trips()).toBeLessThanOrEqual(5);
      const subrequests = providerCalls + counted.trips() + keeperCalls;
      expect(subrequests).toBeLessThan(50);
      figures.push({ rows, providerCalls, d1Trips: counted.trips(), keeperCalls, subrequests });
    });
  }
});
