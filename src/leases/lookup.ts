import type { Config } from "../config";
import { scrubError } from "../lib/scrub";
import { iso, ms } from "../lib/time";
import type { OwnMachine, Provider } from "../providers/types";
import { type ClaimOutcome, type CreateRecord, claimMachine, competingCreates, knownRefs } from "./create-records";

/** Records this long before a create may still name a machine that looks like its own. */
const KNOWN_REFS_WINDOW_MS = 3_600_000;

export type MachineLookup =
  /** `note`: how a machine that could not be told apart from another create's was assigned */
  { ok: true; machines: OwnMachine[]; note?: string } | { ok: false; error: string };

/**
 * The live machines at `provider` that a create of this lease may have made. A labelled provider
 * lists every machine carrying the lease's label (two creates there make two machines under one
 * label); a listing cut short or partial (a state not listed) proves nothing, so it is a failed lookup. A provider without labels
 * matches the create's fingerprint (card, count, image, made after it was sent), never a machine
 * the ledger holds, and refuses while another lease's create could have made the same one.
 */
export async function lookupMachines(
  services: { db: D1Database; config: Config },
  provider: Provider,
  lease: { label: string },
  create: CreateRecord,
  options: { settle?: boolean } = {},
): Promise<MachineLookup> {
  const { db, config } = services;
  try {
    if (provider.labelled) {
      const listing = await provider.listOwn(config.labelPrefix, []);
      if (listing.next !== null) return { ok: false, error: "the listing was cut short: not every machine was seen" };
      if (listing.partial) return { ok: false, error: listing.partial };
      return {
        ok: true,
        machines: listing.machines.filter((m) => m.label === lease.label && m.state !== "gone"),
      };
    }
    const since = iso(ms(create.sent_at) - KNOWN_REFS_WINDOW_MS);
    const competing = await competingCreates(db, create, since);
    const settle = options.settle === true ? { older: competing.older } : undefined;
    const machine = await provider.findByLabel(lease.label, {
      createdAfter: create.sent_at,
      offerId: create.offer_id,
      image: create.offer.image,
      knownRefs: await knownRefs(db, provider.name, since),
      competing: competing.count,
      ...(settle ? { settle } : {}),
    });
    const machines = machine && machine.state !== "gone" ? [machine] : [];
    if (settle && competing.count > 0 && machines.length > 0) {
      const note = `it could not be told apart from ${competing.count} other lease(s)' create with the same card, count and image: it is torn down and billed to this lease, the ${ordinal(competing.older + 1)} of them to send it`;
      return { ok: true, machines, note };
    }
    return { ok: true, machines };
  } catch (error) {
    return { ok: false, error: scrubError(config, error) };
  }
}

/** When a found machine began to bill: its creation as the provider lists it, else the create's sending. */
export function billedFromOf(machine: Pick<OwnMachine, "created_at">, create: Pick<CreateRecord, "sent_at">): string {
  const created = machine.created_at ? Date.parse(machine.created_at) : Number.NaN;
  return Number.isFinite(created) ? iso(created) : create.sent_at;
}

/**
 * Claims a machine a lookup for `create` found: on that create at a provider without labels
 * (the fingerprint was its own), else on the lease's earliest unresolved create there.
 */
export function claimFound(
  db: D1Database,
  provider: Provider,
  leaseId: string,
  create: CreateRecord,
  machine: OwnMachine,
  detail: string,
  at: string,
): Promise<ClaimOutcome> {
  const found = {
    provider: provider.name,
    ref: machine.ref,
    price_per_hour: machine.price_per_hour,
    billed_from: billedFromOf(machine, create),
    detail,
    currency: provider.currency,
  };
  return claimMachine(db, leaseId, found, at, provider.labelled ? null : create.seq);
}

const ordinal = (n: number): string => {
  const tens = n % 100;
  const suffix = tens >= 11 && tens <= 13 ? "th" : (["th", "st", "nd", "rd"][n % 10] ?? "th");
  return `${n}${suffix}`;
};
