import { z } from "@hono/zod-openapi";

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
  kind: string;
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
    default:
      return [];
  }
}
