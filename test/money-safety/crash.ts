import { createExecutionContext, createScheduledController, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import worker from "../../src/index";
import { REAPER_CRON } from "../../src/worker-crons";
import type { FakeService } from "../fakes/install";
import { ADMIN_TOKEN } from "../helpers";
import { fireNext, type TestClock } from "../robustness/drive";

/**
 * Crash points of the rent path. Every await of a POST /v1/leases request that leaves the
 * worker (a D1 statement, a Durable Object call, a provider request) is numbered in the order the
 * request makes them; a crash plan picks one and what happens there:
 *   fail:  the call throws (a D1 write fails, a provider request errors before it arrives)
 *   abort: the request dies there: the call never returns, nothing after it runs
 *   lost:  the call is carried out, then the request dies (the provider's answer is lost)
 *   stop:  a stop for the lease arrives (its own request) just before the call is made
 *   lost+stop: as lost, and the user (who got no answer) stops the lease from its list at once
 * Faults are injected by wrapping the request's env (D1, the sim's Durable Object) and the fakes'
 * fetch, never by editing the fakes; the keeper and the reaper run on the real env.
 */
export type CrashMode = "fail" | "abort" | "lost" | "stop" | "lost+stop";

export interface CrashPlan {
  /** 1-based index of the await to crash at; 0 = no crash (a dry run that counts them) */
  at: number;
  mode: CrashMode;
  /** instead of `at`: the first await whose label matches, after one matching `after` */
  match?: RegExp;
  after?: RegExp;
}

export class CrashSwitch {
  /** the awaits seen so far, by label ("d1 INSERT", "fetch rent", "sim create") */
  readonly seen: string[] = [];
  /** true once the planned crash point was reached */
  reached = false;
  private onReached: () => void = () => undefined;
  readonly reachedPromise: Promise<"crashed">;
  /** set while the request runs: awaits outside it (the stop request, the keeper) are not counted */
  active = false;

  constructor(
    readonly plan: CrashPlan,
    private readonly stopLease: () => Promise<void>,
  ) {
    this.reachedPromise = new Promise((resolve) => {
      this.onReached = () => resolve("crashed");
    });
  }

  private passedAfter = false;

  private isCrashPoint(label: string): boolean {
    if (this.reached) return false;
    const { match, after } = this.plan;
    if (!match) return this.seen.length === this.plan.at;
    if (after && !this.passedAfter) {
      this.passedAfter = after.test(label);
      return false;
    }
    return match.test(label);
  }

  async hook<T>(label: string, op: () => Promise<T>): Promise<T> {
    if (!this.active) return op();
    this.seen.push(label);
    if (!this.isCrashPoint(label)) return op();
    this.reached = true;
    switch (this.plan.mode) {
      case "fail":
        this.onReached();
        throw new Error(`injected failure at ${label}`);
      case "abort":
        this.onReached();
        return new Promise<T>(() => undefined);
      case "lost":
      case "lost+stop":
        await op().catch(() => undefined);
        this.onReached();
        return new Promise<T>(() => undefined);
      case "stop": {
        this.active = false;
        await this.stopLease();
        this.active = true;
        this.onReached();
        return op();
      }
    }
  }
}

type Stmt = D1PreparedStatement & { __real?: D1PreparedStatement };

function verb(sql: string): string {
  return sql.trim().split(/\s+/)[0]!.toUpperCase();
}

function wrapStatement(sw: CrashSwitch, real: D1PreparedStatement, sql: string): Stmt {
  const label = `d1 ${verb(sql)}`;
  return {
    __real: real,
    bind: (...values: unknown[]) => wrapStatement(sw, real.bind(...values), sql),
    first: (column?: string) => sw.hook(label, () => (column ? real.first(column) : real.first())),
    run: () => sw.hook(label, () => real.run()),
    all: () => sw.hook(label, () => real.all()),
    raw: (options?: { columnNames?: boolean }) => sw.hook(label, () => real.raw(options as never)),
  } as unknown as Stmt;
}

/** env.DB wrapped: every statement and batch is a crash point. */
export function crashDb(sw: CrashSwitch, real: D1Database): D1Database {
  return {
    prepare: (sql: string) => wrapStatement(sw, real.prepare(sql), sql),
    batch: (statements: Stmt[]) =>
      sw.hook(`d1 batch(${statements.length})`, () => real.batch(statements.map((s) => s.__real ?? s))),
    exec: (sql: string) => real.exec(sql),
    withSession: () => real.withSession(),
    dump: () => real.dump(),
  } as unknown as D1Database;
}

/** A Durable Object namespace wrapped (the sim, the keepers): every RPC of the request is a crash point. */
export function crashNamespace<T extends DurableObjectNamespace>(sw: CrashSwitch, real: T, name: string): T {
  const wrapStub = (stub: DurableObjectStub) =>
    new Proxy(stub, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== "function" || typeof prop !== "string" || prop === "fetch") return value;
        return (...args: unknown[]) =>
          sw.hook(`${name} ${prop}`, () => Reflect.apply(value, target, args) as Promise<unknown>);
      },
    });
  return new Proxy(real, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (prop === "getByName") return (id: string) => wrapStub(target.getByName(id));
      if (prop === "get") return (id: DurableObjectId) => wrapStub(target.get(id));
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** A fake wrapped: every request reaching it while the rent request runs is a crash point. */
export class CrashFake implements FakeService {
  constructor(
    private readonly sw: () => CrashSwitch | null,
    private readonly inner: FakeService,
    private readonly name: string,
  ) {}
  handles(url: URL): boolean {
    return this.inner.handles(url);
  }
  async handle(request: Request): Promise<Response> {
    const sw = this.sw();
    if (!sw) return this.inner.handle(request);
    return sw.hook(`fetch ${this.name} ${request.method} ${new URL(request.url).pathname}`, () =>
      this.inner.handle(request),
    );
  }
}

/**
 * Sends POST /v1/leases through the worker's fetch handler with the request's env wrapped by
 * `sw`; returns when the request answers or dies at the crash point.
 */
export async function rentWithCrash(
  sw: CrashSwitch,
  body: Record<string, unknown>,
): Promise<{ status: number | "crashed"; body: unknown }> {
  const requestEnv = {
    ...env,
    DB: crashDb(sw, env.DB),
    SIM_CLOUD: crashNamespace(sw, env.SIM_CLOUD, "sim"),
    LEASE_KEEPER: crashNamespace(sw, env.LEASE_KEEPER, "keeper"),
  } as Env;
  const request = new Request("http://gpulease.test/v1/leases", {
    method: "POST",
    headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  sw.active = true;
  const ctx = createExecutionContext();
  const answer = (async () => {
    const res = await worker.fetch(request as Request<unknown, IncomingRequestCfProperties>, requestEnv, ctx);
    return res;
  })();
  const outcome = await Promise.race([answer.then((res) => ({ res })), sw.reachedPromise.then(() => null)]);
  // A "fail" crash lets the request go on: wait for its answer. Abort/lost: the request is dead.
  let res = outcome?.res ?? null;
  if (!res && (sw.plan.mode === "fail" || sw.plan.mode === "stop")) res = await answer;
  sw.active = false;
  if (!res) return { status: "crashed", body: null };
  const text = await res.text();
  let parsed: unknown = null;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed };
}

/** Runs the reaper cron through the worker's scheduled handler. */
export async function runReaperCron(clock: TestClock): Promise<void> {
  const ctx = createExecutionContext();
  await worker.scheduled(createScheduledController({ scheduledTime: clock.now, cron: REAPER_CRON }), env, ctx);
  await waitOnExecutionContext(ctx);
}

export interface LeaseEnd {
  id: string;
  status: string;
  provider: string | null;
  provider_ref: string | null;
  label: string;
  stop_reason: string | null;
  teardown_verified_at: string | null;
}

export async function leaseRows(): Promise<LeaseEnd[]> {
  const { results } = await env.DB.prepare(
    "SELECT id, status, provider, provider_ref, label, stop_reason, teardown_verified_at FROM leases",
  ).all<LeaseEnd>();
  return results;
}

/**
 * Keeper and reaper to the end: fires each active lease's alarms (bounded), runs the reaper
 * after its grace period, and again, until every lease is stopped or `rounds` are used up.
 */
export async function driveToEnd(
  clock: TestClock,
  beforeReaper: () => Promise<void> = async () => undefined,
  rounds = 4,
  alarmsPerRound = 150,
): Promise<void> {
  for (let round = 0; round < rounds; round++) {
    for (const lease of await leaseRows()) {
      for (let i = 0; i < alarmsPerRound; i++) {
        const row = await env.DB.prepare("SELECT status FROM leases WHERE id = ?")
          .bind(lease.id)
          .first<{ status: string }>();
        if (row?.status === "stopped") break;
        if (!(await fireNext(clock, lease.id))) break;
      }
    }
    const open = (await leaseRows()).filter((l) => l.status !== "stopped");
    await beforeReaper();
    clock.advance(16 * 60_000);
    await runReaperCron(clock);
    if (open.length === 0 && round > 0) {
      // one more look after the reaper: it may have reopened or adopted something
      const after = (await leaseRows()).filter((l) => l.status !== "stopped");
      if (after.length === 0) return;
    }
  }
}
