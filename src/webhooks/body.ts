import type { Lease } from "../leases/schema";
import type { WebhookEventType } from "./events";

/** Every `env` object anywhere in the data shows its keys with the value "***". */
export function maskEnv(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(maskEnv);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.entries(value).map(([key, inner]) =>
      key === "env" && inner !== null && typeof inner === "object" && !Array.isArray(inner)
        ? [key, Object.fromEntries(Object.keys(inner).map((name) => [name, "***"]))]
        : [key, maskEnv(inner)],
    ),
  );
}

/**
 * Replaces every worker secret, and anything shaped like a webhook secret or an API token, in
 * the serialized body (defence in depth: event details may quote text from elsewhere).
 */
export function withoutSecrets(text: string, secrets: readonly (string | null)[]): string {
  let out = text;
  for (const secret of secrets) if (secret && secret.length >= 4) out = out.split(secret).join("[redacted]");
  return out.replace(/\b(whsec|gl)_[A-Za-z0-9_+/=-]{8,}/g, "[redacted]");
}

export interface RenderedEvent {
  id: string;
  type: WebhookEventType;
  created_at: string;
  data: Record<string, unknown>;
}

/** The JSON body: `{"id", "type", "created_at", "data"}`. */
export function jsonBody(event: RenderedEvent): string {
  return JSON.stringify({ id: event.id, type: event.type, created_at: event.created_at, data: event.data });
}

const headline: Record<WebhookEventType, string> = {
  "lease.running": "is running",
  "lease.cap_reached": "reached its cap and is stopping",
  "lease.stopped": "stopped",
  "lease.rent_failed": "could not be rented",
  "lease.start_failed": "failed to start",
  "lease.teardown_unverified": "TEARDOWN NOT VERIFIED: the machine may still be running and billing",
  "lease.price_updated": "has a new price",
  "reaper.orphan_found": "orphan machine found by the reaper; tearing it down",
  "budget.exceeded": "budget exceeded: active leases are being stopped",
  "schedule.skipped": "schedule run skipped",
  "schedule.failed": "schedule run failed",
  "endpoint.replica_started": "endpoint replica started",
  "endpoint.replica_stopped": "endpoint replica stopped",
  "endpoint.replica_replaced": "endpoint replica lost; another is rented",
  "endpoint.breaker_open": "endpoint breaker open: replica starts keep failing",
  ping: "test delivery: this webhook works",
};

/**
 * Text as Slack documents escaping it (api.slack.com "Formatting text for app surfaces"): `&`,
 * `<` and `>` as entities, so a lease name or an error cannot ping a channel (`<!channel>`) or
 * show one link for another (`<https://evil|https://runpod.io>`).
 */
function slackEscaped(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

/** The Slack-compatible body: one line a person reads. */
export function slackBody(event: RenderedEvent): string {
  const lease = event.data.lease as Partial<Lease> | undefined;
  const parts: string[] = ["gpulease:"];
  if (lease?.id) {
    const what = [lease.name, lease.gpu, lease.provider].filter(Boolean).join(", ");
    parts.push(`lease ${lease.id}${what ? ` (${what})` : ""} ${headline[event.type]}`);
    if (typeof lease.cost === "number") parts.push(`— cost ${lease.cost} ${lease.currency ?? "USD"}`);
  } else {
    parts.push(headline[event.type]);
  }
  const detail = event.data.detail;
  if (typeof detail === "string" && detail) parts.push(`— ${detail}`);
  return JSON.stringify({ text: slackEscaped(parts.join(" ")) });
}
