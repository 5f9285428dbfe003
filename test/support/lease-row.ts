import type { LeaseRow } from "../../src/leases/ledger";

/**
 * A ledger row for the pure suites (no D1): a running custom-image lease at RunPod, 1 USD an
 * hour for at most 60 minutes, with `over` on top. Each suite sets what its cases are about.
 */
export function leaseRow(over: Partial<LeaseRow> = {}): LeaseRow {
  const id = over.id ?? "lse_0000000000000000000001";
  return {
    id,
    name: null,
    status: "running",
    provider: "runpod",
    provider_ref: "m1",
    label: `gpulease-${id}`,
    offer_id: null,
    gpu: null,
    gpu_count: 1,
    vram_gb: 24,
    price_per_hour: 1,
    currency: "USD",
    template: "custom",
    spec: {
      image: "x",
      cmd: null,
      env: {},
      ports: [],
      disk_gb: 40,
      weights_gb: 0,
      context_length: null,
      min_billed_minutes: 0,
      model: null,
      download_s: 0,
    },
    max_minutes: 60,
    max_cost: null,
    expected_cost: null,
    cost: 0,
    access: null,
    error: null,
    stop_reason: null,
    exit_code: null,
    schedule_id: null,
    token_id: null,
    idempotency_key: null,
    callback_hash: null,
    attempts: null,
    created_at: "2031-03-01T00:00:00.000Z",
    rented_at: null,
    running_at: null,
    stop_requested_at: null,
    stopped_at: null,
    teardown_verified_at: null,
    strays_cost: 0,
    inference_key_hash: null,
    inference_key_sealed: null,
    billing_starts_at: null,
    revision: 0,
    ...over,
  };
}
