import { assertWithinBudget, rentalBreach } from "../account/budget";
import { roundUsd } from "../account/spend";
import { keeperFor } from "../keeper/client";
import { randomSecret, sha256Hex } from "../lib/crypto";
import { newId } from "../lib/ids";
import { iso } from "../lib/time";
import type { OffersQuery } from "../offers/schemas";
import { findOffer, listRankedOffers, type RankedOffer } from "../offers/service";
import { OLLAMA_PORT } from "../providers/ollama";
import { scrubError, scrubText, secretsOf } from "../providers/scrub";
import type { MachineSpec, Provider } from "../providers/types";
import type { Services } from "../services";
import { wakeOutbox } from "../webhooks/sender";
import {
  appendEvents,
  deleteUnsentLease,
  getLease,
  getLeaseByIdempotencyKey,
  insertLease,
  type LeaseRow,
  lookupHintFor,
  type NewEvent,
  recordMachine,
  type StoredSpec,
  toLease,
  updateLeaseIf,
  writeAheadCreate,
} from "./ledger";
import { withinProviderLimits } from "./provider-limits";
import { type RentOutcome, RentRefusal } from "./refusal";
import type { Lease, LeaseInput, RESERVED_ENV_PREFIX, RentAttempt } from "./schema";

/** Offers tried per request, and the time they may take (an HTTP request has about 30 s). */
export const MAX_RENT_ATTEMPTS = 5;
export const RENT_DEADLINE_MS = 15_000;
/** A create that failed ambiguously may show up in the listing a moment later (RunPod's lag). */
const LABEL_LOOKUP_RETRY_MS = 1_500;

const LOCAL_ORIGIN = "http://localhost:8787";
const OLLAMA_IMAGE = "ollama/ollama:latest";

export interface CreateOptions {
  /** the caller's key; scoped to the token (or to `idempotencyScope`) before it is stored */
  idempotencyKey?: string | null;
  /** who owns the key's namespace when it is not a token: the dispatcher's own keys */
  idempotencyScope?: "dispatcher";
  scheduleId?: string | null;
  tokenId?: string | null;
  /**
   * the origin the request came in on; the call-back URL uses PUBLIC_URL when set. Cron-started
   * leases have no request: without PUBLIC_URL their call-back points at the local dev server.
   */
  origin?: string;
}

/**
 * Rents a machine for `input`: writes the lease row first, then tries the offers in order,
 * resolving an ambiguous create by its label before anything else, and hands the lease to its
 * keeper. `created` is false when the idempotency key already named a lease (nothing rented).
 * A refusal is an outcome, not an exception: an unknown offer or one over the provider's limits,
 * the budget, MAX_ACTIVE_LEASES, no capacity, or a rental whose outcome could not be learnt (the
 * lease is then torn down by its keeper). Anything else (a D1 failure) still throws.
 */
export async function createLease(services: Services, input: LeaseInput, options: CreateOptions): Promise<RentOutcome> {
  try {
    return { ok: true, ...(await rentLease(services, input, options)) };
  } catch (error) {
    if (error instanceof RentRefusal) return { ok: false, refusal: error };
    throw error;
  }
}

async function rentLease(
  services: Services,
  input: LeaseInput,
  options: CreateOptions,
): Promise<{ lease: Lease; created: boolean }> {
  const idempotencyKey = scopedIdempotencyKey(options);
  if (idempotencyKey) {
    const existing = await getLeaseByIdempotencyKey(services.db, idempotencyKey);
    if (existing) return { lease: toLease(existing), created: false };
  }

  const offers = await affordable(
    services,
    input,
    withinProviderLimits(services, input, await candidateOffers(services, input)),
  );

  const now = services.clock();
  const leaseId = newId("lse", now);
  const label = `${services.config.labelPrefix}-${leaseId}`;
  const callbackToken = randomSecret();
  const inserted = await insertLease(
    services.db,
    {
      id: leaseId,
      name: input.name ?? null,
      label,
      template: input.template,
      spec: storedSpec(input),
      max_minutes: input.max_minutes,
      max_cost: input.max_cost ?? null,
      // The reservation the budget check counts: the worst case over the offers to try.
      expected_cost: offers.length
        ? Math.max(...offers.map((o) => worstCaseUsd(o, input, billingFor(services, o))))
        : null,
      schedule_id: options.scheduleId ?? null,
      token_id: options.tokenId ?? null,
      idempotency_key: idempotencyKey,
      callback_hash: await sha256Hex(callbackToken),
      created_at: iso(now),
    },
    services.config.maxActiveLeases,
  );
  if (inserted.kind === "duplicate") return { lease: toLease(inserted.row), created: false };
  if (inserted.kind === "limit_reached") {
    throw new RentRefusal(
      "limit_reached",
      `${services.config.maxActiveLeases} leases are active (MAX_ACTIVE_LEASES); stop one first`,
    );
  }
  const breach = await rentalBreach(services, leaseId);
  if (breach) {
    // Refused before anything was sent anywhere: the row goes, as if never written.
    await deleteUnsentLease(services.db, leaseId);
    const period = breach.period === "daily" ? "today's" : "this month's";
    throw new RentRefusal(
      "budget_exceeded",
      `this rental together with the leases before it would take ${period} committed spend to ` +
        `${roundUsd(breach.amountUsd)} USD, over the ${breach.period} budget of ${breach.budgetUsd} USD`,
    );
  }
  await appendEvents(services.db, leaseId, iso(now), [
    { kind: "created", detail: `${offers.length} offer(s) to try: ${offers.map((o) => o.offer_id).join(", ")}` },
  ]);
  // Write-ahead: the keeper's alarm is armed before any create is sent, so a request that dies
  // at any later await leaves a lease its keeper resolves (it looks the label up, then tears down).
  try {
    await keeperFor(services.env, leaseId).start(leaseId);
  } catch (error) {
    const detail = `the lease's keeper could not be started: ${safeMessage(services, error)}`;
    // Nothing was sent to a provider yet, so nothing can exist.
    await updateLeaseIf(services.db, leaseId, ["provisioning"], {
      status: "stopped",
      stop_reason: "rent_failed",
      stop_requested_at: iso(now),
      stopped_at: iso(now),
      teardown_verified_at: iso(now),
      error: detail,
    });
    throw new RentRefusal("provider_error", `${detail}; nothing was rented`, { lease_id: leaseId });
  }

  const base = services.config.publicUrl ?? options.origin?.replace(/\/+$/, "") ?? LOCAL_ORIGIN;
  const callbackUrl = `${base}/v1/leases/${leaseId}/done`;
  const spec = machineSpec(input, label, {
    GPULEASE_CALLBACK_URL: callbackUrl,
    GPULEASE_CALLBACK_TOKEN: callbackToken,
  });
  return rent(services, inserted.row, offers, spec);
}

/**
 * Idempotency keys are scoped to the token that sent them (the admin token and the dispatcher
 * each have their own scope): the same key from two tokens names two rentals, and no token can
 * read another's lease through a key or pre-claim the dispatcher's predictable ones.
 */
export function scopedIdempotencyKey(options: CreateOptions): string | null {
  if (!options.idempotencyKey) return null;
  const scope = options.idempotencyScope ?? (options.tokenId ? `token:${options.tokenId}` : "admin");
  // A header value cannot hold a line break: the first one splits scope and key unambiguously.
  return `${scope}\n${options.idempotencyKey}`;
}

/** The offers listing a lease body asks for: its filters, the best MAX_RENT_ATTEMPTS of them. */
export function offersQueryFor(input: LeaseInput): OffersQuery {
  return {
    vram_gb: input.vram_gb,
    weights_gb: input.weights_gb,
    gpu: input.gpu,
    gpu_count: input.gpu_count,
    provider: input.provider ? [input.provider] : undefined,
    max_price: input.max_price,
    template: input.template,
    limit: MAX_RENT_ATTEMPTS,
  };
}

/** The offers to try, best first: the one named, or the ranked offers for the filters. */
async function candidateOffers(services: Services, input: LeaseInput): Promise<RankedOffer[]> {
  const sizing = { vram_gb: input.vram_gb, weights_gb: input.weights_gb };
  if (input.offer_id) {
    let offer: RankedOffer | null;
    try {
      offer = await findOffer(services, input.offer_id, sizing);
    } catch (error) {
      throw new RentRefusal("provider_error", `could not look the offer up: ${safeMessage(services, error)}`);
    }
    if (!offer) {
      throw new RentRefusal(
        "invalid_request",
        `unknown offer_id "${input.offer_id}" (list offers with GET /v1/offers)`,
        {
          issues: [{ path: "offer_id", message: "no configured provider offers this" }],
        },
      );
    }
    if (!offer.templates.includes(input.template)) {
      throw new RentRefusal("invalid_request", `offer ${input.offer_id} cannot run the ${input.template} template`, {
        issues: [{ path: "template", message: `this offer runs ${offer.templates.join(", ")}` }],
      });
    }
    return [offer];
  }
  const listed = await listRankedOffers(services, offersQueryFor(input));
  if (listed.offers.length === 0) {
    const why = listed.errors.map((e) => `${e.provider}: ${e.error}`).join("; ");
    throw new RentRefusal("no_capacity", `no offer matches the request${why ? ` (${why})` : ""}`, {
      attempts: listed.errors.map((e) => ({ offer_id: `${e.provider}:*`, error: e.error })),
    });
  }
  return listed.offers;
}

/** How an offer's provider bills, for the worst case (from the Provider port). */
export interface WorstCaseBilling {
  startsAt: Provider["billingStartsAt"];
  minimumMinutes: number;
  startTimeoutMin: number;
}

export function billingFor(
  services: Services,
  offer: Pick<RankedOffer, "provider" | "min_billed_minutes">,
): WorstCaseBilling {
  const provider = services.providers.get(offer.provider);
  return {
    // An unknown provider is assumed to bill while it boots: the larger worst case.
    startsAt: provider?.billingStartsAt ?? "accepted",
    minimumMinutes: Math.max(provider?.minimumBilledMinutes ?? 0, offer.min_billed_minutes),
    startTimeoutMin: services.config.startTimeoutMin,
  };
}

/** The minutes the worst case bills: boot time included where billing starts at the accepted rental. */
export function worstCaseMinutes(billing: WorstCaseBilling, maxMinutes: number): number {
  return billing.startsAt === "accepted"
    ? billing.startTimeoutMin + maxMinutes
    : Math.max(maxMinutes, billing.minimumMinutes);
}

/**
 * USD a lease can cost at most on this offer: price × (START_TIMEOUT_MIN + max_minutes) where
 * the provider bills while the machine boots, price × max(max_minutes, minimum) where it bills
 * from running; `max_cost` when that is smaller.
 */
export function worstCaseUsd(
  offer: Pick<RankedOffer, "price_per_hour_usd">,
  input: Pick<LeaseInput, "max_minutes" | "max_cost">,
  billing: WorstCaseBilling,
): number {
  const byTime = (offer.price_per_hour_usd * worstCaseMinutes(billing, input.max_minutes)) / 60;
  return Math.round(Math.min(byTime, input.max_cost ?? Number.POSITIVE_INFINITY) * 1e6) / 1e6;
}

/** Drops the offers the budget forbids; 402 when none is left. */
async function affordable(services: Services, input: LeaseInput, offers: RankedOffer[]): Promise<RankedOffer[]> {
  const kept: RankedOffer[] = [];
  let refusal: unknown = null;
  for (const offer of offers) {
    try {
      await assertWithinBudget(services, worstCaseUsd(offer, input, billingFor(services, offer)));
      kept.push(offer);
    } catch (error) {
      if (!(error instanceof RentRefusal) || error.code !== "budget_exceeded") throw error;
      refusal ??= error;
    }
  }
  if (kept.length === 0 && refusal) throw refusal;
  return kept;
}

type Outcome =
  | { kind: "rented"; offer: RankedOffer; ref: string; pricePerHour: number | null }
  | { kind: "unknown"; offer: RankedOffer; error: string }
  /** a stop arrived before the next create: none was sent */
  | { kind: "stopped_meanwhile" }
  | { kind: "failed" };

async function rent(
  services: Services,
  lease: LeaseRow,
  offers: RankedOffer[],
  spec: MachineSpec,
): Promise<{ lease: Lease; created: boolean }> {
  const startedAt = services.clock();
  const attempts: RentAttempt[] = [];
  const events: NewEvent[] = [];
  let ambiguousAt: RankedOffer | null = null;
  let outcome: Outcome = { kind: "failed" };

  for (const offer of offers.slice(0, MAX_RENT_ATTEMPTS)) {
    if (services.clock() - startedAt > RENT_DEADLINE_MS) {
      events.push({ kind: "rent_deadline", detail: "no time left in this request for further offers" });
      break;
    }
    const provider = services.providers.get(offer.provider);
    if (!provider) {
      attempts.push({ offer_id: offer.offer_id, error: `${offer.provider} is not configured` });
      continue;
    }
    // Write-ahead: the create is on record before it is sent, so whatever happens next the keeper
    // knows where to look for a machine.
    const sent = { provider: offer.provider, offer_id: offer.offer_id, sent_at: iso(services.clock()) };
    if (!(await writeAheadCreate(services.db, lease.id, sent))) {
      events.push({ kind: "rent_interrupted", detail: "a stop arrived while renting: no further create is sent" });
      outcome = { kind: "stopped_meanwhile" };
      break;
    }
    const result = await provider
      .rent(offer.source, spec)
      .catch((error: unknown) => ({ ok: false, kind: "ambiguous", error: safeMessage(services, error) }) as const);
    if (result.ok) {
      outcome = { kind: "rented", offer, ref: result.ref, pricePerHour: result.price_per_hour };
      break;
    }
    const error = scrubText(result.error, secretsOf(services.config));
    if (result.kind !== "ambiguous") {
      attempts.push({ offer_id: offer.offer_id, error: `${result.kind}: ${error}` });
      events.push({ kind: "rent_attempt_failed", detail: `${offer.offer_id}: ${result.kind}: ${error}` });
      continue;
    }
    // A create that may have made a machine: find it by its label before trying anything else.
    ambiguousAt = offer;
    events.push({ kind: "rent_ambiguous", detail: `${offer.offer_id}: ${error}; looking the label up` });
    const lookup = await findByLabel(services, provider, lease, offer.offer_id);
    if (lookup.kind === "found") {
      events.push({ kind: "machine_found", detail: `found ${lookup.ref} by its label` });
      outcome = { kind: "rented", offer, ref: lookup.ref, pricePerHour: lookup.pricePerHour };
      break;
    }
    if (lookup.kind === "failed") {
      outcome = { kind: "unknown", offer, error: `${error}; the label lookup failed: ${lookup.error}` };
      break;
    }
    attempts.push({ offer_id: offer.offer_id, error: `ambiguous: ${error}; no machine carries the label` });
  }

  const now = services.clock();
  const keeper = keeperFor(services.env, lease.id);
  switch (outcome.kind) {
    case "rented": {
      const offer = outcome.offer;
      // Whatever the status has become (a stop may have arrived while we were renting): the
      // machine is on record, and a stopping lease's keeper tears it down.
      const row = await recordMachine(services.db, lease.id, {
        provider: offer.provider,
        provider_ref: outcome.ref,
        offer_id: offer.offer_id,
        gpu: offer.gpu,
        gpu_count: offer.gpu_count,
        vram_gb: offer.vram_gb,
        price_per_hour: outcome.pricePerHour ?? offer.price_per_hour,
        currency: offer.currency,
        spec: { ...lease.spec, min_billed_minutes: offer.min_billed_minutes },
        expected_cost: worstCaseUsd(
          offer,
          { max_minutes: lease.max_minutes, max_cost: lease.max_cost ?? undefined },
          billingFor(services, offer),
        ),
        billing_starts_at: services.providers.get(offer.provider)?.billingStartsAt ?? "accepted",
        attempts: attempts.length ? JSON.stringify(attempts) : null,
        rented_at: iso(now),
      });
      events.push({ kind: "rented", detail: `${offer.offer_id} as ${outcome.ref}` });
      await appendEvents(services.db, lease.id, iso(now), events);
      await startKeeper(services, keeper, lease.id);
      return { lease: toLease(row ?? lease), created: true };
    }
    case "stopped_meanwhile": {
      await appendEvents(services.db, lease.id, iso(now), events);
      await startKeeper(services, keeper, lease.id);
      const row = await getLease(services.db, lease.id);
      return { lease: toLease(row ?? lease), created: true };
    }
    case "unknown": {
      const error = `the rental's outcome is unknown: ${outcome.error}`;
      await updateLeaseIf(services.db, lease.id, ["provisioning"], {
        status: "stopping",
        provider: outcome.offer.provider,
        offer_id: outcome.offer.offer_id,
        stop_reason: "rent_failed",
        stop_requested_at: iso(now),
        error,
        attempts: JSON.stringify(attempts),
      });
      events.push({
        kind: "stop_requested",
        detail: "rent_failed: the keeper looks for the machine and tears it down",
      });
      await appendEvents(services.db, lease.id, iso(now), events);
      await startKeeper(services, keeper, lease.id);
      throw new RentRefusal("provider_error", `${error}; the lease is being torn down`, { lease_id: lease.id });
    }
    case "failed": {
      const error = attempts.length ? "no offer could be rented" : "no offer was tried";
      // Every answer was definite, so nothing exists; after an ambiguous create the keeper
      // still checks the label once the listing has caught up.
      const finished = ambiguousAt
        ? { status: "stopping" as const, provider: ambiguousAt.provider, offer_id: ambiguousAt.offer_id }
        : { status: "stopped" as const, stopped_at: iso(now), teardown_verified_at: iso(now) };
      await updateLeaseIf(services.db, lease.id, ["provisioning"], {
        ...finished,
        stop_reason: "rent_failed",
        stop_requested_at: iso(now),
        error,
        attempts: JSON.stringify(attempts),
      });
      events.push({ kind: ambiguousAt ? "stop_requested" : "stopped", detail: `rent_failed: ${error}` });
      await appendEvents(services.db, lease.id, iso(now), events);
      if (ambiguousAt) await startKeeper(services, keeper, lease.id);
      else await wakeOutbox(services.env);
      throw new RentRefusal("no_capacity", `${error}: every attempt was refused`, { attempts, lease_id: lease.id });
    }
  }
}

/**
 * Hands the lease to its keeper. The machine is rented and recorded whatever happens here: a
 * keeper that cannot be reached now is re-armed by the reaper (ensureAlarm), so the request
 * still answers with the lease.
 */
async function startKeeper(services: Services, keeper: ReturnType<typeof keeperFor>, leaseId: string): Promise<void> {
  try {
    await keeper.start(leaseId);
  } catch (error) {
    await appendEvents(services.db, leaseId, iso(services.clock()), [
      { kind: "keeper_start_failed", detail: `${safeMessage(services, error)}; the reaper re-arms it` },
    ]).catch(() => undefined);
  }
}

type Lookup =
  | { kind: "found"; ref: string; pricePerHour: number | null }
  | { kind: "none" }
  | { kind: "failed"; error: string };

async function findByLabel(services: Services, provider: Provider, lease: LeaseRow, offerId: string): Promise<Lookup> {
  for (let attempt = 0; attempt < 2; attempt++) {
    if (attempt > 0) await services.sleep(LABEL_LOOKUP_RETRY_MS);
    try {
      const machine = await provider.findByLabel(
        lease.label,
        await lookupHintFor(services.db, lease, provider, offerId),
      );
      if (machine) return { kind: "found", ref: machine.ref, pricePerHour: machine.price_per_hour };
    } catch (error) {
      return { kind: "failed", error: safeMessage(services, error) };
    }
  }
  return { kind: "none" };
}

/** What the row keeps of the request (never the call-back token). */
function storedSpec(input: LeaseInput): StoredSpec {
  const weights = input.weights_gb ?? input.vram_gb ?? 0;
  return {
    image: input.image ?? (input.template === "ollama" ? OLLAMA_IMAGE : null),
    cmd: input.cmd ?? null,
    env: input.env ?? {},
    ports: portsFor(input),
    disk_gb: input.disk_gb ?? Math.max(40, Math.ceil(weights * 2) + 20),
    weights_gb: weights,
    context_length: input.context_length ?? null,
    min_billed_minutes: 0,
  };
}

function portsFor(input: LeaseInput): number[] {
  const ports = input.ports ?? [];
  if (input.template === "ollama" && !ports.includes(OLLAMA_PORT)) return [OLLAMA_PORT, ...ports];
  return ports;
}

/** What the provider is asked to run; the call-back variables are added to the user's env. */
function machineSpec(
  input: LeaseInput,
  label: string,
  callbackEnv: Record<`${typeof RESERVED_ENV_PREFIX}${string}`, string>,
): MachineSpec {
  const stored = storedSpec(input);
  return {
    label,
    template: input.template,
    image: stored.image ?? OLLAMA_IMAGE,
    cmd: stored.cmd,
    env: { ...stored.env, ...callbackEnv },
    ports: stored.ports,
    disk_gb: stored.disk_gb,
    weights_gb: stored.weights_gb,
    context_length: stored.context_length,
    max_minutes: input.max_minutes,
  };
}

function safeMessage(services: Services, error: unknown): string {
  return scrubError(services.config, error);
}
