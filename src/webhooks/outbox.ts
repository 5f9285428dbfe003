import { newId } from "../lib/ids";
import { iso } from "../lib/time";
import { type LedgerEvent, type WebhookEventType, webhookTypesFor } from "./events";

/** The first retry comes this soon after a failure (README § Webhooks: within a minute). */
export const FIRST_RETRY_MS = 30_000;
/** Backoff doubles up to this gap between tries. */
export const MAX_RETRY_GAP_MS = 4 * 3_600_000;
/** A delivery is retried for at least this long after its event before it is `failed`. */
export const RETRY_FOR_MS = 24 * 3_600_000;
/** A claimed delivery is not claimed again for this long (covers the 10 s attempt and a crash). */
export const CLAIM_MS = 60_000;

/** Gap before the next try after `attempts` failed tries: 30 s, 1 min, 2 min, … capped at 4 h. */
export function retryGapMs(attempts: number): number {
  return Math.min(FIRST_RETRY_MS * 2 ** Math.max(0, attempts - 1), MAX_RETRY_GAP_MS);
}

/** What a failed try leads to: another one later, or `failed` once the event is 24 h old. */
export function afterFailure(
  createdAtMs: number,
  attempts: number,
  nowMs: number,
): { status: "pending"; nextAttemptAt: number } | { status: "failed" } {
  if (nowMs - createdAtMs >= RETRY_FOR_MS) return { status: "failed" };
  return { status: "pending", nextAttemptAt: nowMs + retryGapMs(attempts) };
}

/** An event for the outbox. `data` null: rendered from the lease row on its first send. */
export interface OutboxEvent {
  type: WebhookEventType;
  leaseId: string | null;
  detail: string | null;
  data: Record<string, unknown> | null;
}

// A webhook wants a type when its `events` list holds it or "*".
const WANTS = "EXISTS (SELECT 1 FROM json_each(w.events) WHERE json_each.value IN ('*', ?))";

/**
 * The statements that put one event in the outbox: the event (only if some webhook wants it) and
 * one pending delivery per such webhook. Meant for the batch that writes what caused the event,
 * so the event and its deliveries commit or fail with it.
 */
export function enqueueStatements(db: D1Database, event: OutboxEvent, nowMs: number): D1PreparedStatement[] {
  const id = newId("evt", nowMs);
  const at = iso(nowMs);
  return [
    db
      .prepare(
        `INSERT INTO webhook_events (id, type, lease_id, detail, data, created_at)
         SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM webhooks w WHERE ${WANTS})`,
      )
      .bind(
        id,
        event.type,
        event.leaseId,
        event.detail,
        event.data ? JSON.stringify(event.data) : null,
        at,
        event.type,
      ),
    db
      .prepare(
        `INSERT INTO webhook_deliveries (id, webhook_id, event_id, next_attempt_at, created_at)
         SELECT 'dlv_' || lower(hex(randomblob(12))), w.id, ?, ?, ? FROM webhooks w WHERE ${WANTS}`,
      )
      .bind(id, nowMs, at, event.type),
  ];
}

/** The outbox statements for a batch of lease events (see webhookTypesFor); often none. */
export function leaseEventStatements(
  db: D1Database,
  leaseId: string,
  events: readonly LedgerEvent[],
  nowMs: number,
): D1PreparedStatement[] {
  return events.flatMap((event) =>
    webhookTypesFor(event).flatMap((type) =>
      enqueueStatements(db, { type, leaseId, detail: event.detail ?? null, data: null }, nowMs),
    ),
  );
}

/** True when any of these lease events is announced to webhooks (the keeper then wakes the sender). */
export function announces(events: readonly LedgerEvent[]): boolean {
  return events.some((event) => webhookTypesFor(event).length > 0);
}

/** Puts a non-lease event (budget, schedule) in the outbox on its own. */
export async function enqueue(db: D1Database, event: OutboxEvent, nowMs: number): Promise<void> {
  await db.batch(enqueueStatements(db, event, nowMs));
}

/** A `ping` for one webhook, whatever its `events` list says. Returns the delivery id. */
export async function enqueuePing(db: D1Database, webhookId: string, nowMs: number): Promise<string> {
  const eventId = newId("evt", nowMs);
  const deliveryId = newId("dlv", nowMs);
  const at = iso(nowMs);
  await db.batch([
    db
      .prepare(
        "INSERT INTO webhook_events (id, type, lease_id, detail, data, created_at) VALUES (?, 'ping', NULL, ?, ?, ?)",
      )
      .bind(eventId, "a test delivery", JSON.stringify({ webhook_id: webhookId }), at),
    db
      .prepare(
        "INSERT INTO webhook_deliveries (id, webhook_id, event_id, next_attempt_at, created_at) VALUES (?, ?, ?, ?, ?)",
      )
      .bind(deliveryId, webhookId, eventId, nowMs, at),
  ]);
  return deliveryId;
}

/** A claimed delivery with what sending it needs. */
export interface DueDelivery {
  id: string;
  attempts: number;
  created_at: string;
  event_id: string;
  type: WebhookEventType;
  lease_id: string | null;
  detail: string | null;
  data: string | null;
  event_created_at: string;
  url: string;
  format: "json" | "slack";
  secret: string;
}

/**
 * Claims up to `limit` due deliveries: their attempt is counted and they are hidden for CLAIM_MS,
 * so a crash mid-send only delays the retry (at-least-once) and two senders never share one.
 */
export async function claimDue(db: D1Database, nowMs: number, limit: number): Promise<DueDelivery[]> {
  const claimed = await db
    .prepare(
      `UPDATE webhook_deliveries SET attempts = attempts + 1, next_attempt_at = ?
       WHERE id IN (SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= ?
                    ORDER BY next_attempt_at LIMIT ?)
       RETURNING id`,
    )
    .bind(nowMs + CLAIM_MS, nowMs, limit)
    .all<{ id: string }>();
  const ids = claimed.results.map((r) => r.id);
  if (ids.length === 0) return [];
  const { results } = await db
    .prepare(
      `SELECT d.id, d.attempts, d.created_at, e.id AS event_id, e.type, e.lease_id, e.detail, e.data,
              e.created_at AS event_created_at, w.url, w.format, w.secret
       FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id JOIN webhooks w ON w.id = d.webhook_id
       WHERE d.id IN (${ids.map(() => "?").join(", ")})`,
    )
    .bind(...ids)
    .all<DueDelivery>();
  return results;
}

/** Freezes an event's rendered `data` so every retry and every webhook sends the same. */
export async function freezeEventData(db: D1Database, eventId: string, data: string): Promise<string> {
  const row = await db
    .prepare("UPDATE webhook_events SET data = COALESCE(data, ?) WHERE id = ? RETURNING data")
    .bind(data, eventId)
    .first<{ data: string }>();
  return row?.data ?? data;
}

export type AttemptOutcome = { ok: true; statusCode: number } | { ok: false; statusCode: number | null; error: string };

/** Records one try: delivered, or pending with its next time, or failed after 24 h. */
export async function recordAttempt(
  db: D1Database,
  delivery: Pick<DueDelivery, "id" | "attempts" | "created_at">,
  outcome: AttemptOutcome,
  nowMs: number,
): Promise<void> {
  if (outcome.ok) {
    await db
      .prepare(
        "UPDATE webhook_deliveries SET status = 'delivered', last_status_code = ?, last_error = NULL, delivered_at = ? WHERE id = ?",
      )
      .bind(outcome.statusCode, iso(nowMs), delivery.id)
      .run();
    return;
  }
  const next = afterFailure(Date.parse(delivery.created_at), delivery.attempts, nowMs);
  await db
    .prepare(
      "UPDATE webhook_deliveries SET status = ?, next_attempt_at = ?, last_status_code = ?, last_error = ? WHERE id = ?",
    )
    .bind(
      next.status,
      next.status === "pending" ? next.nextAttemptAt : nowMs,
      outcome.statusCode,
      outcome.error.slice(0, 300),
      delivery.id,
    )
    .run();
}

/** When the next pending delivery is due (ms), or null when the outbox is empty. */
export async function nextDueAt(db: D1Database): Promise<number | null> {
  const row = await db
    .prepare("SELECT MIN(next_attempt_at) AS at FROM webhook_deliveries WHERE status = 'pending'")
    .first<{ at: number | null }>();
  return row?.at ?? null;
}

/** budget.exceeded: which budget, how far, and how many leases are being stopped. */
export function budgetEvent(
  breach: { period: "daily" | "monthly"; budgetUsd: number; amountUsd: number },
  detail: string,
  stopping: number,
): OutboxEvent {
  return {
    type: "budget.exceeded",
    leaseId: null,
    detail,
    data: {
      budget: { period: breach.period, budget_usd: breach.budgetUsd, spent_usd: breach.amountUsd },
      stopping_leases: stopping,
      detail,
    },
  };
}

/** schedule.skipped / schedule.failed: the schedule, the run's due time and why. */
export function scheduleEvent(
  status: "skipped" | "failed",
  schedule: { id: string; name: string },
  dueAt: string,
  detail: string | null,
  leaseId: string | null,
): OutboxEvent {
  return {
    type: status === "skipped" ? "schedule.skipped" : "schedule.failed",
    leaseId,
    detail,
    data: { schedule: { id: schedule.id, name: schedule.name }, due_at: dueAt, lease_id: leaseId, detail },
  };
}
