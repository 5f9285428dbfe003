import { DurableObject } from "cloudflare:workers";
import { loadSettings } from "../config";
import { getUsage } from "../gateway/usage-store";
import { getLease, getLeaseByIdempotencyKey } from "../leases/ledger";
import { createLease, scopedIdempotencyKey } from "../leases/rent";
import type { LeaseInput } from "../leases/schema";
import { randomSecret, secretsEqual } from "../lib/crypto";
import { iso } from "../lib/time";
import type { ProviderName } from "../providers/types";
import { createServices, invocationTiming, type Services } from "../services";
import type { WebhookEventType } from "../webhooks/events";
import { enqueue } from "../webhooks/outbox";
import {
  breakerOpen,
  type EndpointEvent,
  type EndpointLoop,
  type EndpointPolicy,
  initialLoop,
  type LeaseSeen,
  nextLookAt,
  observe,
  pickReplica,
  plan,
  providerOrder,
  RENTING_STALE_MS,
  type Replica,
  stateOf,
  trackOverload,
} from "./decide";
import type { Release } from "./release-hold";
import type { Endpoint } from "./schema";
import { type EndpointRow, getEndpointById, replicaLeasesSince, spendTodayUsd, tagReplica } from "./store";

const KEY_LOOP = "loop";
const KEY_ENDPOINT = "endpoint";
const KEY_TICKETS = "tickets";
/** the origin the endpoint was last configured or called on: its replicas' call-back base without PUBLIC_URL */
const KEY_ORIGIN = "origin";
/** only for an endpoint object that never saw a request (none is made before its create) */
const FALLBACK_ORIGIN = "http://localhost:8787";
/** How often a held request looks for its replica, and the loop's look while something changes. */
const HOLD_POLL_MS = 500;
const POLL_MS = 10_000;
/** A request not released after this long is counted out (its worker died before the release). */
const TICKET_MAX_MS = 30 * 60_000;
/** A starting replica is expected this long after its rental (the Retry-After of a 503). */
const EXPECTED_START_S = 60;

/** Where one request goes, or why it cannot go anywhere now. */
export type Acquired =
  | {
      kind: "routed";
      ticket: string;
      leaseId: string;
      base: string;
      provider: ProviderName;
      model: string;
      /** the context the replica's model was sized for */
      contextLength: number | null;
    }
  | { kind: "starting"; retryAfterS: number; expectedAt: string }
  | { kind: "breaker_open"; retryAfterS: number; detail: string }
  | { kind: "budget_exhausted"; detail: string }
  /** the key is not this endpoint's (maybe another's: the worker tells 401 from 404) */
  | { kind: "unauthorized" }
  /** this object holds no endpoint of that id: deleted (or the worker's name → id was stale) */
  | { kind: "gone" };

/**
 * Who calls: an endpoint key's SHA-256 (compared here with the endpoint's), or an API token the
 * worker has already found to hold the infer scope.
 */
export type EndpointCredential = { kind: "key"; hash: string } | { kind: "token" };

export interface AcquireRequest {
  endpointId: string;
  credential: EndpointCredential;
  /** the origin the request came in on: the replicas' call-back base without PUBLIC_URL */
  origin: string;
  /** earlier requests to this endpoint that have ended since (src/endpoints/release-hold.ts) */
  releases: readonly Release[];
}

/** The endpoint's live part of the API's Endpoint object. */
export type EndpointLive = Pick<
  Endpoint,
  "state" | "replicas" | "failed_starts" | "cold_starts" | "spend_today_usd" | "usage_today"
>;

type Tickets = Record<string, { leaseId: string; at: number }>;

/**
 * One per endpoint (named by its id): routes its requests, rents its replicas through the lease
 * rent path (so caps, ledger, keeper and verified teardown apply to each), drains and stops idle
 * ones, replaces lost ones. Decisions are src/endpoints/decide.ts; this persists and performs.
 * The loop's state lives in this object's storage; alarms drive it.
 */
export class EndpointDO extends DurableObject<Env> {
  /** a rental or stop under way, so that an alarm and a request never send the same one twice */
  private working: Promise<void> | null = null;
  /** the origin last stored: a request stores its own only when it differs */
  private storedOrigin: string | null = null;

  /**
   * One request: the replica to send it to, holding it up to the endpoint's cold_start_wait_s while
   * one starts. The object checks the caller's key against the endpoint it holds (an API token was
   * checked by the worker), so the warm path reads nothing but this object's own storage: no D1.
   */
  async acquire(request: AcquireRequest): Promise<Acquired> {
    await this.release(request.releases);
    const endpoint = await this.endpointFor(request.endpointId);
    if (!endpoint) return { kind: "gone" };
    if (request.credential.kind === "key" && !(await secretsEqual(request.credential.hash, endpoint.key_hash)))
      return { kind: "unauthorized" };
    if (this.storedOrigin !== request.origin) {
      await this.ctx.storage.put(KEY_ORIGIN, request.origin);
      this.storedOrigin = request.origin;
    }
    const waitMs = endpoint.cold_start_wait_s * 1000;
    const polls = Math.ceil(Math.max(0, waitMs) / HOLD_POLL_MS);
    for (let poll = 0; ; poll++) {
      const now = invocationTiming.clock();
      let loop = await this.loop();
      if (loop.budgetExhausted) return { kind: "budget_exhausted", detail: budgetDetail(endpoint) };
      const replica = pickReplica(loop.replicas);
      if (replica?.leaseId && replica.base && replica.provider) {
        const ticket = randomSecret(12);
        const tickets = await this.tickets();
        tickets[ticket] = { leaseId: replica.leaseId, at: now };
        loop = {
          ...loop,
          lastRequestAt: now,
          replicas: loop.replicas.map((r) =>
            r === replica ? { ...r, inFlight: r.inFlight + 1, lastRequestAt: now } : r,
          ),
        };
        loop = trackOverload(loop, endpoint.target_in_flight, now);
        await this.ctx.storage.put({ [KEY_LOOP]: loop, [KEY_TICKETS]: tickets });
        if (loop.overloadSince !== null) await this.armAt(nextLookAt(loop, policyOf(endpoint, loop), now, POLL_MS));
        return {
          kind: "routed",
          ticket,
          leaseId: replica.leaseId,
          base: replica.base,
          provider: replica.provider,
          model: endpoint.model,
          contextLength: replica.contextLength ?? null,
        };
      }
      if (breakerOpen(loop, now)) {
        const retryAfterS = Math.ceil(((loop.breakerOpenedAt ?? now) + 15 * 60_000 - now) / 1000);
        return {
          kind: "breaker_open",
          retryAfterS,
          detail: `${loop.failedStarts} replica starts failed in a row${loop.lastError ? ` (last: ${loop.lastError})` : ""}`,
        };
      }
      if (poll === 0) {
        // A request and no running replica: the loop rents one (its alarm, now) unless one is starting.
        loop = { ...loop, lastRequestAt: now, waitingSince: loop.waitingSince ?? now };
        await this.ctx.storage.put(KEY_LOOP, loop);
        await this.armAt(now);
      }
      if (poll >= polls) {
        const started = Math.min(...loop.replicas.map((r) => r.rentedAt), now);
        const expected = Math.max(now + 1000, started + EXPECTED_START_S * 1000);
        return {
          kind: "starting",
          retryAfterS: Math.max(1, Math.min(EXPECTED_START_S, Math.ceil((expected - now) / 1000))),
          expectedAt: iso(expected),
        };
      }
      await wait(HOLD_POLL_MS);
      await this.look(this.services(), false);
    }
  }

  /**
   * Requests have ended (held by the gateway, src/endpoints/release-hold.ts, or riding on the next
   * acquire): each one's replica has one request less in flight; a failed one has the loop look now.
   */
  async release(releases: readonly Release[]): Promise<void> {
    if (releases.length === 0) return;
    const tickets = await this.tickets();
    const now = invocationTiming.clock();
    let loop = await this.loop();
    let lookNow = false;
    for (const { ticket, ok } of releases) {
      const held = tickets[ticket];
      if (!held) continue;
      delete tickets[ticket];
      loop = {
        ...loop,
        replicas: loop.replicas.map((r) =>
          r.leaseId === held.leaseId ? { ...r, inFlight: Math.max(0, r.inFlight - 1), lastRequestAt: now } : r,
        ),
      };
      // A drained replica whose last request ended is stopped now, not at the next look; a failed
      // request may mean a lost machine.
      lookNow ||=
        !ok || loop.replicas.some((r) => r.leaseId === held.leaseId && r.phase === "draining" && r.inFlight === 0);
    }
    const endpoint = await this.endpoint();
    const next = trackOverload(loop, endpoint?.target_in_flight ?? 4, now);
    await this.ctx.storage.put({ [KEY_LOOP]: next, [KEY_TICKETS]: tickets });
    if (lookNow) await this.armAt(now);
  }

  /**
   * The endpoint's settings or key changed (or it was created): the object holds the row as
   * written from now on (a rotated key is refused from the rotation's answer on), and looks now;
   * a PATCH closes the breaker.
   */
  async configure(endpoint: EndpointRow, options: { resetBreaker: boolean; origin?: string }): Promise<void> {
    await this.ctx.storage.put(KEY_ENDPOINT, endpoint);
    if (options.origin) await this.ctx.storage.put(KEY_ORIGIN, options.origin);
    if (options.resetBreaker) {
      const loop = await this.loop();
      await this.ctx.storage.put(KEY_LOOP, { ...loop, breakerOpenedAt: null, failedStarts: 0 });
    }
    await this.armAt(this.services().clock());
  }

  /** What GET /v1/endpoints shows of the loop. */
  async live(endpoint: EndpointRow): Promise<EndpointLive> {
    const services = this.services();
    const now = services.clock();
    const loop = await this.loop();
    const leases = await replicaLeasesSince(services.db, endpoint.id, dayStartOf(now));
    const spend = spendTodayUsd(leases, now, services.config.eurUsd);
    const usage = { requests: 0, errors: 0, prompt_tokens: 0, completion_tokens: 0 };
    for (const row of await Promise.all(leases.map((lease) => getUsage(services.db, lease.id)))) {
      if (!row) continue;
      usage.requests += row.requests;
      usage.errors += row.errors;
      usage.prompt_tokens += row.prompt_tokens;
      usage.completion_tokens += row.completion_tokens;
    }
    const tokens = usage.prompt_tokens + usage.completion_tokens;
    return {
      usage_today: {
        ...usage,
        usd_per_million_tokens: tokens > 0 ? Math.round((spend / tokens) * 1e6 * 10_000) / 10_000 : null,
      },
      state: stateOf(loop, policyOf(endpoint, loop), now),
      replicas: loop.replicas.map((r) => ({
        lease_id: r.leaseId,
        status: r.phase,
        in_flight: r.inFlight,
        last_request_at: r.lastRequestAt === null ? null : iso(r.lastRequestAt),
      })),
      failed_starts: loop.failedStarts,
      cold_starts: loop.coldStarts.map((c) => ({ at: iso(c.at), duration_ms: Math.round(c.durationMs) })),
      spend_today_usd: spend,
    };
  }

  /** The endpoint is deleted: every replica is stopped (verified, as any stop) and the loop ends. */
  async remove(): Promise<{ stopped: number }> {
    const services = this.services();
    await this.working;
    return this.stopAll(services, await this.endpoint());
  }

  override async alarm(): Promise<void> {
    const services = this.services();
    try {
      await this.look(services, true);
    } catch (error) {
      services.log.error("endpoint_loop_failed", { error });
      await this.armAt(services.clock() + 60_000);
    }
  }

  /**
   * One look: the replicas' leases as the ledger has them, today's spend against the budget, then
   * the plan performed (rent, drain, stop). `perform` false: observe only (a held request's poll).
   */
  private async look(services: Services, perform: boolean): Promise<void> {
    if (this.working) {
      await this.working;
      if (!perform) return;
    }
    const run = this.lookOnce(services, perform);
    this.working = run.finally(() => {
      this.working = null;
    });
    await this.working;
  }

  private async lookOnce(services: Services, perform: boolean): Promise<void> {
    const now = services.clock();
    const stored = await this.endpoint();
    let loop = await this.loop();
    const endpoint = stored ? await getEndpointById(services.db, stored.id) : null;
    if (!endpoint) {
      if (perform) await this.stopAll(services, stored);
      return;
    }
    await this.ctx.storage.put(KEY_ENDPOINT, endpoint);
    loop = await this.expireTickets(loop, now);
    const seen = new Map<string, LeaseSeen>();
    for (const replica of loop.replicas) {
      if (!replica.leaseId) continue;
      if (!perform && replica.phase !== "starting") continue;
      const lease = await getLease(services.db, replica.leaseId);
      seen.set(replica.leaseId, {
        status: lease?.status ?? "missing",
        base: lease?.access?.urls[0] ?? null,
        provider: lease?.provider ?? null,
        contextLength: lease?.spec.model?.context_length ?? null,
      });
    }
    const observed = observe(loop, seen, now, endpoint.idle_minutes * 60_000);
    loop = observed.loop;
    const events: EndpointEvent[] = [...observed.events];
    if (perform) {
      const leases = await replicaLeasesSince(services.db, endpoint.id, dayStartOf(now));
      const spend = spendTodayUsd(leases, now, services.config.eurUsd);
      loop = { ...loop, budgetExhausted: endpoint.budget_daily_usd !== null && spend >= endpoint.budget_daily_usd };
    }
    loop = trackOverload(loop, endpoint.target_in_flight, now);
    await this.ctx.storage.put(KEY_LOOP, loop);
    if (perform) {
      loop = await this.perform(services, endpoint, loop, events, now);
      await this.armAt(nextLookAt(loop, policyOf(endpoint, loop), services.clock(), POLL_MS));
    }
    await this.announce(services, endpoint, events);
  }

  /** Drains, stops and rents as the plan says; each change is stored before the call it leads to. */
  private async perform(
    services: Services,
    endpoint: EndpointRow,
    start: EndpointLoop,
    events: EndpointEvent[],
    now: number,
  ): Promise<EndpointLoop> {
    let loop = start;
    const decided = plan(loop, policyOf(endpoint, loop), now);
    const stopping = new Map(decided.stop.map((s) => [s.leaseId, s.reason]));
    loop = {
      ...loop,
      replicas: loop.replicas.map((r) => {
        if (!r.leaseId) return r;
        if (stopping.has(r.leaseId)) return { ...r, phase: "stopping" as const };
        if (decided.drain.includes(r.leaseId)) return { ...r, phase: "draining" as const };
        return r;
      }),
    };
    await this.ctx.storage.put(KEY_LOOP, loop);
    for (const [leaseId, reason] of stopping) {
      if (reason === "idle")
        await services.keepers.stop(
          leaseId,
          "idle",
          `no request for ${endpoint.idle_minutes} minutes (endpoint ${endpoint.name})`,
        );
      else
        await services.keepers.stop(
          leaseId,
          "budget",
          `endpoint ${endpoint.name} reached its daily budget of ${endpoint.budget_daily_usd} USD`,
        );
      events.push({ kind: "replica_stopped", leaseId, reason });
    }
    // Lost replicas are replaced by the plan's count (the endpoint still wants them); stale rentals resent.
    for (const replica of loop.replicas) {
      if (replica.phase === "renting" && now - replica.rentedAt >= RENTING_STALE_MS)
        loop = await this.rent(services, endpoint, loop, replica.rentKey, now);
    }
    for (let i = 0; i < decided.rent; i++) loop = await this.rent(services, endpoint, loop, randomSecret(9), now);
    if (decided.rent > 0 && loop.replace > 0) {
      loop = { ...(await this.loop()), replace: 0 };
      await this.ctx.storage.put(KEY_LOOP, loop);
    }
    return loop;
  }

  /** Rents one replica through the lease rent path, trying the providers in order. */
  private async rent(
    services: Services,
    endpoint: EndpointRow,
    start: EndpointLoop,
    rentKey: string,
    now: number,
  ): Promise<EndpointLoop> {
    let loop = start;
    const resend = loop.replicas.some((r) => r.rentKey === rentKey);
    if (!resend) {
      const placeholder: Replica = {
        rentKey,
        leaseId: null,
        phase: "renting",
        inFlight: 0,
        lastRequestAt: null,
        rentedAt: now,
        runningAt: null,
        base: null,
        provider: null,
      };
      loop = { ...loop, replicas: [...loop.replicas, placeholder] };
      await this.ctx.storage.put(KEY_LOOP, loop);
    }
    const providers = providerOrder(endpoint.providers?.split(",") ?? null, loop.avoidProviders);
    let error = "no provider to try";
    let leaseId: string | null = null;
    const keyOf = (index: number) => `endpoint:${endpoint.id}:${rentKey}:${index}`;
    // A rental re-sent after its answer was lost: a lease any of its keys already made is the replica
    // (the providers' order may have changed since, so every key is looked up before a new create).
    for (let index = 0; resend && index < Math.max(providers.length, 8) && !leaseId; index++) {
      const key = scopedIdempotencyKey({ idempotencyKey: keyOf(index), idempotencyScope: "dispatcher" });
      const existing = key ? await getLeaseByIdempotencyKey(services.db, key) : null;
      if (existing && existing.status !== "stopped" && existing.status !== "stopping") leaseId = existing.id;
    }
    for (const [index, provider] of leaseId ? [] : providers.entries()) {
      const input: LeaseInput = {
        name: `endpoint ${endpoint.name}`,
        template: "ollama",
        model: endpoint.model,
        ...(endpoint.context_length ? { context_length: endpoint.context_length } : {}),
        ...(provider ? { provider: provider as ProviderName } : {}),
        ...(endpoint.gpu ? { gpu: endpoint.gpu } : {}),
        ...(endpoint.max_price ? { max_price: endpoint.max_price } : {}),
        max_minutes: endpoint.max_minutes,
      };
      const outcome = await createLease(services, input, {
        idempotencyKey: keyOf(index),
        idempotencyScope: "dispatcher",
        tokenId: endpoint.token_id,
        endpoint: endpoint.name,
        origin: (await this.ctx.storage.get<string>(KEY_ORIGIN)) ?? FALLBACK_ORIGIN,
      }).catch((cause: unknown) => ({ ok: false as const, refusal: { message: String(cause), leaseId: null } }));
      if (outcome.ok && outcome.lease.status !== "stopped") {
        leaseId = outcome.lease.id;
        break;
      }
      error = outcome.ok ? (outcome.lease.error ?? "the rental failed") : outcome.refusal.message;
    }
    const current = await this.loop();
    if (leaseId) {
      await tagReplica(services.db, endpoint.id, leaseId, now);
      loop = {
        ...current,
        replicas: current.replicas.map((r) =>
          r.rentKey === rentKey ? { ...r, leaseId, phase: "starting" as const, rentedAt: now } : r,
        ),
      };
    } else {
      // A refused rental is a failed start: three in a row open the breaker (observe announces it).
      const failed = { ...current, replicas: current.replicas.filter((r) => r.rentKey !== rentKey) };
      const observed = observe(
        { ...failed, failedStarts: failed.failedStarts + 1, lastError: error.slice(0, 300) },
        new Map(),
        now,
        endpoint.idle_minutes * 60_000,
      );
      loop = observed.loop;
      await this.announce(services, endpoint, observed.events);
    }
    await this.ctx.storage.put(KEY_LOOP, loop);
    return loop;
  }

  /** Stops every active lease tagged with the endpoint (a rental's lease is tagged before its replica is stored), then forgets it. */
  private async stopAll(services: Services, stored: EndpointRow | undefined): Promise<{ stopped: number }> {
    let stopped = 0;
    if (stored) {
      for (const lease of await replicaLeasesSince(services.db, stored.id, services.clock())) {
        if (lease.status === "stopped" || lease.status === "stopping") continue;
        const result = await services.keepers.stop(lease.id, "requested", `the endpoint ${stored.name} was deleted`);
        if (!result.already) stopped += 1;
      }
    }
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
    this.storedOrigin = null;
    return { stopped };
  }

  private async announce(services: Services, endpoint: EndpointRow, events: readonly EndpointEvent[]): Promise<void> {
    if (events.length === 0) return;
    const now = services.clock();
    for (const event of events) {
      const type = webhookTypeOf(event);
      services.log.info(`endpoint_${event.kind}`, { endpoint: endpoint.name, ...event });
      if (!type) continue;
      const leaseId = "leaseId" in event ? event.leaseId : null;
      await enqueue(
        services.db,
        { type, leaseId, detail: describe(endpoint, event), data: { endpoint: endpoint.name, ...event } },
        now,
      );
    }
    await services.outbox.wake().catch(() => undefined);
  }

  private async expireTickets(loop: EndpointLoop, now: number): Promise<EndpointLoop> {
    const tickets = await this.tickets();
    const expired = Object.entries(tickets).filter(([, t]) => now - t.at > TICKET_MAX_MS);
    if (expired.length === 0) return loop;
    for (const [id] of expired) delete tickets[id];
    const counts = new Map<string, number>();
    for (const t of Object.values(tickets)) counts.set(t.leaseId, (counts.get(t.leaseId) ?? 0) + 1);
    await this.ctx.storage.put(KEY_TICKETS, tickets);
    return {
      ...loop,
      replicas: loop.replicas.map((r) => (r.leaseId ? { ...r, inFlight: counts.get(r.leaseId) ?? 0 } : r)),
    };
  }

  private async loop(): Promise<EndpointLoop> {
    return { ...initialLoop(), ...(await this.ctx.storage.get<EndpointLoop>(KEY_LOOP)) };
  }

  private async tickets(): Promise<Tickets> {
    return (await this.ctx.storage.get<Tickets>(KEY_TICKETS)) ?? {};
  }

  private async endpoint(): Promise<EndpointRow | undefined> {
    return this.ctx.storage.get<EndpointRow>(KEY_ENDPOINT);
  }

  /**
   * The endpoint this object holds (create, PATCH, key rotation and every look store it); read
   * from D1 only by an object that holds none yet, and never one deleted (remove() forgets it
   * after its row is gone).
   */
  private async endpointFor(endpointId: string): Promise<EndpointRow | null> {
    const stored = await this.endpoint();
    if (stored) return stored.id === endpointId ? stored : null;
    const row = await getEndpointById(this.env.DB, endpointId);
    if (row) await this.ctx.storage.put(KEY_ENDPOINT, row);
    return row;
  }

  /** Arms the alarm at `at` unless it is due sooner already. */
  private async armAt(at: number | null): Promise<void> {
    if (at === null) return;
    const current = await this.ctx.storage.getAlarm();
    if (current === null || at < current) await this.ctx.storage.setAlarm(at);
  }

  private services(): Services {
    return createServices(this.env, loadSettings(this.env).config);
  }
}

function policyOf(endpoint: EndpointRow, loop: EndpointLoop): EndpointPolicy {
  return {
    minReplicas: endpoint.min_replicas,
    maxReplicas: endpoint.max_replicas,
    idleMinutes: endpoint.idle_minutes,
    targetInFlight: endpoint.target_in_flight,
    budgetExhausted: loop.budgetExhausted,
  };
}

function budgetDetail(endpoint: EndpointRow): string {
  return `endpoint ${endpoint.name} reached its daily budget of ${endpoint.budget_daily_usd} USD; it rents again tomorrow (UTC) or when the budget is raised`;
}

function dayStartOf(now: number): number {
  const d = new Date(now);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
}

function webhookTypeOf(event: EndpointEvent): WebhookEventType | null {
  switch (event.kind) {
    case "replica_started":
      return "endpoint.replica_started";
    case "replica_stopped":
      return "endpoint.replica_stopped";
    case "replica_lost":
      return "endpoint.replica_replaced";
    case "breaker_open":
      return "endpoint.breaker_open";
  }
}

function describe(endpoint: EndpointRow, event: EndpointEvent): string {
  switch (event.kind) {
    case "replica_started":
      return `endpoint ${endpoint.name}: replica ${event.leaseId} answers`;
    case "replica_stopped":
      return `endpoint ${endpoint.name}: replica ${event.leaseId} stopped (${event.reason})`;
    case "replica_lost":
      return `endpoint ${endpoint.name}: replica ${event.leaseId} was lost (${event.everRan ? "it had run" : "it never started"}); another is rented`;
    case "breaker_open":
      return `endpoint ${endpoint.name}: ${event.failedStarts} replica starts failed in a row; no rental for 15 minutes`;
  }
}

const wait = (waitMs: number) => new Promise<void>((resolve) => setTimeout(resolve, waitMs));
