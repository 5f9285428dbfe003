import { env } from "cloudflare:workers";
import { expect, it } from "vitest";
import type { UsageSample } from "../../src/gateway/usage";
import { iso } from "../../src/lib/time";
import { CrashSwitch, driveToEnd } from "../money-safety/crash";
import { apiDirect } from "../robustness/direct";
import { keeperOf } from "../support/keeper";
import { clock, fireWith, freshWorld, isWrite, leaseStatus, runningLease, world } from "./keeper-world";

/*
 * Churn: CHURN_LEASES leases (vitest.config.ts; `node bench/keeper-churn.mjs` runs 50) against
 * the RunPod fake, a few at a time, each keeper alarm with one D1 write in 50 failing; strays of
 * their labels that ignore terminates, claimed at random moments (some inside an alarm, at a
 * random await); a hostile machine's usage answers; stops at random. At the end: no machine
 * alive, the ledger's cost within 1 % of what the fake billed, and the provider calls per alarm.
 */

const LEASES = Number(env.CHURN_LEASES);
const AT_ONCE = 4;

/** A seeded PRNG (mulberry32): the same churn every run. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rng = random(2026);
const pick = <T>(list: readonly T[]): T => list[Math.floor(rng() * list.length)] as T;

/** Every alarm: one D1 write in 50 fails; provider calls counted; maybe a claim at a random await. */
class Chaos extends CrashSwitch {
  calls = 0;
  failures = 0;
  private awaits = 0;
  constructor(
    private readonly claimAt: number | null,
    private readonly claim: () => Promise<void>,
  ) {
    super({ at: 0, mode: "fail" }, async () => undefined);
  }
  override async hook<T>(label: string, op: () => Promise<T>): Promise<T> {
    if (!this.active) return op();
    this.awaits += 1;
    if (this.awaits === this.claimAt) {
      this.active = false;
      await this.claim();
      this.active = true;
    }
    if (label.startsWith("fetch ")) this.calls += 1;
    if (isWrite(label) && rng() < 1 / 50) {
      this.failures += 1;
      throw new Error(`injected D1 failure at ${label}`);
    }
    return op();
  }
}

const HOSTILE: UsageSample[] = [
  { ok: true, prompt_tokens: 1e308, completion_tokens: 1, decode_tokens_per_s: null, first_token_ms: 5 },
  { ok: true, prompt_tokens: 0.5, completion_tokens: 3, decode_tokens_per_s: 20, first_token_ms: 5 },
  { ok: true, prompt_tokens: Number.NaN, completion_tokens: 3, decode_tokens_per_s: 20, first_token_ms: 5 },
  { ok: true, prompt_tokens: 12, completion_tokens: 3, decode_tokens_per_s: 1e12, first_token_ms: -4 },
  { ok: true, prompt_tokens: 12, completion_tokens: 3, decode_tokens_per_s: 40, first_token_ms: 90 },
];

interface Figures {
  leases: number;
  alive: number;
  ledger: number;
  billed: number;
  ratio: number;
  alarms: number;
  callsMax: number;
  callsMedian: number;
  d1Failures: number;
  claims: number;
}

async function churn(): Promise<Figures> {
  // Billing ends at an honoured terminate and the machine is gone at once: the ledger's bill,
  // which runs to the first gone read, can be compared with the fake's.
  await freshWorld({ lingerMs: 0 });
  const perAlarm: number[] = [];
  let d1Failures = 0;
  let claims = 0;
  const leaseIds: string[] = [];
  for (let wave = 0; wave < LEASES; wave += AT_ONCE) {
    const leases = [];
    for (let i = wave; i < Math.min(LEASES, wave + AT_ONCE); i++) leases.push(await runningLease({ max_minutes: 90 }));
    const plans = leases.map((lease) => ({
      lease,
      stopAfter: 10 + Math.floor(rng() * 40),
      strays: Array.from({ length: pick([0, 0, 1, 2]) }, () => ({
        ref: world.runpod.plantPod({ name: lease.label, ignoreTerminates: pick([0, 2, 8, 30]), lingerMs: 0 }),
        claimAt: Math.floor(rng() * 30),
        claimed: false,
      })),
    }));
    for (const plan of plans) {
      leaseIds.push(plan.lease.id);
      for (let alarm = 0; alarm < 2_000; alarm++) {
        if ((await leaseStatus(plan.lease.id)) === "stopped" && plan.strays.every((s) => s.claimed)) break;
        if (alarm === plan.stopAfter) await apiDirect(`/v1/leases/${plan.lease.id}/stop`, { method: "POST" });
        if (rng() < 0.3) {
          const usage = pick(HOSTILE);
          await keeperOf(plan.lease.id)
            .recordUsage(plan.lease.id, usage)
            .catch(() => undefined);
        }
        const due = plan.strays.find((s) => !s.claimed && s.claimAt <= alarm);
        const claim = async () => {
          if (!due || due.claimed) return;
          due.claimed = true;
          claims += 1;
          const m = world.runpod.model.get(due.ref);
          await keeperOf(plan.lease.id)
            .claim(plan.lease.id, {
              provider: "runpod",
              ref: due.ref,
              price_per_hour: m?.pricePerHour ?? null,
              billed_from: iso(m?.createdAt ?? clock.now),
              detail: "found by the reaper",
              currency: "USD",
            })
            .catch(() => {
              due.claimed = false;
              claims -= 1;
            });
        };
        // Half the claims land between alarms, half inside one at a random await.
        const inside = due && rng() < 0.5;
        if (due && !inside) await claim();
        const chaos = new Chaos(inside ? 1 + Math.floor(rng() * 6) : null, claim);
        const { fired } = await fireWith(plan.lease.id, chaos);
        if (!fired) {
          if ((await leaseStatus(plan.lease.id)) === "stopped") {
            if (due) await claim();
            continue;
          }
          break;
        }
        perAlarm.push(chaos.calls);
        d1Failures += chaos.failures;
      }
    }
  }
  // Whatever is left: the keepers' alarms and the reaper, as in production.
  await driveToEnd(clock);
  clock.advance(10 * 60_000);

  const alive = world.runpod.model.list().length;
  const { results } = await env.DB.prepare("SELECT cost, strays_cost FROM leases").all<{
    cost: number;
    strays_cost: number;
  }>();
  const ledger = results.reduce((sum, l) => sum + l.cost + l.strays_cost, 0);
  const billed = [...world.runpod.model["machines"].values()].reduce(
    (sum, m) => sum + world.runpod.model.billedHours(m.id, "created") * m.pricePerHour,
    0,
  );
  const sorted = [...perAlarm].sort((a, b) => a - b);
  return {
    leases: leaseIds.length,
    alive,
    ledger: Math.round(ledger * 1e4) / 1e4,
    billed: Math.round(billed * 1e4) / 1e4,
    ratio: Math.round((ledger / billed) * 1e4) / 1e4,
    alarms: perAlarm.length,
    callsMax: sorted.at(-1) ?? 0,
    callsMedian: sorted[Math.floor(sorted.length / 2)] ?? 0,
    d1Failures,
    claims,
  };
}

it("churn: every machine gone, the ledger within 1 % of the bill, provider calls per alarm bounded", async () => {
  const figures = await churn();
  console.log(`CHURN ${JSON.stringify(figures)}`);
  expect(figures.leases).toBe(LEASES);
  expect(figures.alive).toBe(0);
  expect(figures.alarms).toBeGreaterThan(0);
  expect(Math.abs(figures.ratio - 1)).toBeLessThanOrEqual(0.01);
  expect(figures.callsMax).toBeLessThanOrEqual(6);
}, 600_000);
