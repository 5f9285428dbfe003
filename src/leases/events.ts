import { z } from "@hono/zod-openapi";

/**
 * Every kind of lease event the worker writes: the one list. The ledger's `NewEvent`, the API's
 * `LeaseEvent`, the webhook map (src/webhooks/events.ts), the dashboard and the CLI (through the
 * generated client) all take their kinds from here, so a new kind is added here first.
 */
export const leaseEventKinds = [
  // renting (src/leases/rent.ts, rental.ts)
  "created",
  "rent_attempt_failed",
  "rent_ambiguous",
  "rent_deadline",
  "rent_interrupted",
  "rented",
  "machine_found",
  "create_unresolved",
  "keeper_start_failed",
  // coming up and running (src/keeper)
  "booting",
  "waiting_for_ollama",
  "pulling",
  "loading",
  "running",
  "machine_state",
  "status_failed",
  "provider_not_configured",
  "gone_unconfirmed",
  "price_updated",
  "inference_key_rotated",
  "usage_dropped",
  "billing_drift",
  // stopping and teardown (src/keeper)
  "stop_requested",
  "start_failed",
  "machine_died",
  "terminate_sent",
  "terminate_failed",
  "teardown_waiting",
  "verify_failed",
  "machine_gone",
  "stopped",
  "teardown_unverified",
  // schedules (src/schedules)
  "schedule_run",
  "schedule_run_skipped",
  // the reaper (src/reaper): `reaper_` and its action's kind
  "reaper_adopt",
  "reaper_claim",
  "reaper_reopen",
  "reaper_reconcile",
  "reaper_rearm",
  "reaper_stop_overdue",
  "reaper_budget_stop",
  "reaper_stop_all",
] as const;

export const LeaseEventKindSchema = z.enum(leaseEventKinds).openapi("LeaseEventKind", {
  description: "what happened; events written by an older version may carry a kind no longer in this list",
});
export type LeaseEventKind = z.infer<typeof LeaseEventKindSchema>;
