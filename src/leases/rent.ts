import { rentalBreach } from "../account/budget";
import { loadSpend, roundUsd } from "../account/spend";
import { readSettled, type Settled } from "../keeper/client";
import { randomSecret, sha256Hex } from "../lib/crypto";
import { newId } from "../lib/ids";
import { scrubError, scrubText, secretsOf } from "../lib/scrub";
import { iso } from "../lib/time";
import { compareRanked } from "../offers/rank";
import type { OffersQuery } from "../offers/schemas";
import { findOffer, listRankedOffers, type RankedOffer } from "../offers/service";
import { OLLAMA_PORT } from "../providers/ollama";
import {
  type MachineSpec,
  type Provider,
  type ProviderName,
  ProviderNameSchema,
  providerNames,
} from "../providers/types";
import { hidingValues, type Services } from "../services";
import {
  type CreateRecord,
  claimMachine,
  listCreates,
  noteUnresolved,
  resolveNone,
  writeAheadCreate,
} from "./create-records";
import { newInferenceKey, sealInferenceKey } from "./inference-key";
import {
  appendEvents,
  deleteUnsentLease,
  getLeaseByIdempotencyKey,
  insertLease,
  type LeaseRow,
  type NewEvent,
  type StoredSpec,
  toLease,
} from "./ledger";
import { claimFound, lookupMachines } from "./lookup";
import { fitOn, type ModelSizing, modelSourceGroups, type StoredModel, sizeModelFrom } from "./model-sizing";
import type { WorstCaseBilling } from "./pricing";
import { withinProviderLimits } from "./provider-limits";
import { type RentOutcome, RentRefusal } from "./refusal";
import { attemptsOf, type PlannedOffer, planRental } from "./rental";
import type { LeaseInput } from "./schema";

/** Offers tried per request, and the time they may take (an HTTP request has about 30 s). */
export const MAX_RENT_ATTEMPTS = 5;
export const RENT_DEADLINE_MS = 15_000;
/** A create that failed ambiguously may show up in the listing a moment later (RunPod's lag). */
const LABEL_LOOKUP_RETRY_MS = 1_500;

export interface CreateOptions {
  /** the caller's key; scoped to the token (or to `idempotencyScope`) before it is stored */
  idempotencyKey?: string | null;
  /** who owns the key's namespace when it is not a token: the dispatcher's own keys */
  idempotencyScope?: "dispatcher";
  scheduleId?: string | null;
  tokenId?: string | null;
  /** the model endpoint the lease is a replica of (its name) */
  endpoint?: string | null;
  /**
   * where the worker answers when PUBLIC_URL is unset: the origin the request came in on, or for
   * a cron-started lease the origin of its schedule's last request. The call-back URL (and the
   * sim's machine addresses) use PUBLIC_URL when it is set.
   */
  origin: string;
}

/**
 * Rents a machine for `input`. The decisions are pure (`planRental`, `settleRental` in
 * rental.ts); this performs them: the lease row first, its keeper armed, then every create on
 * record before it is sent and its outcome after; the keeper then settles the lease from those
 * records (it is the one writer of the row after insert). `created` is false when the
 * idempotency key already named a lease. A refusal is an outcome value; only a D1 failure throws.
 */
export async function createLease(services: Services, input: LeaseInput, options: CreateOptions): Promise<RentOutcome> {
  const idempotencyKey = scopedIdempotencyKey(options);
  if (idempotencyKey) {
    const existing = await getLeaseByIdempotencyKey(services.db, idempotencyKey);
    if (existing) return { ok: true, lease: await leaseView(services, existing), created: false };
  }

  // A model lease is sized by its model (registry manifest and GGUF header), not by the caller.
  const chosen = await sizedCandidates(services, input);
  if (chosen instanceof RentRefusal) return { ok: false, refusal: chosen };
  const { sizing, candidates } = chosen;
  input = chosen.input;
  const allowed = withinProviderLimits(services, input, candidates);
  if (allowed instanceof RentRefusal) return { ok: false, refusal: allowed };
  const budget = { daily: services.config.budgetDailyUsd, monthly: services.config.budgetMonthlyUsd };
  const plan = planRental({
    candidates: allowed,
    billing: (offer) => billingFor(services, offer, sizing ? offer.load_time_s : 0),
    caps: input,
    spend:
      budget.daily === null && budget.monthly === null
        ? null
        : await loadSpend(services.db, services.clock(), services.config.eurUsd),
    budget,
    maxAttempts: MAX_RENT_ATTEMPTS,
  });
  if (!plan.ok) return { ok: false, refusal: plan.refusal };

  const now = services.clock();
  const leaseId = newId("lse", now);
  const label = `${services.config.labelPrefix}-${leaseId}`;
  const callbackToken = randomSecret();
  // A model lease is reached through the LLM gateway with its own key (shown once, kept hashed);
  // a schedule's lease gets it in its lease.running webhook instead of the rent answer.
  const inferenceKey = sizing ? newInferenceKey() : null;
  const adminToken = services.config.secrets.adminToken;
  const sealedKey =
    inferenceKey && options.scheduleId && adminToken ? await sealInferenceKey(inferenceKey, adminToken) : null;
  const inserted = await insertLease(
    services.db,
    {
      id: leaseId,
      name: input.name ?? null,
      label,
      template: input.template,
      spec: {
        ...storedSpec(input, services.config.ollamaImage, sizing?.model ?? null),
        endpoint: options.endpoint ?? null,
      },
      max_minutes: input.max_minutes,
      max_cost: input.max_cost ?? null,
      // The reservation the budget check counts: the worst case over the offers to try.
      expected_cost: plan.offers.length ? plan.reservationUsd : null,
      schedule_id: options.scheduleId ?? null,
      token_id: options.tokenId ?? null,
      idempotency_key: idempotencyKey,
      callback_hash: await sha256Hex(callbackToken),
      inference_key_hash: inferenceKey ? await sha256Hex(inferenceKey) : null,
      inference_key_sealed: sealedKey,
      created_at: iso(now),
    },
    services.config.maxActiveLeases,
    { detail: `${plan.offers.length} offer(s) to try: ${plan.offers.map((o) => o.offer.offer_id).join(", ")}` },
  );
  if (inserted.kind === "duplicate")
    return { ok: true, lease: await leaseView(services, inserted.row), created: false };
  if (inserted.kind === "limit_reached") {
    const refusal = new RentRefusal(
      "limit_reached",
      `${services.config.maxActiveLeases} leases are active (MAX_ACTIVE_LEASES); stop one first`,
    );
    return { ok: false, refusal };
  }
  const breach = await rentalBreach(services, leaseId);
  if (breach) {
    // Refused before anything was sent anywhere: the row goes, as if never written.
    await deleteUnsentLease(services.db, leaseId);
    const period = breach.period === "daily" ? "today's" : "this month's";
    const refusal = new RentRefusal(
      "budget_exceeded",
      `this rental together with the leases before it would take ${period} committed spend to ` +
        `${roundUsd(breach.amountUsd)} USD, over the ${breach.period} budget of ${breach.budgetUsd} USD`,
    );
    return { ok: false, refusal };
  }
  // Write-ahead: the keeper's alarm is armed before any create is sent, so a request that dies
  // at any later await leaves a lease its keeper resolves from the create records.
  try {
    await services.keepers.start(leaseId);
  } catch (error) {
    // Nothing was sent to a provider yet, so nothing can exist: the row goes, as if never written.
    await deleteUnsentLease(services.db, leaseId);
    const detail = `the lease's keeper could not be started: ${safeMessage(services, error)}`;
    return { ok: false, refusal: new RentRefusal("provider_error", `${detail}; nothing was rented`) };
  }

  const base = services.config.publicUrl ?? options.origin.replace(/\/+$/, "");
  const spec = machineSpec(input, label, inserted.row.spec, {
    GPULEASE_CALLBACK_URL: `${base}/v1/leases/${leaseId}/done`,
    GPULEASE_CALLBACK_TOKEN: callbackToken,
    // The memory estimate assumes one request at a time (Ollama's OLLAMA_NUM_PARALLEL).
    ...(sizing ? { GPULEASE_MODEL: sizing.model.name, OLLAMA_NUM_PARALLEL: "1" } : {}),
  });
  // A provider's error may quote the create back: the env sent (the user's values and the
  // call-back token) is scrubbed from everything this rental stores, logs or answers.
  const renting = hidingValues(services, Object.values(spec.env));
  const tried = await tryOffers(renting, inserted.row, plan.offers, spec);
  const outcome = await answer(renting, inserted.row, tried);
  return outcome.ok && inferenceKey && !options.scheduleId ? { ...outcome, inferenceKey } : outcome;
}

/**
 * Idempotency keys are scoped to the token that sent them (the admin token and the dispatcher
 * each have their own scope): the same key from two tokens names two rentals, and no token can
 * read another's lease through a key or pre-claim the dispatcher's predictable ones.
 */
export function scopedIdempotencyKey(
  options: Pick<CreateOptions, "idempotencyKey" | "idempotencyScope" | "tokenId">,
): string | null {
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
    disk_gb: input.disk_gb,
    gpu: input.gpu,
    gpu_count: input.gpu_count,
    provider: input.provider ? [input.provider] : undefined,
    max_price: input.max_price,
    template: input.template,
    limit: MAX_RENT_ATTEMPTS,
  };
}

/** A model lease's input with its sizes from the registry (what the caller gave wins). */
function sizedInput(input: LeaseInput, sizing: ModelSizing): LeaseInput {
  return {
    ...input,
    weights_gb: sizing.model.weights_gb,
    vram_gb: input.vram_gb ?? sizing.model.vram_need_gb ?? undefined,
    context_length: sizing.model.context_length ?? input.context_length,
  };
}

interface SizedCandidates {
  input: LeaseInput;
  sizing: ModelSizing | null;
  candidates: RankedOffer[];
}

/**
 * A model lease's sizing and the offers it fits, each provider's offers sized from where its
 * machines pull the model (modelSourceGroups). One rental's offers share one source, since the
 * lease keeps one model's sizes: with several (the sim's library and the registry), the source
 * whose best fitting offer ranks first; a source that cannot size the model (the registry is
 * unreachable) leaves the others. When none can, the registry's refusal is the answer.
 */
async function sizedCandidates(services: Services, input: LeaseInput): Promise<SizedCandidates | RentRefusal> {
  const named = input.offer_id ? ProviderNameSchema.safeParse(input.offer_id.split(":", 1)[0]).data : input.provider;
  const groups = input.model ? modelSourceGroups(services, named ? [named] : providerNames) : [];
  const mixed = groups.length > 1;
  const sources = mixed ? groups : [{ library: groups[0]?.library ?? null, providers: undefined }];
  const results = await Promise.all(
    sources.map(async ({ library, providers }): Promise<SizedCandidates | RentRefusal> => {
      const sizing = await sizeModelFrom(services, input, library);
      if (sizing instanceof RentRefusal) return sizing;
      const sized = sizing ? sizedInput(input, sizing) : input;
      const candidates = await candidateOffers(services, sized, sizing, providers);
      return candidates instanceof RentRefusal ? candidates : { input: sized, sizing, candidates };
    }),
  );
  const usable = results.filter((r): r is SizedCandidates => !(r instanceof RentRefusal));
  if (usable.length === 0) {
    const registry = sources.findIndex((s) => s.library === null);
    return results[Math.max(0, registry)] as RentRefusal;
  }
  return usable.sort((a, b) => compareRanked(a.candidates[0]!, b.candidates[0]!))[0]!;
}

/** The offers to try, best first, that the model (if any) fits: the one named, or the ranked offers for the filters. */
async function candidateOffers(
  services: Services,
  input: LeaseInput,
  sizing: ModelSizing | null,
  providers?: ProviderName[],
): Promise<RankedOffer[] | RentRefusal> {
  const offers = await listedCandidates(services, input, providers);
  if (offers instanceof RentRefusal || !sizing) return offers;
  const fitting = offers.filter((offer) => fitOn(sizing, offer.source) !== null);
  if (fitting.length > 0) return fitting;
  const need = sizing.model.vram_need_gb;
  return input.offer_id
    ? new RentRefusal("invalid_request", `${sizing.model.name} does not fit offer ${input.offer_id}`, {
        issues: [
          { path: "offer_id", message: `the model needs about ${need} GB of GPU memory at this context length` },
        ],
      })
    : new RentRefusal("no_capacity", `no offer fits ${sizing.model.name} (about ${need} GB of GPU memory)`);
}

async function listedCandidates(
  services: Services,
  input: LeaseInput,
  providers?: ProviderName[],
): Promise<RankedOffer[] | RentRefusal> {
  const sizing = { vram_gb: input.vram_gb, weights_gb: input.weights_gb };
  if (input.offer_id) {
    let offer: RankedOffer | null;
    try {
      offer = await findOffer(services, input.offer_id, sizing);
      // A model's need filters that listing: an offer too small for it is found without the
      // filter, and refused below as one the model does not fit rather than as unknown.
      if (!offer && input.model) offer = await findOffer(services, input.offer_id, { weights_gb: input.weights_gb });
    } catch (error) {
      return new RentRefusal("provider_error", `could not look the offer up: ${safeMessage(services, error)}`);
    }
    if (!offer) {
      return new RentRefusal(
        "invalid_request",
        `unknown offer_id "${input.offer_id}" (list offers with GET /v1/offers)`,
        {
          issues: [{ path: "offer_id", message: "no configured provider offers this" }],
        },
      );
    }
    if (!offer.templates.includes(input.template)) {
      return new RentRefusal("invalid_request", `offer ${input.offer_id} cannot run the ${input.template} template`, {
        issues: [{ path: "template", message: `this offer runs ${offer.templates.join(", ")}` }],
      });
    }
    return [offer];
  }
  const listed = await listRankedOffers(services, {
    ...offersQueryFor(input),
    ...(providers ? { provider: providers } : {}),
  });
  if (listed.offers.length === 0) {
    const why = listed.errors.map((e) => `${e.provider}: ${e.error}`).join("; ");
    return new RentRefusal("no_capacity", `no offer matches the request${why ? ` (${why})` : ""}`, {
      attempts: listed.errors.map((e) => ({ offer_id: `${e.provider}:*`, error: e.error })),
    });
  }
  return listed.offers;
}

/** How an offer's provider bills, for the worst case (from the Provider port). */
export function billingFor(
  services: Services,
  offer: Pick<RankedOffer, "provider" | "min_billed_minutes">,
  downloadS = 0,
): WorstCaseBilling {
  const provider = services.providers.get(offer.provider);
  return {
    // An unknown provider is assumed to bill while it boots: the larger worst case.
    startsAt: provider?.billingStartsAt ?? "accepted",
    minimumMinutes: Math.max(provider?.minimumBilledMinutes ?? 0, offer.min_billed_minutes),
    startTimeoutMin: services.config.startTimeoutMin,
    downloadMin: downloadS / 60,
  };
}

/** What the request's creates came to, in its own terms (the records hold the rest). */
type Tried =
  | { kind: "rented" }
  /** a stop arrived before the next create: none was sent */
  | { kind: "stopped_meanwhile" }
  /** an ambiguous create whose label lookup failed: nothing more may be sent */
  | { kind: "unknown"; error: string }
  | { kind: "failed" };

/** Tries the offers in order; every create is on record before it is sent, its outcome after. */
async function tryOffers(
  services: Services,
  lease: LeaseRow,
  offers: readonly PlannedOffer[],
  spec: MachineSpec,
): Promise<{ tried: Tried; events: NewEvent[] }> {
  const startedAt = services.clock();
  const events: NewEvent[] = [];
  for (const { offer } of offers) {
    if (services.clock() - startedAt > RENT_DEADLINE_MS) {
      events.push({ kind: "rent_deadline", detail: "no time left in this request for further offers" });
      break;
    }
    const provider = services.providers.get(offer.provider);
    if (!provider) {
      events.push({ kind: "rent_attempt_failed", detail: `${offer.offer_id}: ${offer.provider} is not configured` });
      continue;
    }
    const sentAt = iso(services.clock());
    const record = await writeAheadCreate(services.db, lease.id, {
      provider: offer.provider,
      offer_id: offer.offer_id,
      sent_at: sentAt,
      offer: {
        gpu: offer.gpu,
        gpu_count: offer.gpu_count,
        vram_gb: offer.vram_gb,
        price_per_hour: offer.price_per_hour,
        currency: offer.currency,
        min_billed_minutes: offer.min_billed_minutes,
        billing_starts_at: provider.billingStartsAt,
        image: lease.spec.image,
        // A model lease may take as long to start as its weights take to arrive.
        download_s: lease.spec.model ? offer.load_time_s : 0,
      },
    });
    if (record === null) {
      events.push({ kind: "rent_interrupted", detail: "a stop arrived while renting: no further create is sent" });
      return { tried: { kind: "stopped_meanwhile" }, events };
    }
    const { seq } = record;
    const result = await provider
      .rent(offer.source, spec)
      .catch((error: unknown) => ({ ok: false, kind: "ambiguous", error: safeMessage(services, error) }) as const);
    const at = iso(services.clock());
    if (result.ok) {
      const machine = {
        provider: offer.provider,
        ref: result.ref,
        price_per_hour: result.price_per_hour,
        currency: offer.currency,
        billed_from: sentAt,
        detail: "the create answered",
      };
      await claimMachine(services.db, lease.id, machine, at, seq);
      return { tried: { kind: "rented" }, events };
    }
    const error = scrubText(result.error, secretsOf(services.config));
    if (result.kind !== "ambiguous") {
      await resolveNone(services.db, lease.id, seq, `${result.kind}: ${error}`, at);
      events.push({ kind: "rent_attempt_failed", detail: `${offer.offer_id}: ${result.kind}: ${error}` });
      continue;
    }
    // A create that may have made a machine: look the label up before anything else is sent.
    await noteUnresolved(services.db, lease.id, seq, `ambiguous: ${error}`);
    events.push({ kind: "rent_ambiguous", detail: `${offer.offer_id}: ${error}; looking the label up` });
    const found = await findMachine(services, provider, lease, record);
    if (found.kind === "found") {
      events.push({ kind: "machine_found", detail: `found ${found.ref} by its label` });
      return { tried: { kind: "rented" }, events };
    }
    if (found.kind === "failed") {
      return { tried: { kind: "unknown", error: `${error}; the label lookup failed: ${found.error}` }, events };
    }
    // Nothing carries the label yet: the create stays unresolved for the keeper, and the next
    // offer is tried (its machine, should one appear, is torn down as the lease's other machine).
  }
  return { tried: { kind: "failed" }, events };
}

type Found = { kind: "found"; ref: string } | { kind: "none" } | { kind: "failed"; error: string };

/** Looks for a machine of this lease no create has claimed yet, twice (listings lag). */
async function findMachine(
  services: Services,
  provider: Provider,
  lease: LeaseRow,
  create: CreateRecord,
): Promise<Found> {
  for (let attempt = 0; attempt < 2; attempt++) {
    if (attempt > 0) await services.sleep(LABEL_LOOKUP_RETRY_MS);
    const lookup = await lookupMachines(services, provider, lease, create);
    if (!lookup.ok) return { kind: "failed", error: lookup.error };
    for (const machine of lookup.machines) {
      const at = iso(services.clock());
      const claim = await claimFound(
        services.db,
        provider,
        lease.id,
        create,
        machine,
        "found by the rent's label lookup",
        at,
      );
      if (claim.kind === "claimed") return { kind: "found", ref: machine.ref };
    }
  }
  return { kind: "none" };
}

/**
 * Hands the outcome to the keeper, which settles the lease from its create records, and turns
 * the settled lease into the request's answer. A keeper that cannot be reached now settles the
 * lease at its next alarm (armed before the first create): the machine is on record either way.
 */
async function answer(
  services: Services,
  lease: LeaseRow,
  { tried, events }: { tried: Tried; events: NewEvent[] },
): Promise<RentOutcome> {
  const error =
    tried.kind === "unknown"
      ? `the rental's outcome is unknown: ${tried.error}`
      : tried.kind === "failed"
        ? "no offer could be rented"
        : null;
  let settled: Settled | null;
  try {
    settled = await services.keepers.settle(lease.id, { error, events });
  } catch (failure) {
    await appendEvents(services.db, lease.id, iso(services.clock()), [
      ...events,
      { kind: "keeper_start_failed", detail: `${safeMessage(services, failure)}; its next alarm settles the lease` },
    ]).catch(() => undefined);
    settled = await readSettled(services.db, lease.id);
  }
  // The creates the settlement read, when it committed: no second read for the answer.
  const creates = async () => settled?.creates ?? (await listCreates(services.db, lease.id));
  if (tried.kind === "rented" || tried.kind === "stopped_meanwhile")
    return { ok: true, lease: toLease(settled?.lease ?? lease, await creates()), created: true };
  if (tried.kind === "unknown") {
    return {
      ok: false,
      refusal: new RentRefusal("provider_error", `${error}; the lease is being torn down`, { lease_id: lease.id }),
    };
  }
  const attempts = attemptsOf(await creates());
  return {
    ok: false,
    refusal: new RentRefusal("no_capacity", `${error}: every attempt was refused`, { attempts, lease_id: lease.id }),
  };
}

/** The lease as the API shows it, with its create records. */
async function leaseView(services: Services, row: LeaseRow) {
  return toLease(row, await listCreates(services.db, row.id));
}

/** What the row keeps of the request (never the call-back token). */
function storedSpec(input: LeaseInput, ollamaImage: string, model: StoredModel | null): StoredSpec {
  const weights = input.weights_gb ?? input.vram_gb ?? 0;
  return {
    image: input.image ?? (input.template === "ollama" ? ollamaImage : null),
    cmd: input.cmd ?? null,
    env: input.env ?? {},
    ports: portsFor(input),
    disk_gb: input.disk_gb ?? Math.max(40, Math.ceil(weights * 2) + 20),
    weights_gb: weights,
    context_length: input.context_length ?? null,
    min_billed_minutes: 0,
    model,
    download_s: 0,
    idle_minutes: input.idle_minutes ?? null,
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
  stored: StoredSpec,
  callbackEnv: Record<string, string>,
): MachineSpec {
  return {
    label,
    template: input.template,
    image: stored.image ?? "",
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
