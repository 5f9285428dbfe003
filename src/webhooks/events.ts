import { z } from "@hono/zod-openapi";
import type { LeaseEventKind } from "../leases/events";

export const webhookEventTypes = [
  "lease.running",
  "lease.cap_reached",
  "lease.stopped",
  "lease.rent_failed",
  "lease.start_failed",
  "lease.teardown_unverified",
  "lease.price_updated",
  "reaper.orphan_found",
  "budget.exceeded",
  "schedule.skipped",
  "schedule.failed",
  "endpoint.replica_started",
  "endpoint.replica_stopped",
  "endpoint.replica_replaced",
  "endpoint.breaker_open",
  "ping",
] as const;
export const WebhookEventTypeSchema = z.enum(webhookEventTypes).openapi("WebhookEventType");
export type WebhookEventType = z.infer<typeof WebhookEventTypeSchema>;

/** A lease event as the ledger writes it (kind, detail, and its structured reason). */
export interface LedgerEvent {
  kind: LeaseEventKind;
  detail?: string | null;
  reason?: string | null;
}

/** Stop reasons that are a cap the user set, announced as lease.cap_reached. */
const CAP_REASONS: readonly (string | null | undefined)[] = ["max_minutes", "max_cost"];

/**
 * The one map from lease event kinds to webhook event types. Most kinds map one to one; a stop
 * request is a cap only when its detail names a cap, and a stop that ends a failed rental is
 * both lease.rent_failed and lease.stopped.
 */
export function webhookTypesFor(event: LedgerEvent): WebhookEventType[] {
  // By the structured reason only: the human `detail` is never parsed.
  const reason = event.reason ?? null;
  switch (event.kind) {
    case "running":
      return ["lease.running"];
    case "stop_requested":
      if (CAP_REASONS.includes(reason)) return ["lease.cap_reached"];
      if (reason === "start_timeout") return ["lease.start_failed"];
      if (reason === "rent_failed") return ["lease.rent_failed"];
      return [];
    case "stopped":
      return reason === "rent_failed" ? ["lease.rent_failed", "lease.stopped"] : ["lease.stopped"];
    case "start_failed":
      return ["lease.start_failed"];
    case "teardown_unverified":
      return ["lease.teardown_unverified"];
    case "price_updated":
      return ["lease.price_updated"];
    case "reaper_adopt":
      return ["reaper.orphan_found"];
    // Kinds no webhook announces: listed so that a new kind is a compile error until it is placed.
    case "created":
    case "rent_attempt_failed":
    case "rent_ambiguous":
    case "rent_deadline":
    case "rent_interrupted":
    case "rented":
    case "machine_found":
    case "create_unresolved":
    case "keeper_start_failed":
    case "booting":
    case "waiting_for_ollama":
    case "pulling":
    case "loading":
    case "machine_state":
    case "status_failed":
    case "provider_not_configured":
    case "gone_unconfirmed":
    case "inference_key_rotated":
    case "usage_dropped":
    case "billing_drift":
    case "machine_died":
    case "terminate_sent":
    case "terminate_failed":
    case "teardown_waiting":
    case "verify_failed":
    case "machine_gone":
    case "schedule_run":
    case "schedule_run_skipped":
    case "reaper_claim":
    case "reaper_reopen":
    case "reaper_reconcile":
    case "reaper_rearm":
    case "reaper_stop_overdue":
    case "reaper_budget_stop":
    case "reaper_stop_all":
      return [];
    default:
      event.kind satisfies never;
      return [];
  }
}
