import { DurableObject } from "cloudflare:workers";
import { loadSettings } from "../config";
import { appendEvents, getLease, type LeaseRow, lookupHintFor, type NewEvent, updateLeaseIf } from "../leases/ledger";
import type { LeaseStatus, StopReason } from "../leases/schema";
import { iso } from "../lib/time";
import { scrubError } from "../providers/scrub";
import type { Provider } from "../providers/types";
import { createServices, type Services } from "../services";
import { announces } from "../webhooks/outbox";
import { wakeOutbox } from "../webhooks/sender";
import {
  capReached,
  createsToResolve,
  type Decision,
  decideAfterPoll,
  decideCap,
  decideRental,
  decideTeardown,
  initialLoopState,
  type KeeperSettings,
  keeperSettings,
  type LoopState,
  loopFor,
  type PollResult,
  planTeardown,
  type RentalLookup,
  stoppingPatch,
  type TeardownResult,
} from "./decide";

/** Provider calls one alarm invocation may make (free plan: 50 subrequests, keep each small). */
const CALLS_PER_ALARM = 3;
/** Re-arm after an unexpected failure that outlived the platform's own retries. */
const SELF_RETRY_MS = 60_000;
const PROVIDER_MISSING_RETRY_MS = 60_000;

const KEY_LEASE_ID = "leaseId";
const KEY_LOOP = "loop";

export interface StopResult {
  ok: true;
  already: boolean;
}

/**
 * One per lease: the only writer of its status after creation. Its alarm runs one poll step
 * per invocation (at most CALLS_PER_ALARM provider calls) and re-arms itself; the loop's state
 * lives in this object's storage, the lease of record in D1.
 */
export class LeaseKeeper extends DurableObject<Env> {
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

  override async alarm(alarmInfo?: AlarmInvocationInfo): Promise<void> {
    const leaseId = await this.leaseId();
    if (!leaseId) return;
    const services = this.services();
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
    if (!row) return { ok: true, already: true };
    await appendEvents(services.db, leaseId, iso(now), [
      { kind: "stop_requested", detail: detail ? `${reason}: ${detail}` : reason },
    ]);
    await this.armAt(now);
    return { ok: true, already: false };
  }

  /** One step of the loop: a poll or a cap for an active lease, a teardown step for a stopping one. */
  private async step(services: Services, leaseId: string): Promise<void> {
    const lease = await getLease(services.db, leaseId);
    if (!lease || lease.status === "stopped") return;
    const settings = keeperSettings(services.config);
    const now = services.clock();
    const loop = loopFor(lease, await this.loop());
    const provider = lease.provider ? services.providers.get(lease.provider) : null;

    if (lease.status === "stopping") {
      if (!lease.provider_ref) await this.resolveRental(services, settings, lease, loop, CALLS_PER_ALARM);
      else await this.teardown(services, settings, lease, loop, provider, CALLS_PER_ALARM);
      return;
    }

    if (!lease.provider_ref || !provider) {
      await this.watchWithoutMachine(services, settings, lease, loop, provider, now);
      return;
    }

    let decision: Decision;
    let calls = 0;
    const cause = capReached(lease, loop, now, settings);
    if (cause) {
      decision = decideCap(lease, loop, cause, now);
    } else {
      const poll = await this.poll(services, provider, lease);
      calls = poll.calls;
      decision = decideAfterPoll(lease, loop, poll.result, now, settings);
    }
    const updated = await this.apply(services, lease, decision, now);
    if (!updated) {
      // The status moved under us (a stop arrived during the poll): look again at once.
      await this.armAt(now + 1000);
      return;
    }
    if (decision.teardownNow) {
      await this.teardown(services, settings, updated, decision.loop, provider, CALLS_PER_ALARM - calls);
      return;
    }
    if (decision.nextAlarmAt !== null) await this.armAt(decision.nextAlarmAt);
  }

  /** An active lease with no machine recorded, or a provider that is no longer configured. */
  private async watchWithoutMachine(
    services: Services,
    settings: KeeperSettings,
    lease: LeaseRow,
    loop: LoopState,
    provider: Provider | null,
    now: number,
  ): Promise<void> {
    if (!lease.provider_ref && now - Date.parse(lease.created_at) >= settings.rentWindowMs) {
      // The request that was renting died: whether a machine exists is unknown, so tear down
      // (the teardown looks the label up first).
      const decision = decideCap(
        lease,
        loop,
        { reason: null, error: "the rental did not complete", detail: "no machine was recorded for this lease" },
        now,
      );
      const updated = await this.apply(services, lease, decision, now);
      if (updated)
        await this.resolveRental(services, settings, updated, loopFor(updated, decision.loop), CALLS_PER_ALARM);
      else await this.armAt(now + 1000);
      return;
    }
    if (!provider && lease.provider) await this.noteProviderMissing(services, lease, loop, now);
    await this.armAt(now + (provider ? settings.pollIntervalMs : PROVIDER_MISSING_RETRY_MS));
  }

  private async poll(
    services: Services,
    provider: Provider,
    lease: LeaseRow,
  ): Promise<{ result: PollResult; calls: number }> {
    const ref = lease.provider_ref as string;
    try {
      const status = await provider.status(ref);
      let ollamaReady: boolean | null = null;
      if (lease.status === "provisioning" && lease.template === "ollama" && status.state === "running") {
        ollamaReady = await provider.ollamaReady(ref, status).catch(() => false);
        return { result: { ok: true, status, ollamaReady }, calls: 2 };
      }
      return { result: { ok: true, status, ollamaReady }, calls: 1 };
    } catch (error) {
      return { result: { ok: false, error: this.safeMessage(services, error) }, calls: 1 };
    }
  }

  /** Terminate, verify, re-terminate: `stopped` only when the provider says the machine is gone. */
  private async teardown(
    services: Services,
    settings: KeeperSettings,
    lease: LeaseRow,
    loop: LoopState,
    provider: Provider | null,
    budget: number,
  ): Promise<void> {
    const now = services.clock();
    if (!provider) {
      await this.noteProviderMissing(services, lease, loop, now);
      await this.armAt(now + PROVIDER_MISSING_RETRY_MS);
      return;
    }
    const plan = planTeardown(lease, loop, now, settings);
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
    const decision = decideTeardown(lease, loop, result, now, settings);
    const updated = await this.apply(services, lease, decision, now);
    if (!updated) {
      await this.armAt(now + 1000);
      return;
    }
    if (decision.nextAlarmAt !== null) await this.armAt(Math.max(decision.nextAlarmAt, now + 1000));
  }

  /**
   * Stopping with no machine recorded: look the label up (VRAMfarm: the fingerprint) at every
   * provider a create was sent to, once that create's timeout has passed; a machine found is
   * recorded and torn down, "none everywhere" ends the lease, anything else is looked at again.
   */
  private async resolveRental(
    services: Services,
    settings: KeeperSettings,
    lease: LeaseRow,
    loop: LoopState,
    budget: number,
  ): Promise<void> {
    const now = services.clock();
    const lookups: RentalLookup[] = [];
    let left = budget;
    for (const create of createsToResolve(lease)) {
      if (loop.noMachineAt.includes(create.provider)) continue;
      if (now < Date.parse(create.sent_at) + settings.rentWindowMs || left === 0) continue;
      const provider = services.providers.get(create.provider);
      if (!provider) {
        lookups.push({ provider: create.provider, ok: false, error: `${create.provider} is not configured` });
        continue;
      }
      left -= 1;
      try {
        const hint = await lookupHintFor(services.db, lease, provider, create.offer_id);
        const machine = await provider.findByLabel(lease.label, hint);
        lookups.push({ provider: create.provider, ok: true, machine });
        if (machine && machine.state !== "gone") break;
      } catch (error) {
        lookups.push({ provider: create.provider, ok: false, error: this.safeMessage(services, error) });
      }
    }
    const decision = decideRental(lease, loop, lookups, now, settings);
    const updated = await this.apply(services, lease, decision, now);
    if (!updated) {
      await this.armAt(now + 1000);
      return;
    }
    if (decision.found) {
      const provider = services.providers.get(decision.found.provider);
      await this.teardown(services, settings, updated, decision.loop, provider, left);
      return;
    }
    if (decision.nextAlarmAt !== null) await this.armAt(decision.nextAlarmAt);
  }

  /** Writes the decision: the row (only if its status is unchanged), its events, the loop state. */
  private async apply(services: Services, lease: LeaseRow, decision: Decision, now: number): Promise<LeaseRow | null> {
    await this.ctx.storage.put(KEY_LOOP, decision.loop);
    const from: LeaseStatus[] = [lease.status];
    const row = await updateLeaseIf(services.db, lease.id, from, decision.patch);
    if (!row) return null;
    await appendEvents(services.db, lease.id, iso(now), decision.events);
    // Delivery runs in the sender's own alarm: this keeper never waits for a receiver.
    if (announces(decision.events)) this.ctx.waitUntil(wakeOutbox(this.env));
    return row;
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

  /** Sets the alarm to `at` unless an earlier one is already set (a stop may have asked for now). */
  private async armAt(at: number): Promise<void> {
    const current = await this.ctx.storage.getAlarm();
    if (current === null || at < current) await this.ctx.storage.setAlarm(at);
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
