import { type CreateOffer, type CreateRecord, CreateRecordSchema } from "../../src/leases/create-records";

/** What a create asked for: a 1× RTX 4090 at RunPod at 0.69 USD an hour, with `over` on top. */
export const createOffer = (over: Partial<CreateOffer> = {}): CreateOffer => ({
  gpu: "RTX 4090",
  gpu_count: 1,
  vram_gb: 24,
  price_per_hour: 0.69,
  currency: "USD",
  min_billed_minutes: 0,
  billing_starts_at: "accepted",
  image: null,
  download_s: 0,
  ...over,
});

export type CreateOver = Partial<Omit<CreateRecord, "offer">> & { offer?: Partial<CreateOffer> };

/**
 * A create record for the pure suites, parsed as a `lease_creates` row is (so it has the shape
 * the keeper reads): create 1 of the default test lease, sent at `2031-03-01T00:00:00Z`, unresolved.
 */
export function createRecord(over: CreateOver = {}): CreateRecord {
  const { offer, ...rest } = over;
  return CreateRecordSchema.parse({
    lease_id: "lse_0000000000000000000001",
    seq: 1,
    provider: "runpod",
    offer_id: "runpod:SECURE:RTX 4090:1",
    sent_at: "2031-03-01T00:00:00.000Z",
    origin: "rent",
    resolution: "unresolved",
    detail: null,
    provider_ref: null,
    price_per_hour: null,
    billed_from: null,
    resolved_at: null,
    terminate_sent_at: null,
    terminates_sent: 0,
    gone_reads: 0,
    gone_at: null,
    cost: 0,
    ...rest,
    offer: JSON.stringify(createOffer(offer)),
  });
}

/** A create that made machine `ref`, billed from its sending unless `over` says otherwise. */
export const machineCreate = (ref: string, over: CreateOver = {}): CreateRecord =>
  createRecord({
    resolution: "machine",
    provider_ref: ref,
    detail: "the create answered",
    billed_from: over.sent_at ?? "2031-03-01T00:00:00.000Z",
    resolved_at: over.sent_at ?? "2031-03-01T00:00:00.000Z",
    ...over,
  });

/** A create answered definitely: it made nothing. */
export const noneCreate = (detail: string, over: CreateOver = {}): CreateRecord =>
  createRecord({ resolution: "none", detail, resolved_at: over.sent_at ?? "2031-03-01T00:00:00.000Z", ...over });
