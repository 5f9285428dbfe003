import { DurableObject } from "cloudflare:workers";
import { loadSettings } from "../config";
import { AdmissionCache, type AdmissionFacts } from "../gateway/admission";
import { median, type UsageSample } from "../gateway/usage";
import { flushStatement } from "../gateway/usage-store";
import {
  type CreateRecord,
  type FoundMachine,
  listCreates,
  noteUnresolved,
  openCreates,
  resolveNone,
  type StrayPatch,
} from "../leases/create-records";
import { idleDeadline, idleDetail } from "../leases/idle";
import { eventStatements, getLease, type LeasePatch, type LeaseRow, type NewEvent } from "../leases/ledger";
import { claimFound, lookupMachines } from "../leases/lookup";
import { leaseModelFacts } from "../leases/model-sizing";
import { type RentEnd, rentalConcluded, settleRental } from "../leases/rental";
import type { StopReason } from "../leases/schema";
import { scrubError } from "../lib/scrub";
import { iso, ms } from "../lib/time";
import { offerHost } from "../offers/bandwidth";
import { leaseBandwidthGbs } from "../offers/lease-bandwidth";
import { recordBandwidthSample } from "../offers/measured";
import type { OllamaProbe, Provider, ProviderName } from "../providers/types";
import { createServices, hidingValues, type Services } from "../services";
import { announces } from "../webhooks/outbox";
import { type ClaimResult, readSettled, type Settled, type SettleReport, type StopResult } from "./client";
import { claimInOneBatch, commitStep, isEmptyWrite, observe, reopenInOneBatch, type StepWrite } from "./commit";
import {
  capReached,
  currentCost,
  type Decision,
  decideAfterPoll,
  decideCap,
  decideTeardown,
  flagUnverified,
  initialLoopState,
  type KeeperSettings,
  keeperSettings,
  type LoopState,
  loopFor,
  type PollResult,
  planTeardown,
  stoppedDecision,
  stoppingPatch,
  type TeardownResult,
} from "./decide";
import {
  decideStray,
  lookupsDue,
  nextCreateWorkAt,
  openStrays,
  type StrayResult,
  straysCostIn,
} from "./decide-creates";
import { addSample, emptyMeter, FLUSH_EVERY_MS, type MeterState, newlyDropped } from "./meter";
import {
  LOOKUP_CALLS_PER_ALARM,
  nextStrayWorkAt,
  OWN_CALLS_PER_ALARM,
  planStrayCalls,
  STRAY_CALLS_PER_ALARM,
  strayFlag,
} from "./plan";

/** Re-arm after an unexpected failure that outlived the platform's own retries. */
const SELF_RETRY_MS = 60_000;
const PROVIDER_MISSING_RETRY_MS = 60_000;
/** A step whose guard failed (a claim or stop landed meanwhile) starts over this soon. */
const START_OVER_MS = 1_000;

const KEY_LEASE_ID = "leaseId";
const KEY_LOOP = "loop";
const KEY_METER = "meter";
/** when the last request through the gateway ended (a model lease's idle_minutes counts from it) */
const KEY_LAST_REQUEST = "lastRequestAt";
/** set while the alarm is a usage flush's wake: the time the step's own alarm was for */
const KEY_STEP_AT = "stepAt";

/** What the own machine's part of a step decided, before it is written with the rest. */
interface OwnDecision {
  patch: LeasePatch;
  events: NewEvent[];
  loop: LoopState;
  /** null: the lease is done */
  nextAlarmAt: number | null;
}

/**
 * One per lease: the only writer of its row after insert. It settles the rental from the
 * lease's create records, drives the machine's life, resolves every create, and tears down
 * every machine any create made, verified. Its alarm runs one step per invocation: observe (one
 * read), make a few provider calls, decide (pure), commit (one guarded D1 batch), set the alarm
 * once (docs/architecture.md, "One step").
 */
export class LeaseKeeper extends DurableObject<Env> {
  /** what the gateway asks of every request, set at each write of the row below */
  private readonly admitted = new AdmissionCache();

  /** Takes charge of a lease: loads its row and drives it by its status. */
  async start(leaseId: string): Promise<{ ok: true }> {
    await this.ctx.storage.put(KEY_LEASE_ID, leaseId);
    const services = this.services();
    const lease = await getLease(services.db, leaseId);
    if (!lease || lease.status === "stopped") return { ok: true };
    const now = services.clock();
    // Started before the first create is sent (write-ahead): provisioning waits one poll interval.
    const first = lease.status === "provisioning" ? now + services.config.pollIntervalS * 1000 : now;
    await this.armAt(first);
    return { ok: true };
  }

  /** Asks for teardown; `already` when the lease was stopping or stopped. */
  async stop(reason: StopReason, detail?: string): Promise<StopResult> {
    return this.requestStop(reason, detail ?? null, null);
  }

  /** The job's call-back: stop with `job_done` and keep its exit code. */
  async jobDone(exitCode: number): Promise<StopResult> {
    return this.requestStop("job_done", `the job called back with exit code ${exitCode}`, exitCode);
  }

  /**
   * Re-arms the loop of an active lease (the reaper calls this); polls soon either way. Pass the
   * lease id for a keeper whose start() may never have run.
   */
  async ensureAlarm(leaseId?: string): Promise<{ rearmed: boolean }> {
    if (leaseId) await this.ctx.storage.put(KEY_LEASE_ID, leaseId);
    else leaseId = (await this.leaseId()) ?? undefined;
    if (!leaseId) return { rearmed: false };
    const services = this.services();
    const lease = await getLease(services.db, leaseId);
    if (!lease || lease.status === "stopped") return { rearmed: false };
    const prior = await this.ctx.storage.getAlarm();
    await this.armAt(services.clock() + 1000);
    return { rearmed: prior === null };
  }

  /**
   * The rent path is done sending creates: settle the lease from their records (its machine, or
   * why none), in one guarded write. The row afterwards. A keeper never reached here settles at
   * its next alarm.
   */
  async settle(leaseId: string, report: SettleReport): Promise<Settled | null> {
    await this.ctx.storage.put(KEY_LEASE_ID, leaseId);
    const services = this.services();
    const now = services.clock();
    let settled: Settled | null = null;
    for (let attempt = 0; attempt < 3; attempt++) {
      const observed = await observe(services.db, leaseId);
      if (!observed) return null;
      const { lease, creates } = observed;
      const settlement = settleRental(
        lease,
        creates,
        { kind: "answered", error: report.error },
        now,
        settings(services),
      );
      const write: StepWrite = {
        read: lease,
        patch: settlement.patch,
        events: [...report.events, ...settlement.events],
        at: now,
      };
      // The write changes no create record, and any that does bumps the revision it is guarded
      // by: a committed settlement's creates are the ones it read.
      const row = isEmptyWrite(write) ? lease : await this.commit(services, write);
      if (row) {
        settled = { lease: row, creates };
        if (announces(write.events)) this.ctx.waitUntil(services.outbox.wake());
        break;
      }
    }
    settled ??= await readSettled(services.db, leaseId);
    if (settled && settled.lease.status !== "stopped") {
      const soon = settled.lease.status === "stopping" || settled.lease.provider_ref === null;
      await this.armAt(soon ? now + 1000 : now + services.config.pollIntervalS * 1000);
    }
    return settled;
  }

  /**
   * A machine carrying this lease's label that is not its current one (the reaper found it):
   * recorded once on the lease's creates and torn down; a stopped lease goes back to stopping.
   * The record and the reopen are one batch: together or not at all.
   */
  async claim(leaseId: string, machine: FoundMachine): Promise<ClaimResult> {
    await this.ctx.storage.put(KEY_LEASE_ID, leaseId);
    const services = this.services();
    const now = services.clock();
    const outcome = await claimInOneBatch(services.db, leaseId, machine, now);
    if (outcome.kind !== "other_lease" && outcome.reopened) this.admitted.written(null);
    if (outcome.kind === "other_lease")
      return { claimed: false, reopened: false, detail: `held by lease ${outcome.holder}` };
    await this.armAt(now + 1000);
    return {
      claimed: outcome.kind === "claimed",
      reopened: outcome.reopened,
      detail: outcome.kind === "claimed" ? "claimed" : "known",
    };
  }

  /** The stopped lease's own machine is still listed: its teardown starts afresh (one batch). */
  async reopen(leaseId: string, provider: ProviderName, ref: string): Promise<{ reopened: boolean }> {
    await this.ctx.storage.put(KEY_LEASE_ID, leaseId);
    const services = this.services();
    const now = services.clock();
    const reopened = await reopenInOneBatch(services.db, leaseId, provider, ref, now);
    if (reopened) this.admitted.written(null);
    if (reopened) await this.armAt(now);
    return { reopened };
  }

  /**
   * One request through the LLM gateway: checked (an implausible sample is dropped and counted),
   * counted in this object's storage, written to D1 at most every FLUSH_EVERY_MS (and at the next
   * alarm), never once per request.
   */
  async recordUsage(leaseId: string, sample: UsageSample): Promise<void> {
    await this.ctx.storage.put(KEY_LEASE_ID, leaseId);
    const services = this.services();
    const now = services.clock();
    const before = await this.meter();
    const meter = addSample(before, sample);
    await this.ctx.storage.put(KEY_LAST_REQUEST, now);
    if (meter.dropped > before.dropped)
      services.log.warn("usage_sample_dropped", { lease_id: leaseId, dropped: meter.dropped });
    if (meter.unparsed > before.unparsed)
      services.log.warn("usage_lines_unparsed", { lease_id: leaseId, lines: meter.unparsed - before.unparsed });
    const due = now - meter.flushedAt >= FLUSH_EVERY_MS;
    // The snapshot is stored before the D1 write: a request counted meanwhile is not lost.
    await this.ctx.storage.put(KEY_METER, due ? { ...meter, flushedAt: now, dirty: false } : meter);
    if (due) await this.writeMeter(services, leaseId, meter, now);
    else await this.armFlush(meter.flushedAt + FLUSH_EVERY_MS);
  }

  /**
   * Rotates the lease's inference key (only its hash is kept; a key sealed for a schedule's
   * webhook goes, so no later delivery sends the old one); false for a lease that is not active.
   */
  async setInferenceKey(leaseId: string, hash: string): Promise<{ ok: boolean }> {
    const services = this.services();
    for (let attempt = 0; attempt < 3; attempt++) {
      const lease = await getLease(services.db, leaseId);
      if (!lease || (lease.status !== "provisioning" && lease.status !== "running")) return { ok: false };
      const row = await this.commit(services, {
        read: lease,
        patch: { inference_key_hash: hash, inference_key_sealed: null },
        events: [{ kind: "inference_key_rotated" }],
        at: services.clock(),
      });
      if (row) return { ok: true };
    }
    return { ok: false };
  }

  /**
   * The gateway's one call per request: the lease's admission facts from memory (a D1 read only
   * when this object has just woken), and the usage of earlier requests, counted first.
   */
  async admission(leaseId: string, usage: UsageSample[]): Promise<AdmissionFacts | null> {
    const facts = await this.admitted.get(() => getLease(this.env.DB, leaseId));
    for (const sample of usage) await this.recordUsage(leaseId, sample).catch(() => undefined);
    return facts;
  }

  override async alarm(alarmInfo?: AlarmInvocationInfo): Promise<void> {
    const leaseId = await this.leaseId();
    if (!leaseId) return;
    const services = this.services();
    const stepAt = await this.ctx.storage.get<number>(KEY_STEP_AT);
    // The gateway's counts first, on their own: a flush that fails is logged and tried again, and
    // never stops the step (the teardown reads nothing from the meter).
    await this.flushMeter(services, leaseId);
    if (stepAt !== undefined) {
      // A wake for the gateway's counts only: sleep on to the step's own time.
      await this.ctx.storage.delete(KEY_STEP_AT);
      if (stepAt > services.clock() + 1000) {
        await this.ctx.storage.setAlarm(stepAt);
        return;
      }
    }
    try {
      await this.step(services, leaseId);
    } catch (error) {
      // Expected provider failures never get here; this is D1 or a bug. Nothing of the step was
      // written (one batch). Let the platform retry a few times, then keep the loop alive ourselves.
      const message = this.safeMessage(services, error);
      services.log.error("keeper_alarm_failed", { lease_id: leaseId, error: message });
      if ((alarmInfo?.retryCount ?? 0) >= 5) {
        await this.ctx.storage.setAlarm(services.clock() + SELF_RETRY_MS);
        return;
      }
      throw error;
    }
  }

  private async requestStop(reason: StopReason, detail: string | null, exitCode: number | null): Promise<StopResult> {
    const leaseId = await this.leaseId();
    if (!leaseId) throw new Error("keeper has no lease");
    const services = this.services();
    for (let attempt = 0; attempt < 3; attempt++) {
      const lease = await getLease(services.db, leaseId);
      if (!lease) throw new Error(`no lease ${leaseId}`);
      if (lease.status === "stopping" || lease.status === "stopped") return { ok: true, already: true };
      const now = services.clock();
      const loop = await this.loop();
      const patch = stoppingPatch(lease, loop, { reason, error: null, detail: detail ?? reason }, now);
      if (exitCode !== null) patch.exit_code = exitCode;
      const events: NewEvent[] = [{ kind: "stop_requested", detail: detail ? `${reason}: ${detail}` : reason, reason }];
      const row = await this.commit(services, { read: lease, patch, events, at: now });
      if (row) {
        if (announces(events)) this.ctx.waitUntil(services.outbox.wake());
        await this.armAt(now);
        return { ok: true, already: false };
      }
    }
    return { ok: true, already: true };
  }

  /**
   * One step: observe (the lease and its creates, one read), look up due creates, make this
   * alarm's provider calls (the lease's machine first, then its strays by due time), decide
   * (pure), and commit everything in one guarded batch; then set the alarm once, to the earliest
   * wake. A guard that fails means a claim or stop landed meanwhile: the step starts over.
   */
  private async step(unscoped: Services, leaseId: string): Promise<void> {
    const observed = await observe(unscoped.db, leaseId);
    if (!observed || observed.lease.status === "stopped") return;
    // What a provider says about this lease's machine may quote its env back: scrubbed too.
    const services = hidingValues(unscoped, Object.values(observed.lease.spec.env));
    const s = keeperSettings(services.config);
    const now = services.clock();
    const lease = observed.lease;
    const looked = await this.lookups(services, s, lease, observed.creates, now);
    const creates = looked.creates;
    const loop = loopFor(lease, await this.loop());
    const providerOf = (name: ProviderName | null) => (name ? services.providers.get(name) : null) ?? null;

    // The lease's own machine: its calls come first.
    const own = await this.ownCalls(services, s, lease, loop, creates, now, providerOf(lease.provider));

    // Its strays: by due time, within what is left of the budget.
    const strays = openStrays(lease, creates);
    const hasProvider = (c: CreateRecord) => providerOf(c.provider) !== null;
    const plan = planStrayCalls(strays, now, s, STRAY_CALLS_PER_ALARM, hasProvider);
    const results = new Map<number, StrayResult>();
    for (const call of plan) results.set(call.stray.seq, await this.strayCalls(services, call));

    // Decide: strays first (their records tell the lease's decision what is still open).
    const events: NewEvent[] = [...looked.events];
    const createPatches: { seq: number; patch: StrayPatch }[] = [];
    const after = new Map(creates.map((c) => [c.seq, c]));
    let flagLease = false;
    for (const stray of strays) {
      const result = results.get(stray.seq) ?? {};
      const { patch, events: strayEvents } = decideStray(stray, result, now);
      // Its next read is due from this one (strays are worked by due time).
      if (result.status) patch.checked_at = iso(now);
      const flag = strayFlag(lease, stray, now, s, !hasProvider(stray));
      if (flag && patch.gone_at === undefined) {
        patch.unverified_at = iso(now);
        strayEvents.push(flag);
        flagLease = true;
      }
      if (Object.keys(patch).length > 0) createPatches.push({ seq: stray.seq, patch });
      after.set(stray.seq, { ...stray, ...patch } as CreateRecord);
      events.push(...strayEvents);
    }
    const nowCreates = [...after.values()];
    const straysCost = straysCostIn(
      lease,
      nowCreates,
      (c) => c.offer.currency ?? currencyOf(services, c.provider),
      s.eurUsd,
    );
    const decided = { ...lease, strays_cost: straysCost };
    const ownDecision = own.decide(decided, nowCreates);
    const patch: LeasePatch = { ...ownDecision.patch };
    if (straysCost !== lease.strays_cost) patch.strays_cost = straysCost;
    const nextLoop = { ...ownDecision.loop };
    if (flagLease && lease.status === "stopping" && !nextLoop.unverifiedFlagged && patch.status !== "stopped") {
      // A stray not verified gone flags its lease as its own machine would.
      nextLoop.unverifiedFlagged = true;
      nextLoop.errorBeforeFlag = lease.error;
      patch.error = "teardown_unverified";
    }
    events.push(...ownDecision.events);

    // Commit: one batch, guarded by what was read.
    const write: StepWrite = {
      read: lease,
      patch,
      events,
      creates: createPatches,
      currentGone:
        own.currentGone && lease.provider && lease.provider_ref
          ? { provider: lease.provider, ref: lease.provider_ref }
          : null,
      at: now,
    };
    const row = isEmptyWrite(write) ? lease : await this.commit(services, write);
    if (!row) {
      services.log.info("keeper_step_outdated", { lease_id: lease.id, outcome: "starting over" });
      await this.armAt(now + START_OVER_MS);
      return;
    }
    await this.ctx.storage.put(KEY_LOOP, nextLoop);
    // Delivery runs in the sender's own alarm: this keeper never waits for a receiver.
    if (announces(events)) this.ctx.waitUntil(services.outbox.wake());
    if (row.status === "stopped") return;
    const lookupsAt = nextCreateWorkAt(
      lease,
      nowCreates.filter((c) => c.resolution === "unresolved"),
      now,
      s,
    );
    const straysAt = nextStrayWorkAt(openStrays(row, nowCreates), now, s, hasProvider);
    const wakes = [ownDecision.nextAlarmAt, lookupsAt, straysAt].filter((t): t is number => t !== null);
    await this.armAt(wakes.length ? Math.max(Math.min(...wakes), now + 1000) : now + s.verifyIntervalMs);
  }

  /**
   * The own machine's provider calls for this step, made now; `decide` turns them into the
   * lease's part of the step once the strays' records are decided (what is still open).
   */
  private async ownCalls(
    services: Services,
    s: KeeperSettings,
    lease: LeaseRow,
    loop: LoopState,
    creates: readonly CreateRecord[],
    now: number,
    provider: Provider | null,
  ): Promise<{ decide: (lease: LeaseRow, creates: readonly CreateRecord[]) => OwnDecision; currentGone: boolean }> {
    if (!lease.provider_ref) {
      return { decide: (l, c) => this.withoutMachine(s, l, loop, c, now, services), currentGone: false };
    }
    if (lease.status === "stopping") {
      if (currentVerifiedGone(lease, creates)) {
        // Reopened for another of its machines: its own was verified gone before, billed until then.
        return {
          decide: (l, c) =>
            decideTeardown(
              l,
              { ...loop, goneReads: 2, machineGoneAt: loop.machineGoneAt ?? now },
              GONE,
              now,
              s,
              openCount(l, c),
            ),
          currentGone: false,
        };
      }
      if (!provider) return { decide: (l) => keyless(l, loop, now, s), currentGone: false };
      const result = await this.teardownCalls(services, s, lease, loop, provider, OWN_CALLS_PER_ALARM, now);
      const verified = (l: LeaseRow, c: readonly CreateRecord[]) =>
        decideTeardown(l, loop, result, now, s, openCount(l, c));
      const probe = decideTeardown(lease, loop, result, now, s, 0);
      return { decide: verified, currentGone: probe.loop.machineGoneAt === now };
    }
    if (!provider) return { decide: (l) => providerMissing(l, loop, now), currentGone: false };

    let first: Decision;
    let calls = 0;
    const idleAt = idleDeadline(lease, (await this.ctx.storage.get<number>(KEY_LAST_REQUEST)) ?? null);
    const cause =
      capReached(lease, loop, now, s) ??
      (idleAt !== null && now >= idleAt
        ? { reason: "idle" as const, error: null, detail: idleDetail(lease.spec.idle_minutes ?? 0) }
        : null);
    if (cause) first = decideCap(lease, loop, cause, now);
    else {
      const poll = await this.poll(services, provider, lease);
      calls = poll.calls;
      first = decideAfterPoll(lease, loop, poll.result, now, s);
    }
    if (!first.teardownNow) return { decide: () => first, currentGone: false };
    // Gone to stopping in this step: its teardown starts in the same step (and the same write).
    const stopping = { ...lease, ...(first.patch as Partial<LeaseRow>) } as LeaseRow;
    const teardownLoop = loopFor(stopping, first.loop);
    const result = await this.teardownCalls(
      services,
      s,
      stopping,
      teardownLoop,
      provider,
      OWN_CALLS_PER_ALARM + 1 - calls,
      now,
    );
    const probe = decideTeardown(stopping, teardownLoop, result, now, s, 0);
    return {
      decide: (l, c) => {
        const second = decideTeardown(
          { ...l, ...(first.patch as Partial<LeaseRow>) } as LeaseRow,
          teardownLoop,
          result,
          now,
          s,
          openCount(l, c),
        );
        return {
          patch: { ...first.patch, ...second.patch },
          events: [...first.events, ...second.events],
          loop: second.loop,
          nextAlarmAt: second.nextAlarmAt,
        };
      },
      currentGone: probe.loop.machineGoneAt === now,
    };
  }

  /**
   * A lease with no machine recorded: settle it from its create records (a request that never
   * settled within the rent window died); stopping, it ends once every create is resolved.
   */
  private withoutMachine(
    s: KeeperSettings,
    lease: LeaseRow,
    loop: LoopState,
    creates: readonly CreateRecord[],
    now: number,
    services: Services,
  ): OwnDecision {
    const end: RentEnd =
      lease.status === "provisioning" && now - ms(lease.created_at) >= s.rentWindowMs
        ? { kind: "timed_out" }
        : lease.status === "stopping"
          ? { kind: "answered", error: lease.error }
          : { kind: "renting" };
    const settlement = settleRental(lease, [...creates], end, now, settings(services));
    if (Object.keys(settlement.patch).length > 0 || settlement.events.length > 0) {
      // A machine recorded, or the rental ended: the next step goes on from the written row.
      return { patch: settlement.patch, events: settlement.events, loop, nextAlarmAt: now + 1000 };
    }
    if (lease.status === "stopping") {
      if (rentalConcluded(lease, [...creates], now, s.rentWindowMs)) {
        const done = stoppedDecision(loop, {}, [{ kind: "stopped", detail: concludedDetail(creates) }], now);
        return { ...done, nextAlarmAt: null };
      }
      // Whether a machine exists is not known yet: flag it once the window passes, keep looking.
      const decision = unresolvedDecision(lease, loop, now, s);
      const windowEnd = ms(lease.created_at) + s.rentWindowMs;
      return { ...decision, nextAlarmAt: now < windowEnd ? windowEnd : decision.nextAlarmAt };
    }
    // Provisioning and the request is still renting: look again when its window may end.
    return {
      patch: {},
      events: [],
      loop,
      nextAlarmAt: Math.min(now + s.pollIntervalMs, ms(lease.created_at) + s.rentWindowMs),
    };
  }

  /**
   * Lookups of the creates whose timeout has passed (a machine found is claimed in its own
   * claim-once batch; a clean lookup that finds none resolves them to "none"), within this
   * alarm's lookup budget. The create records afterwards, and the events for the step's write.
   */
  private async lookups(
    services: Services,
    s: KeeperSettings,
    lease: LeaseRow,
    creates: CreateRecord[],
    now: number,
  ): Promise<{ creates: CreateRecord[]; events: NewEvent[] }> {
    let calls = LOOKUP_CALLS_PER_ALARM;
    let changed = false;
    const events: NewEvent[] = [];
    const labelled = (name: ProviderName) => services.providers.get(name)?.labelled ?? true;
    for (const create of lookupsDue(creates, labelled)) {
      if (calls === 0) break;
      const provider = services.providers.get(create.provider);
      if (!provider) {
        if (create.detail !== `${create.provider} is not configured`) {
          await noteUnresolved(services.db, lease.id, create.seq, `${create.provider} is not configured`);
          events.push({ kind: "create_unresolved", detail: `${create.provider} is not configured; still looking` });
        }
        continue;
      }
      calls -= 1;
      changed = (await this.resolveCreates(services, s, lease, creates, create, provider, now, events)) || changed;
    }
    return { creates: changed ? await listCreates(services.db, lease.id) : creates, events };
  }

  /** One lookup for `create` (at a labelled provider: for all the lease's creates there). */
  private async resolveCreates(
    services: Services,
    s: KeeperSettings,
    lease: LeaseRow,
    creates: readonly CreateRecord[],
    create: CreateRecord,
    provider: Provider,
    now: number,
    events: NewEvent[],
  ): Promise<boolean> {
    // Past the create's timeout, servers that cannot be told apart are shared out by age.
    const settle = now >= ms(create.sent_at) + s.rentWindowMs;
    const lookup = await lookupMachines(services, provider, lease, create, { settle });
    if (!lookup.ok) {
      const detail = `lookup failed: ${lookup.error}`;
      if (create.detail !== detail) {
        await noteUnresolved(services.db, lease.id, create.seq, detail);
        // A create whose machine cannot be matched (VRAMfarm's fingerprint) stays visibly unresolved.
        events.push({
          kind: "create_unresolved",
          detail: `${create.provider}: ${lookup.error}; the machine may exist, still looking`,
        });
      }
      return false;
    }
    let changed = false;
    for (const machine of lookup.machines) {
      const claim = await claimFound(
        services.db,
        provider,
        lease.id,
        create,
        machine,
        "found by the keeper's lookup",
        iso(now),
      );
      if (claim.kind === "claimed") {
        changed = true;
        const note = lookup.note ? `: ${lookup.note}` : "";
        events.push({ kind: "machine_found", detail: `found ${machine.ref} at ${provider.name}${note}` });
      }
    }
    // The lookup saw everything there: the due creates it left unclaimed made no machine.
    const due = creates.filter(
      (c) =>
        c.resolution === "unresolved" &&
        now >= ms(c.sent_at) + s.rentWindowMs &&
        (provider.labelled ? c.provider === provider.name : c.seq === create.seq),
    );
    const where = provider.labelled ? "no machine carries this lease's label" : "no server matches this create";
    for (const open of due) {
      if (await resolveNone(services.db, lease.id, open.seq, `${where} at ${provider.name}`, iso(now))) changed = true;
    }
    return changed;
  }

  private async poll(
    services: Services,
    provider: Provider,
    lease: LeaseRow,
  ): Promise<{ result: PollResult; calls: number }> {
    const ref = lease.provider_ref as string;
    try {
      const status = await provider.status(ref);
      if (lease.status === "provisioning" && lease.template === "ollama" && status.state === "running") {
        const probe = await provider
          .ollamaProbe(ref, status, lease.spec.model?.name ?? null)
          .catch((): OllamaProbe => ({ phase: "down" }));
        return { result: { ok: true, status, probe }, calls: 2 };
      }
      return { result: { ok: true, status, probe: null }, calls: 1 };
    } catch (error) {
      return { result: { ok: false, error: this.safeMessage(services, error) }, calls: 1 };
    }
  }

  /** Stopping: terminate when due, then a verifying read, within `budget` calls. */
  private async teardownCalls(
    services: Services,
    s: KeeperSettings,
    lease: LeaseRow,
    loop: LoopState,
    provider: Provider,
    budget: number,
    now: number,
  ): Promise<TeardownResult> {
    const plan = planTeardown(lease, loop, now, s);
    const result: TeardownResult = {};
    const ref = lease.provider_ref;
    let left = budget;
    if (ref && plan.terminate && left > 0) {
      left -= 1;
      try {
        await provider.terminate(ref);
        result.terminate = { ok: true };
      } catch (error) {
        result.terminate = { ok: false, error: this.safeMessage(services, error) };
      }
    }
    if (ref && left > 0) {
      try {
        result.status = { ok: true, status: await provider.status(ref) };
      } catch (error) {
        result.status = { ok: false, error: this.safeMessage(services, error) };
      }
    }
    return result;
  }

  /** A stray's calls this step: a terminate when due, a verifying read when the budget allows. */
  private async strayCalls(
    services: Services,
    call: { stray: CreateRecord; terminate: boolean; status: boolean },
  ): Promise<StrayResult> {
    const provider = services.providers.get(call.stray.provider);
    const ref = call.stray.provider_ref as string;
    const result: StrayResult = {};
    if (!provider) return result;
    if (call.terminate)
      result.terminate = await provider.terminate(ref).then(
        () => ({ ok: true }) as const,
        (error: unknown) => ({ ok: false, error: this.safeMessage(services, error) }) as const,
      );
    if (call.status)
      result.status = await provider.status(ref).then(
        (status) => ({ ok: true, status }) as const,
        (error: unknown) => ({ ok: false, error: this.safeMessage(services, error) }) as const,
      );
    return result;
  }

  private async meter(): Promise<MeterState> {
    return { ...emptyMeter, ...((await this.ctx.storage.get<MeterState>(KEY_METER)) ?? {}) };
  }

  /** Writes the gateway's counts if some came in since the last write. */
  private async flushMeter(services: Services, leaseId: string): Promise<void> {
    const meter = await this.meter();
    if (!meter.dirty) return;
    const now = services.clock();
    await this.ctx.storage.put(KEY_METER, { ...meter, flushedAt: now, dirty: false });
    await this.writeMeter(services, leaseId, meter, now);
  }

  /**
   * The counts in one batch with a `usage_dropped` event for samples dropped since the last
   * flush. A failure is logged and the meter stays dirty: the next request or alarm tries again;
   * it never throws into a step or the gateway.
   */
  private async writeMeter(services: Services, leaseId: string, meter: MeterState, now: number): Promise<void> {
    const dropped = newlyDropped(meter);
    const events: NewEvent[] =
      dropped > 0
        ? [
            {
              kind: "usage_dropped",
              detail: `${dropped} implausible usage answer(s) from the machine dropped (${meter.dropped} in all)`,
            },
          ]
        : [];
    try {
      await services.db.batch([
        flushStatement(services.db, leaseId, meter, iso(now)),
        ...eventStatements(services.db, leaseId, iso(now), events),
      ]);
      if (dropped > 0) {
        const stored = await this.meter();
        await this.ctx.storage.put(KEY_METER, {
          ...stored,
          droppedReported: Math.max(stored.droppedReported, meter.dropped),
        });
      }
      await this.recordBandwidth(services, leaseId, meter, now);
    } catch (error) {
      await this.ctx.storage.put(KEY_METER, { ...(await this.meter()), dirty: true });
      services.log.error("usage_flush_failed", {
        lease_id: leaseId,
        error: this.safeMessage(services, error),
        outcome: "kept; written at the next flush",
      });
    }
  }

  /**
   * Decoding reads the weights a token passes through (the used experts of a mixture) and the KV
   * cache once per token: the median decode rate × those bytes is the memory bandwidth this lease
   * really got (offers/lease-bandwidth.ts), one sample per lease (later flushes replace it).
   */
  private async recordBandwidth(services: Services, leaseId: string, meter: MeterState, now: number): Promise<void> {
    const tokensPerS = median(meter.decode);
    if (tokensPerS === null) return;
    const lease = await getLease(services.db, leaseId);
    const model = lease?.spec.model;
    if (!lease?.provider || !lease.gpu || !model || !lease.offer_id) return;
    await recordBandwidthSample(services.db, {
      provider: lease.provider,
      gpu: lease.gpu,
      gpu_count: lease.gpu_count ?? 1,
      host: offerHost({ provider: lease.provider, offer_id: lease.offer_id }),
      gbs: leaseBandwidthGbs(tokensPerS, model, await leaseModelFacts(services, lease.provider, model), meter),
      at: iso(now),
      lease_id: leaseId,
    });
  }

  /**
   * One guarded batch (commit.ts), and the gateway's admission facts follow what it wrote: the row
   * as written, or (the guard failed) read again at the next request.
   */
  private async commit(services: Services, write: StepWrite): Promise<LeaseRow | null> {
    const row = await commitStep(services.db, write);
    this.admitted.written(row);
    return row;
  }

  /** Sets the alarm to `at` unless an earlier one is already set (a stop may have asked for now). */
  private async armAt(at: number): Promise<void> {
    const current = await this.ctx.storage.getAlarm();
    const stepAt = await this.ctx.storage.get<number>(KEY_STEP_AT);
    if (current === null || at < current) {
      await this.ctx.storage.setAlarm(at);
      // An earlier step supersedes a pending usage flush's wake: the step flushes too.
      if (stepAt !== undefined) await this.ctx.storage.delete(KEY_STEP_AT);
    } else if (stepAt !== undefined && at < stepAt) {
      // The usage flush wakes first; the step it stands in front of is now due sooner.
      await this.ctx.storage.put(KEY_STEP_AT, at);
    }
  }

  /**
   * Wakes the keeper when the gateway's counts are due for D1 (the step's own alarm may be a
   * minute away): the flush-only wake remembers the step's time and hands back to it.
   */
  private async armFlush(at: number): Promise<void> {
    const current = await this.ctx.storage.getAlarm();
    if (current !== null && current <= at) return;
    if ((await this.ctx.storage.get<number>(KEY_STEP_AT)) !== undefined) return;
    if (current !== null) await this.ctx.storage.put(KEY_STEP_AT, current);
    await this.ctx.storage.setAlarm(at);
  }

  private async leaseId(): Promise<string | null> {
    return (await this.ctx.storage.get<string>(KEY_LEASE_ID)) ?? this.ctx.id.name ?? null;
  }

  private async loop(): Promise<LoopState> {
    return { ...initialLoopState, ...((await this.ctx.storage.get<LoopState>(KEY_LOOP)) ?? {}) };
  }

  private services(): Services {
    // A malformed var must not stop caps or teardown: run on the last valid settings, and say so.
    const { config, invalid } = loadSettings(this.env);
    const services = createServices(this.env, config);
    if (invalid.length)
      services.log.error("config_invalid", { invalid, outcome: "keeper runs on the last valid settings" });
    return services;
  }

  private safeMessage(services: Services, error: unknown): string {
    return scrubError(services.config, error);
  }
}

/** The lease's own machine has a create record that says it was verified gone. */
function currentVerifiedGone(lease: LeaseRow, creates: readonly CreateRecord[]): boolean {
  return creates.some(
    (c) => c.provider === lease.provider && c.provider_ref === lease.provider_ref && c.gone_at !== null,
  );
}

/** A read that says gone: for a machine a record already says is verified gone. */
const GONE: TeardownResult = {
  status: {
    ok: true,
    status: { state: "gone", access: null, cost: null, traffic_cost: null, price_per_hour: null, error: null },
  },
};

/** The lease's unresolved creates and other machines not verified gone. */
function openCount(lease: LeaseRow, creates: readonly CreateRecord[]): number {
  const { unresolved, strays } = openCreates(lease, creates);
  return unresolved.length + strays.length;
}

/**
 * Stopping, and the machine's provider has no key: nothing can end or read it. Flagged
 * teardown_unverified at once, with an event; its cost runs on at its last known price.
 */
function keyless(lease: LeaseRow, loop: LoopState, now: number, s: KeeperSettings): OwnDecision {
  const patch: LeasePatch = {};
  const events: NewEvent[] = [];
  const cost = currentCost(lease, loop, now);
  if (cost !== lease.cost) patch.cost = cost;
  const nextLoop = { ...loop };
  if (!loop.unverifiedFlagged) {
    nextLoop.unverifiedFlagged = true;
    nextLoop.errorBeforeFlag = lease.error;
    patch.error = "teardown_unverified";
    events.push({
      kind: "teardown_unverified",
      detail: `${lease.provider} is not configured, so the machine can be neither terminated nor read; its cost runs on at its last known price`,
    });
  }
  return { patch, events, loop: nextLoop, nextAlarmAt: now + Math.max(s.slowVerifyMs, PROVIDER_MISSING_RETRY_MS) };
}

/** Active, and the machine's provider has no key: said once; its cost runs on at its last known price. */
function providerMissing(lease: LeaseRow, loop: LoopState, now: number): OwnDecision {
  const summary = "provider_not_configured";
  const patch: LeasePatch = {};
  const cost = currentCost(lease, loop, now);
  if (cost !== lease.cost) patch.cost = cost;
  const events: NewEvent[] =
    loop.lastSeen === summary
      ? []
      : [{ kind: "provider_not_configured", detail: `${lease.provider} is not configured; retrying` }];
  return { patch, events, loop: { ...loop, lastSeen: summary }, nextAlarmAt: now + PROVIDER_MISSING_RETRY_MS };
}

function settings(services: Services) {
  return { startTimeoutMin: services.config.startTimeoutMin, eurUsd: services.config.eurUsd };
}

function currencyOf(services: Services, provider: ProviderName) {
  return services.providers.get(provider)?.currency ?? "USD";
}

function concludedDetail(creates: readonly CreateRecord[]): string {
  if (creates.length === 0) return "no create was ever sent for this lease";
  const where = [...new Set(creates.map((c) => c.provider))].join(", ");
  return `every create is resolved and no machine of this lease is left at ${where}`;
}

/**
 * Stopping with creates still unresolved: whether a machine exists is not known. Flagged once the
 * teardown window has passed (like an unverified teardown); the keeper goes on looking.
 */
function unresolvedDecision(lease: LeaseRow, loop: LoopState, now: number, s: KeeperSettings): Decision {
  const since = lease.stop_requested_at ? ms(lease.stop_requested_at) : now;
  const nextLoop = { ...loop };
  const patch: Decision["patch"] = {};
  const events: NewEvent[] = [];
  flagUnverified(
    lease,
    nextLoop,
    patch,
    events,
    now - since,
    s,
    "whether a machine exists is not known",
    "still looking",
  );
  const pace = now - since >= s.unverifiedAfterMs ? s.slowVerifyMs : s.verifyIntervalMs;
  return { patch, events, loop: nextLoop, nextAlarmAt: now + pace, teardownNow: false };
}
