import { env } from "cloudflare:workers";
import { afterAll, describe, expect, it } from "vitest";
import { loadSettings, overlayVars } from "../../src/config";
import type { Lease } from "../../src/leases/schema";
import { clearOfferCache } from "../../src/offers/cache";
import { api } from "../helpers";
import type { FaultyProvider } from "../robustness/faulty";
import { type Cell, formatMatrix } from "../robustness/matrix";
import { TestClock } from "../support/clock";
import { emptyTables } from "../support/fresh";
import { fireNext } from "../support/keeper";
import { batchBody } from "../support/lease";
import { runReaperCron } from "./crash";
import { everyMachine, makeWorld, oneOfferAt, PROVIDERS, twoOffersAt, type World } from "./multi-create-world";

/*
 * The multi-create matrix: the crash-point matrix for rentals that send two creates. A rental sends two creates: two offers at one
 * provider, or one at provider A and one at provider B. The first create always makes its machine
 * and answers a 500 (ambiguous); the last either succeeds, or is ambiguous too. Each machine shows
 * in its provider's listing after a lag: at once, after the rent's own label lookup but before
 * the keeper's, or after the keeper's first lookup. Then the keeper's alarms and the reaper run
 * until quiet, and the cell holds when
 *   1. no machine is alive at any fake,
 *   2. every lease is `stopped` with `teardown_verified_at`,
 *   3. the ledger's cost (all leases, in USD) is within 1 % of what the fakes billed for every
 *      machine they made.
 */

export type Subject = "runpod" | "runpod-graphql" | "vast" | "vramfarm";
type Shape = "one provider" | "two providers";
type Outcome = "last ok" | "all ambiguous";

/**
 * Listing lags. The rent path looks the label up at once and 1.5 s later (src/leases/rent.ts);
 * the keeper first looks a create up when its rent window (2 minutes, src/keeper/decide.ts) has
 * passed since it was sent, and concludes "no machine" from that look.
 */
const LAG = { at_once: 0, after_rent_lookup: 30_000, after_keeper_lookup: 5 * 60_000 } as const;
type Lag = keyof typeof LAG;
const LONG: Lag = "after_keeper_lookup";

/** The provider a two-provider rental moves to after an ambiguous create at the subject's. */
const PARTNER: Record<FaultyProvider, FaultyProvider> = { runpod: "vast", vast: "vramfarm", vramfarm: "runpod" };

interface CellSpec {
  shape: Shape;
  outcome: Outcome;
  first: Lag;
  last: Lag;
}

const MAX_MINUTES = 20;
/** keeper alarms per lease per round, and rounds of (alarms, then the reaper) */
const ALARMS_PER_ROUND = 250;
const ROUNDS = 4;
/** each round ends past the reaper's grace (REAPER_GRACE_MIN, 15) for what appeared in it */
const REAPER_EVERY_MS = 16 * 60_000;
const TOLERANCE = 0.01;
/**
 * The ledger learns that a machine is gone at the first read that says so, up to one verify
 * interval after the provider stopped billing it: a cell whose machines are found and torn down
 * within seconds may show the ledger that much above the bill (a twentieth of a cent), never below.
 */
const OVER_BILLED_FLOOR_USD = 0.0005;

const ROWS: { first: Lag; last: Lag }[] = [
  { first: "at_once", last: "at_once" },
  ...(["after_rent_lookup", "after_keeper_lookup"] as const).flatMap((first) =>
    (["at_once", "after_rent_lookup", "after_keeper_lookup"] as const).map((last) => ({ first, last })),
  ),
];
const COLUMNS: { shape: Shape; outcome: Outcome }[] = [
  { shape: "one provider", outcome: "last ok" },
  { shape: "one provider", outcome: "all ambiguous" },
  { shape: "two providers", outcome: "last ok" },
  { shape: "two providers", outcome: "all ambiguous" },
];
const rowName = (r: { first: Lag; last: Lag }) => `first ${r.first}, last ${r.last}`;
const columnName = (c: { shape: Shape; outcome: Outcome }) => `${c.shape}, ${c.outcome}`;

/**
 * Why a cell is not run. A first machine listed at once is found by the rent's own lookup, so no
 * second create is sent: one cell (the single-create control) covers that row. A create that
 * succeeds names its machine, so its listing lag only matters to an ambiguous last create.
 * VRAMfarm servers carry no label (docs/providers.md#vramfarm) and its listing documents no lag:
 * a server that shows only after the keeper's last look cannot be told from the account owner's
 * own, so no lookup can ever find it, and the long lag is not run there.
 */
function notApplicable(subject: Subject, spec: CellSpec): string | null {
  if (spec.first === "at_once")
    return spec.shape === "one provider" && spec.outcome === "all ambiguous"
      ? null
      : "the first machine is found at once: one create only, run once (one provider, all ambiguous)";
  if (spec.outcome === "last ok" && spec.last !== "at_once") return "a create that succeeds names its machine";
  const [a, b] = providersOf(subject, spec.shape);
  if ((a === "vramfarm" && spec.first === LONG) || (b === "vramfarm" && spec.last === LONG))
    return "a VRAMfarm server (no label) listed only after the keeper's last look: nothing can find it";
  return null;
}

const clock = new TestClock();
const results = new Map<string, Cell>();
const key = (subject: Subject, row: string, column: string) => `${subject}|${row}|${column}`;

function providerOf(subject: Subject): FaultyProvider {
  return subject === "runpod-graphql" ? "runpod" : subject;
}

/** Where the first and the last create go. */
function providersOf(subject: Subject, shape: Shape): [FaultyProvider, FaultyProvider] {
  const a = providerOf(subject);
  return [a, shape === "two providers" ? PARTNER[a] : a];
}

/** Only the providers the rental may use are configured (the sim and the others are not candidates). */
function configureOnly(subject: Subject, providers: FaultyProvider[]): void {
  overlayVars({
    RUNPOD_TRANSPORT: subject === "runpod-graphql" ? "graphql" : "rest",
    ENABLE_SIM: "false",
    ...(providers.includes("runpod") ? {} : { RUNPOD_API_KEY: "" }),
    ...(providers.includes("vast") ? {} : { VAST_API_KEY: "" }),
    ...(providers.includes("vramfarm") ? {} : { VRAMFARM_TOKEN: "" }),
  });
}

async function emptyLedger(): Promise<void> {
  const { results: tables } = await env.DB.prepare(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%' AND name <> 'd1_migrations'",
  ).all<{ name: string }>();
  await emptyTables(tables.map((t) => t.name));
}

async function leases(): Promise<Lease[]> {
  const res = await api("/v1/leases?limit=100");
  if (res.status !== 200) throw new Error(`GET /v1/leases: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { leases: Lease[] }).leases;
}

/** Keeper alarms of every lease, then the reaper past its grace, until nothing is left open. */
async function settle(): Promise<void> {
  for (let round = 0; round < ROUNDS; round++) {
    for (const { id } of await leases()) {
      for (let i = 0; i < ALARMS_PER_ROUND; i++) if (!(await fireNext(clock, id))) break;
    }
    const openBefore = (await leases()).some((l) => l.status !== "stopped");
    clock.advance(REAPER_EVERY_MS);
    await runReaperCron(clock);
    const openAfter = (await leases()).some((l) => l.status !== "stopped");
    if (round > 0 && !openBefore && !openAfter) return;
  }
}

const minutes = (ms: number) => `${Math.round(ms / 60_000)} min`;

async function runCell(subject: Subject, spec: CellSpec): Promise<Cell> {
  const [a, b] = providersOf(subject, spec.shape);
  clock.install();
  clock.advance(3_600_000);
  clearOfferCache();
  await emptyLedger();
  configureOnly(subject, [a, b]);
  const lags = [LAG[spec.first], LAG[spec.last]];
  const w = makeWorld((n) => lags[Math.min(n, 1)]!);
  try {
    return await scenario(w, subject, spec, a, b);
  } catch (error) {
    return {
      state: "not held",
      note: `${subject}: the scenario threw: ${error instanceof Error ? error.message : error}`,
    };
  } finally {
    w.restore();
  }
}

async function scenario(w: World, subject: Subject, spec: CellSpec, a: FaultyProvider, b: FaultyProvider) {
  const problems: string[] = [];
  const ambiguous = { afterEffect: true };
  const http500 = { kind: "http", status: 500 } as const;
  if (a === b) {
    twoOffersAt(w, a);
    w.faulty[a].inject("rent", http500, { ...ambiguous, times: spec.outcome === "all ambiguous" ? 2 : 1 });
  } else {
    oneOfferAt(w, a, true);
    oneOfferAt(w, b, false);
    w.faulty[a].inject("rent", http500, { ...ambiguous, times: 1 });
    if (spec.outcome === "all ambiguous") w.faulty[b].inject("rent", http500, { ...ambiguous, times: 1 });
  }
  const body =
    a === b
      ? batchBody(a, { max_minutes: MAX_MINUTES })
      : (({ provider: _, ...rest }) => rest)(batchBody(a, { max_minutes: MAX_MINUTES }));
  const rented = await api("/v1/leases", { method: "POST", json: body });
  const answer = `${rented.status} ${((await rented.json()) as { code?: string }).code ?? ""}`.trim();

  // The cell proves something only if the rental sent the creates it is about.
  const expected = spec.first === "at_once" ? [a] : [a, b];
  const sent = w.creates.map((c) => c.provider);
  if (JSON.stringify(sent) !== JSON.stringify(expected) || w.creates.some((c) => c.machines.length !== 1))
    problems.push(
      `expected creates at ${expected.join(", ")}; sent ${w.creates.map((c) => `${c.provider} (${c.machines.length} machine)`).join(", ") || "none"}`,
    );

  await settle();
  clock.advance(60_000);

  const eurUsd = loadSettings(env).config.eurUsd;
  const machines = everyMachine(w, clock.now, eurUsd);
  const createOf = (id: string) => w.creates.findIndex((c) => c.machines.includes(id)) + 1;
  for (const m of machines.filter((x) => x.alive)) {
    problems.push(
      `machine alive: ${m.provider} ${m.machine.id} (create ${createOf(m.machine.id)}, ${m.machine.label ?? "no label"}, up ${minutes(clock.now - m.machine.createdAt)})`,
    );
  }
  const ledger = await leases();
  for (const lease of ledger) {
    if (lease.status !== "stopped") problems.push(`lease ${lease.id} ended ${lease.status}`);
    else if (!lease.teardown_verified_at) problems.push(`lease ${lease.id} stopped without teardown_verified_at`);
  }
  const ledgerUsd = ledger.reduce((sum, l) => sum + (l.currency === "EUR" ? l.cost * eurUsd : l.cost), 0);
  const billed = machines.reduce((sum, m) => sum + m.billedUsd, 0);
  if (billed <= 0) problems.push("the fakes billed nothing: no machine was made");
  else if (
    ledgerUsd < billed * (1 - TOLERANCE) ||
    ledgerUsd > billed + Math.max(TOLERANCE * billed, OVER_BILLED_FLOOR_USD)
  )
    problems.push(
      `ledger cost ${ledgerUsd.toFixed(4)} USD vs billed ${billed.toFixed(4)} USD (${(((ledgerUsd - billed) / billed) * 100).toFixed(1)} %) over ${machines.length} machine(s), ${ledger.length} lease(s)`,
    );
  const served = PROVIDERS.reduce((n, p) => n + w.faulty[p].served.rent, 0);
  const wanted = spec.first === "at_once" ? 1 : spec.outcome === "all ambiguous" ? 2 : 1;
  if (served !== wanted) problems.push(`${served} ambiguous create(s) answered, ${wanted} planned`);
  if (problems.length === 0) return { state: "held" as const, note: "" };
  // What happened, for the report: every machine with its bill, every lease with its events.
  const made = machines.map(
    (m) =>
      `${m.provider} ${m.machine.id} (create ${createOf(m.machine.id)}) billed ${m.billedUsd.toFixed(4)} USD${m.alive ? ", alive" : ""}`,
  );
  const stories = await Promise.all(ledger.map(story));
  return {
    state: "not held" as const,
    note: `${subject}: answer ${answer}; ${problems.join("; ")}. Machines: ${made.join(", ")}. Leases: ${stories.join(" | ")}`,
  };
}

/** A lease's events in one line, repeats folded: what the report quotes (never asserted on). */
async function story(lease: Lease): Promise<string> {
  const res = await api(`/v1/leases/${lease.id}/events`);
  const events = ((await res.json()) as { events: { kind: string }[] }).events;
  const steps: { kind: string; times: number }[] = [];
  for (const e of events) {
    const last = steps.at(-1);
    if (last?.kind === e.kind) last.times += 1;
    else steps.push({ kind: e.kind, times: 1 });
  }
  const kinds = steps.map((s) => (s.times > 1 ? `${s.kind} ×${s.times}` : s.kind)).join(" → ");
  return `${lease.provider ?? "no provider"} ${lease.provider_ref ?? "no machine"} ${lease.status}, cost ${lease.cost} ${lease.currency ?? ""}: ${kinds}`;
}

/**
 * Registers the multi-create matrix of one subject (a provider, or RunPod over GraphQL):
 * multi-create-<subject>.test.ts each call this, so vitest spreads them over its workers.
 */
export function multiCreateMatrix(subject: Subject): void {
  const skipped = new Map<string, number>();
  afterAll(() => {
    overlayVars({});
    const table = formatMatrix(
      ROWS.map(rowName),
      COLUMNS.map((c) => ({ provider: subject, call: columnName(c) })),
      (row, column) => results.get(key(subject, row, column.call)) ?? { state: "n/a", note: "" },
    );
    const legend = [...skipped].map(([why, n]) => `- ${why} (${n} cell${n > 1 ? "s" : ""})`);
    console.log(
      `\nMulti-create rentals (listing lag of the first / last machine × shape, outcome): held / NOT HELD / n/a\n${table}\n\nn/a:\n${legend.join("\n")}`,
    );
  });

  describe(`${subject}: rentals that send two creates`, () => {
    for (const row of ROWS) {
      for (const column of COLUMNS) {
        const spec: CellSpec = { ...row, ...column };
        const skip = notApplicable(subject, spec);
        if (skip) {
          skipped.set(skip, (skipped.get(skip) ?? 0) + 1);
          continue;
        }
        it(`${columnName(spec)}; ${rowName(spec)}: every machine gone and verified, cost within 1 %`, async () => {
          const cell = await runCell(subject, spec);
          results.set(key(subject, rowName(spec), columnName(spec)), cell);
          expect(cell.note).toBe("");
        }, 60_000);
      }
    }
  });
}
