import type { Lease } from "./schema";

/** Why the rent path refused a rental, in its own terms; the HTTP edge maps each to a status. */
export type RentRefusalCode =
  | "invalid_request"
  | "budget_exceeded"
  | "limit_reached"
  | "no_capacity"
  | "provider_error";

/** A refused rental: what a route answers and what the dispatcher branches on. */
export class RentRefusal extends Error {
  constructor(
    readonly code: RentRefusalCode,
    message: string,
    /** fields for the caller: `lease_id`, `attempts`, `issues` */
    readonly detail: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = "RentRefusal";
  }

  /** the lease the refused rental left behind (stopped or being torn down), if one was written */
  get leaseId(): string | null {
    return typeof this.detail.lease_id === "string" ? this.detail.lease_id : null;
  }
}

/** The outcome of a rental: the lease (`created` false for a repeated idempotency key), or why not. */
export type RentOutcome =
  /** `inferenceKey`: a new model lease's key, answered once (stored hashed) */
  { ok: true; lease: Lease; created: boolean; inferenceKey?: string } | { ok: false; refusal: RentRefusal };
