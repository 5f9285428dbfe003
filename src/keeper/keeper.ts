import { DurableObject } from "cloudflare:workers";
import { loadSettings } from "../config";
import { AdmissionCache, type AdmissionFacts } from "../gateway/admission";
import { addSample, emptyMeter, FLUSH_EVERY_MS, type MeterState, median, type UsageSample } from "../gateway/usage";
import { flushStatement } from "../gateway/usage-store";
import {
  type CreateRecord,
  CreateRecordSchema,
  claimMachine,
  type FoundMachine,
  listCreates,
  noteUnresolved,
  openCreates,
  resolveNone,
  strayUpdateStatement,
} from "../leases/creates";
import { appendEvents, getLease, type LeaseRow, LeaseRowSchema, type NewEvent, updateLeaseIf } from "../leases/ledger";
import { claimFound, lookupMachines } from "../leases/lookup";
import { type RentEnd, rentalConcluded, settleRental } from "../leases/rental";
import type { LeaseStatus, StopReason } from "../leases/schema";
import { scrubError } from "../lib/scrub";
import { iso, ms } from "../lib/time";
import { offerHost } from "../offers/bandwidth";
import { recordBandwidthSample } from "../offers/measured";
import type { OllamaProbe, Provider, ProviderName } from "../providers/types";
import { createServices, hidingValues, type Services } from "../services";
import { announces } from "../webhooks/outbox";
import type { ClaimResult, SettleReport, StopResult } from "./client";
import {
  decideStray,
  lookupsDue,
  nextCreateWorkAt,
  openStrays,
  type StrayResult,
  straysCostIn,
  strayTerminateDue,
} from "./creates";
import {
  capReached,
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

/** Provider calls one alarm invocation may make for the lease's machine (keep each invocation small). */
const CALLS_PER_ALARM = 3;
/** ... and for its other creates: lookups of unresolved ones, teardown of other machines. */
const CREATE_CALLS_PER_ALARM = 2;
/** Re-arm after an unexpected failure that outlived the platform's own retries. */
const SELF_RETRY_MS = 60_000;
const PROVIDER_MISSING_RETRY_MS = 60_000;

const KEY_LEASE_ID = "leaseId";
const KEY_LOOP = "loop";
const KEY_METER = "meter";
/** set while the alarm is a usage flush's wake: the time the step's own alarm was for */
const KEY_STEP_AT = "stepAt";

/**
 * One per lease: the only writer of its row after insert. It settles the rental from the
 * lease's create records, drives the machine's life, resolves every create, and tears down
 * every machine any create made, verified. Its alarm runs one step per invocation (a few
 * provider calls) and re-arms itself; the loop's state lives in this object's storage.
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
   * why none). The row afterwards. A keeper never reached here settles at its next alarm.
   */
  async settle(leaseId: string, report: SettleReport): Promise<LeaseRow | null> {
    await this.ctx.storage.put(KEY_LEASE_ID, leaseId);
    const services = this.services();
    const lease = await getLease(services.db, leaseId);
    if (!lease) return null;
    const now = services.clock();
    const creates = await listCreates(services.db, leaseId);
    const settlement = settleRental(lease, creates, { kind: "answered", error: report.error }, now, settings(services));
    const row = await this.write(services, lease, settlement.patch, [...report.events, ...settlement.events], now);
    const settled = row ?? (await getLease(services.db, leaseId));
    if (settled && settled.status !== "stopped") {
      const soon = settled.status === "stopping" || settled.provider_ref === null;
      await this.armAt(soon ? now + 1000 : now + services.config.pollIntervalS * 1000);
    }
    return settled;
  }

  /**
   * A machine carrying this lease's label that is not its current one (the reaper found it):
   * recorded once on the lease's creates and torn down; a stopped lease goes back to stopping.
   */
  async claim(leaseId: string, machine: FoundMachine): Promise<ClaimResult> {
    await this.ctx.storage.put(KEY_LEASE_ID, leaseId);
    const services = this.services();
    const now = services.clock();
    const outcome = await claimMachine(services.db, leaseId, machine, iso(now), null);
    if (outcome.kind === "other_lease")
      return { claimed: false, reopened: false, detail: `held by lease ${outcome.leaseId}` };
    const events: NewEvent[] = [];
    if (outcome.kind === "known" && outcome.create.gone_at !== null) {
      // Verified gone once, listed alive again: tear it down again.
      const again = strayUpdateStatement(services.db, leaseId, outcome.create.seq, { gone_at: null, gone_reads: 0 });
      if (again) await again.run();
      events.push({ kind: "machine_found", detail: `${machine.provider} ${machine.ref} is listed alive again` });
    } else if (outcome.kind === "claimed") {
      events.push({ kind: "machine_found", detail: `${machine.provider} ${machine.ref}: ${machine.detail}` });
    }
    const reopened = await this.reopenIfStopped(services, leaseId, now);
    await appendEvents(services.db, leaseId, iso(now), events);
    await this.armAt(now + 1000);
    return { claimed: outcome.kind === "claimed", reopened, detail: outcome.kind };
  }

  /** The stopped lease's own machine is still listed: its teardown starts afresh. */
  async reopen(leaseId: string, provider: ProviderName, ref: string): Promise<{ reopened: boolean }> {
    await this.ctx.storage.put(KEY_LEASE_ID, leaseId);
    const services = this.services();
    const now = services.clock();
    const lease = await getLease(services.db, leaseId);
    if (lease?.status !== "stopped") return { reopened: false };
    const row = await updateLeaseIf(services.db, leaseId, ["stopped"], {
      status: "stopping",
      provider,
      provider_ref: ref,
      stop_reason: lease.stop_reason ?? "reaper",
      stop_requested_at: iso(now),
      stopped_at: null,
      teardown_verified_at: null,
    });
    this.admitted.written(row);
    if (row) {
      // Its machine is not gone after all: torn down (and billed) again.
      await services.db
        .prepare("UPDATE lease_creates SET gone_at = NULL WHERE lease_id = ? AND provider = ? AND provider_ref = ?")
        .bind(leaseId, provider, ref)
        .run();
      await this.armAt(now);
    }
    return { reopened: row !== null };
  }

  /**
   * One request through the LLM gateway: counted in this object's storage, written to D1 at most
   * every FLUSH_EVERY_MS (and at the next step), never once per request.
   */
  async recordUsage(leaseId: string, sample: UsageSample): Promise<void> {
    await this.ctx.storage.put(KEY_LEASE_ID, leaseId);
    const services = this.services();
    const now = services.clock();
    const meter = addSample(await this.meter(), sample);
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
    const row = await updateLeaseIf(services.db, leaseId, ["provisioning", "running"], {
      inference_key_hash: hash,
      inference_key_sealed: null,
    });
    this.admitted.written(row);
    if (row) await appendEvents(services.db, leaseId, iso(services.clock()), [{ kind: "inference_key_rotated" }]);
    return { ok: row !== null };
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
    if (stepAt !== undefined) {
      // A wake for the gateway's counts only: write them, then sleep on to the step's own time.
      await this.ctx.storage.delete(KEY_STEP_AT);
      if (stepAt > services.clock() + 1000) {
        await this.flushMeter(services, leaseId);
        await this.ctx.storage.setAlarm(stepAt);
        return;
      }
    }
    try {
      await this.step(services, leaseId);
    } catch (error) {
      // Expected provider failures never get here; this is D1 or a bug. Let the platform retry
      // a few times, then keep the loop alive ourselves rather than let the alarm be dropped.
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
    const lease = await getLease(services.db, leaseId);
    if (!lease) throw new Error(`no lease ${leaseId}`);
    if (lease.status === "stopping" || lease.status === "stopped") return { ok: true, already: true };
    const now = services.clock();
    const loop = await this.loop();
    const patch = stoppingPatch(lease, loop, { reason, error: null, detail: detail ?? reason }, now);
    if (exitCode !== null) patch.exit_code = exitCode;
    const row = await updateLeaseIf(services.db, leaseId, ["provisioning", "running"], patch);
    this.admitted.written(row);
    if (!row) return { ok: true, already: true };
    await appendEvents(services.db, leaseId, iso(now), [
      { kind: "stop_requested", detail: detail ? `${reason}: ${detail}` : reason },
    ]);
    await this.armAt(now);
    return { ok: true, already: false };
  }

  /**
   * One step of the loop: the lease's other creates first (lookups, other machines' teardown),
   * then its own machine: a poll or a cap for an active lease, a teardown step for a stopping one.
   */
  private async step(unscoped: Services, leaseId: string): Promise<void> {
    await this.flushMeter(unscoped, leaseId);
    const loaded = await leaseWithCreates(unscoped.db, leaseId);
    if (!loaded || loaded.lease.status === "stopped") return;
    // What a provider says about this lease's machine may quote its env back: scrubbed too.
    const services = hidingValues(unscoped, Object.values(loaded.lease.spec.env));
    const s = keeperSettings(services.config);
    const now = services.clock();
    const worked = await this.workCreates(services, s, loaded.lease, loaded.creates, now);
    const { creates } = worked;
    const lease = worked.lease;
    const loop = loopFor(lease, await this.loop());
    const provider = lease.provider ? services.providers.get(lease.provider) : null;
    const createWorkAt = nextCreateWorkAt(lease, creates, now, s);

    if (!lease.provider_ref) {
      await this.withoutMachine(services, s, lease, loop, creates, now, createWorkAt);
      return;
    }
    if (lease.status === "stopping") {
      await this.teardown(services, s, lease, loop, provider, CALLS_PER_ALARM, creates, createWorkAt);
      return;
    }
    if (!provider) {
      await this.noteProviderMissing(services, lease, loop, now);
      await this.armAt(now + PROVIDER_MISSING_RETRY_MS);
      return;
    }

    let decision: Decision;
    let calls = 0;
    const cause = capReached(lease, loop, now, s);
    if (cause) {
      decision = decideCap(lease, loop, cause, now);
    } else {
      const poll = await this.poll(services, provider, lease);
      calls = poll.calls;
      decision = decideAfterPoll(lease, loop, poll.result, now, s);
    }
    const updated = await this.apply(services, lease, decision, now);
    if (!updated) {
      // The status moved under us (a stop arrived during the poll): look again at once.
      await this.armAt(now + 1000);
      return;
    }
    if (decision.teardownNow) {
      await this.teardown(
        services,
        s,
        updated,
        decision.loop,
        provider,
        CALLS_PER_ALARM - calls,
        creates,
        createWorkAt,
      );
      return;
    }
    if (decision.nextAlarmAt !== null) await this.armAt(earliest(decision.nextAlarmAt, createWorkAt));
  }

  /**
   * A lease with no machine recorded: settle it from its create records (a request that never
   * settled within the rent window died); stopping, it ends once every create is resolved.
   */
  private async withoutMachine(
    services: Services,
    s: KeeperSettings,
    lease: LeaseRow,
    loop: LoopState,
    creates: CreateRecord[],
    now: number,
    createWorkAt: number | null,
  ): Promise<void> {
    const end: RentEnd =
      lease.status === "provisioning" && now - ms(lease.created_at) >= s.rentWindowMs
        ? { kind: "timed_out" }
        : lease.status === "stopping"
          ? { kind: "answered", error: lease.error }
          : { kind: "renting" };
    const settlement = settleRental(lease, creates, end, now, settings(services));
    if (Object.keys(settlement.patch).length > 0 || settlement.events.length > 0) {
      const row = await this.write(services, lease, settlement.patch, settlement.events, now);
      if (!row) return this.armAt(now + 1000);
      if (settlement.teardownNow && row.provider_ref) {
        const provider = row.provider ? services.providers.get(row.provider) : null;
        await this.teardown(services, s, row, loopFor(row, loop), provider, CALLS_PER_ALARM, creates, createWorkAt);
        return;
      }
      if (row.status === "stopped") return;
      lease = row;
    }
    if (lease.status === "stopping") {
      if (rentalConcluded(lease, creates, now, s.rentWindowMs)) {
        const done = stoppedDecision(loop, {}, [{ kind: "stopped", detail: concludedDetail(creates) }], now);
        await this.apply(services, lease, done, now);
        return;
      }
      // Whether a machine exists is not known yet: flag it once the window passes, keep looking.
      // Nothing can be learnt before the next create's lookup is due (or the rent window ends).
      const decision = unresolvedDecision(lease, loop, now, s);
      await this.apply(services, lease, decision, now);
      const windowEnd = ms(lease.created_at) + s.rentWindowMs;
      const wake = createWorkAt ?? (now < windowEnd ? windowEnd : (decision.nextAlarmAt ?? now + s.verifyIntervalMs));
      await this.armAt(Math.max(wake, now + 1000));
      return;
    }
    // Provisioning and the request is still renting: look again when its window may end.
    await this.armAt(earliest(Math.min(now + s.pollIntervalMs, ms(lease.created_at) + s.rentWindowMs), createWorkAt));
  }

  /**
   * The lease's creates other than its current machine: unresolved ones are looked up once their
   * timeout has passed (a machine found is recorded; a clean lookup that finds none resolves them
   * to "none"); machines that are not the lease's current one are torn down, verified, and billed.
   * The create records afterwards.
   */
  private async workCreates(
    services: Services,
    s: KeeperSettings,
    lease: LeaseRow,
    creates: CreateRecord[],
    now: number,
  ): Promise<{ lease: LeaseRow; creates: CreateRecord[] }> {
    let calls = CREATE_CALLS_PER_ALARM;
    let changed = false;
    const events: NewEvent[] = [];
    const labelled = (name: ProviderName) => services.providers.get(name)?.labelled ?? true;
    for (const create of lookupsDue(creates, now, s, labelled)) {
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
    if (changed) creates = await listCreates(services.db, lease.id);

    const statements: D1PreparedStatement[] = [];
    for (const stray of openStrays(lease, creates)) {
      if (calls === 0) break;
      const provider = services.providers.get(stray.provider);
      if (!provider) continue;
      const ref = stray.provider_ref as string;
      const result: StrayResult = {};
      if (strayTerminateDue(stray, now, s)) {
        calls -= 1;
        result.terminate = await provider.terminate(ref).then(
          () => ({ ok: true }) as const,
          (error: unknown) => ({ ok: false, error: this.safeMessage(services, error) }) as const,
        );
      }
      if (calls > 0) {
        calls -= 1;
        result.status = await provider.status(ref).then(
          (status) => ({ ok: true, status }) as const,
          (error: unknown) => ({ ok: false, error: this.safeMessage(services, error) }) as const,
        );
      }
      const { patch, events: strayEvents } = decideStray(stray, result, now);
      const statement = strayUpdateStatement(services.db, lease.id, stray.seq, patch);
      if (statement) statements.push(statement);
      events.push(...strayEvents);
    }
    if (statements.length > 0) {
      await services.db.batch(statements);
      creates = await listCreates(services.db, lease.id);
      const cost = straysCostIn(lease, creates, (c) => c.offer.currency ?? currencyOf(services, c.provider), s.eurUsd);
      if (cost !== lease.strays_cost)
        lease =
          (await updateLeaseIf(services.db, lease.id, [lease.status], { strays_cost: cost })) ??
          (await getLease(services.db, lease.id)) ??
          lease;
    }
    if (events.length > 0) {
      await appendEvents(services.db, lease.id, iso(now), events);
      if (announces(events)) this.ctx.waitUntil(services.outbox.wake());
    }
    return { lease, creates };
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
    const lookup = await lookupMachines(services, provider, lease, create);
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
        events.push({ kind: "machine_found", detail: `found ${machine.ref} at ${provider.name}` });
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

  /**
   * Terminate, verify, re-terminate: `stopped` only when the provider says the machine is gone
   * and nothing else of the lease (creates, other machines) is open.
   */
  private async teardown(
    services: Services,
    s: KeeperSettings,
    lease: LeaseRow,
    loop: LoopState,
    provider: Provider | null,
    budget: number,
    creates: readonly CreateRecord[],
    createWorkAt: number | null,
  ): Promise<void> {
    const now = services.clock();
    if (!provider) {
      await this.noteProviderMissing(services, lease, loop, now);
      await this.armAt(now + PROVIDER_MISSING_RETRY_MS);
      return;
    }
    const { unresolved, strays } = openCreates(lease, creates);
    const open = unresolved.length + strays.length;
    if (currentVerifiedGone(lease, creates)) {
      // Reopened for another of its machines: its own was verified gone before, billed until then.
      const decision: Decision =
        open === 0
          ? stoppedDecision(
              loop,
              {},
              [{ kind: "stopped", detail: "every machine of this lease is verified gone" }],
              now,
            )
          : { patch: {}, events: [], loop, nextAlarmAt: now + s.verifyIntervalMs, teardownNow: false };
      if ((await this.apply(services, lease, decision, now)) && decision.nextAlarmAt !== null)
        await this.armAt(earliest(decision.nextAlarmAt, createWorkAt));
      return;
    }
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
      left -= 1;
      try {
        result.status = { ok: true, status: await provider.status(ref) };
      } catch (error) {
        result.status = { ok: false, error: this.safeMessage(services, error) };
      }
    }
    const decision = decideTeardown(lease, loop, result, now, s, open);
    const updated = await this.apply(services, lease, decision, now);
    if (!updated) {
      await this.armAt(now + 1000);
      return;
    }
    if (decision.patch.status === "stopped") await this.markCurrentGone(services, updated, now);
    if (decision.nextAlarmAt !== null)
      await this.armAt(Math.max(earliest(decision.nextAlarmAt, createWorkAt), now + 1000));
  }

  /** The lease's own machine is verified gone: its create record says so too. */
  private async markCurrentGone(services: Services, lease: LeaseRow, now: number): Promise<void> {
    await services.db
      .prepare(
        "UPDATE lease_creates SET gone_at = ? WHERE lease_id = ? AND provider = ? AND provider_ref = ? AND gone_at IS NULL",
      )
      .bind(iso(now), lease.id, lease.provider, lease.provider_ref)
      .run();
  }

  /** Writes the decision: the row (only if its status is unchanged), its events, the loop state. */
  private async apply(services: Services, lease: LeaseRow, decision: Decision, now: number): Promise<LeaseRow | null> {
    await this.ctx.storage.put(KEY_LOOP, decision.loop);
    return this.write(services, lease, decision.patch, decision.events, now);
  }

  private async write(
    services: Services,
    lease: LeaseRow,
    patch: Decision["patch"],
    events: NewEvent[],
    now: number,
  ): Promise<LeaseRow | null> {
    const from: LeaseStatus[] = [lease.status];
    // Nothing to write: the row as read (a stop that lands meanwhile arms its own alarm).
    if (Object.keys(patch).length === 0 && events.length === 0) return lease;
    const row = await updateLeaseIf(services.db, lease.id, from, patch);
    this.admitted.written(row);
    if (!row) return null;
    await appendEvents(services.db, lease.id, iso(now), events);
    // Delivery runs in the sender's own alarm: this keeper never waits for a receiver.
    if (announces(events)) this.ctx.waitUntil(services.outbox.wake());
    return row;
  }

  private async reopenIfStopped(services: Services, leaseId: string, now: number): Promise<boolean> {
    const row = await updateLeaseIf(services.db, leaseId, ["stopped"], {
      status: "stopping",
      stop_requested_at: iso(now),
      stopped_at: null,
      teardown_verified_at: null,
    });
    this.admitted.written(row);
    return row !== null;
  }

  private async noteProviderMissing(services: Services, lease: LeaseRow, loop: LoopState, now: number): Promise<void> {
    const summary = "provider_not_configured";
    if (loop.lastSeen === summary) return;
    const event: NewEvent = {
      kind: "provider_not_configured",
      detail: `${lease.provider} is not configured; retrying`,
    };
    await appendEvents(services.db, lease.id, iso(now), [event]);
    await this.ctx.storage.put(KEY_LOOP, { ...loop, lastSeen: summary });
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

  private async writeMeter(services: Services, leaseId: string, meter: MeterState, now: number): Promise<void> {
    try {
      await flushStatement(services.db, leaseId, meter, iso(now)).run();
      await this.recordBandwidth(services, leaseId, meter, now);
    } catch (error) {
      // Not written: the next request or step tries again.
      await this.ctx.storage.put(KEY_METER, { ...(await this.meter()), dirty: true });
      throw error;
    }
  }

  /**
   * Decoding reads every weight once per token: the median decode rate × the model's size is the
   * memory bandwidth this lease really got, one sample per lease (later flushes replace it).
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
      gbs: Math.round(tokensPerS * model.weights_gb * 100) / 100,
      at: iso(now),
      lease_id: leaseId,
    });
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

/** The lease and its create records, in one round trip. */
async function leaseWithCreates(
  db: D1Database,
  leaseId: string,
): Promise<{ lease: LeaseRow; creates: CreateRecord[] } | null> {
  const [leaseRows, createRows] = await db.batch([
    db.prepare("SELECT * FROM leases WHERE id = ?").bind(leaseId),
    db.prepare("SELECT * FROM lease_creates WHERE lease_id = ? ORDER BY seq").bind(leaseId),
  ]);
  const row = leaseRows?.results[0];
  if (!row) return null;
  return {
    lease: LeaseRowSchema.parse(row),
    creates: (createRows?.results ?? []).map((c) => CreateRecordSchema.parse(c)),
  };
}

function settings(services: Services) {
  return { startTimeoutMin: services.config.startTimeoutMin, eurUsd: services.config.eurUsd };
}

function currencyOf(services: Services, provider: ProviderName) {
  return services.providers.get(provider)?.currency ?? "USD";
}

const earliest = (at: number, other: number | null): number => (other === null ? at : Math.min(at, other));

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
