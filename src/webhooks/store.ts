import { z } from "@hono/zod-openapi";
import { iso } from "../lib/time";
import { WebhookEventTypeSchema } from "./events";

export const WebhookFormatSchema = z.enum(["json", "slack"]).openapi("WebhookFormat");

export const WebhookSchema = z
  .object({
    id: z.string().openapi({ example: "whk_01jb3k8x0m4q7r2s5t6v9w" }),
    url: z.string().openapi({ example: "https://hooks.example.com/gpulease" }),
    events: z.array(z.union([WebhookEventTypeSchema, z.literal("*")])).openapi({ example: ["lease.stopped"] }),
    format: WebhookFormatSchema,
    created_at: z.string().openapi({ example: "2026-11-29T02:00:00.000Z" }),
  })
  .openapi("Webhook");
export type Webhook = z.infer<typeof WebhookSchema>;

const WebhookRowSchema = WebhookSchema.extend({
  events: z.string().transform((text) => WebhookSchema.shape.events.parse(JSON.parse(text))),
});

export const DeliverySchema = z
  .object({
    id: z.string().openapi({ example: "dlv_5f0c2a9e4b7d1c3e8a6f0b2d" }),
    event: WebhookEventTypeSchema,
    event_id: z.string().openapi({ example: "evt_01jb3k8x0m4q7r2s5t6v9w" }),
    status: z.enum(["pending", "delivered", "failed"]),
    attempts: z.number().int().openapi({ example: 1 }),
    last_status_code: z.number().int().nullable().openapi({ example: 200 }),
    last_error: z.string().nullable().openapi({ example: null }),
    next_attempt_at: z.string().nullable().openapi({ description: "while pending", example: null }),
    created_at: z.string().openapi({ example: "2026-11-29T02:00:00.000Z" }),
    delivered_at: z.string().nullable().openapi({ example: "2026-11-29T02:00:01.000Z" }),
  })
  .openapi("WebhookDelivery");
export type Delivery = z.infer<typeof DeliverySchema>;

export interface NewWebhook {
  id: string;
  url: string;
  events: Webhook["events"];
  format: Webhook["format"];
  sealedSecret: string;
  createdAt: number;
}

export async function insertWebhook(db: D1Database, hook: NewWebhook): Promise<Webhook> {
  const row = await db
    .prepare(
      "INSERT INTO webhooks (id, url, events, format, secret, created_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING id, url, events, format, created_at",
    )
    .bind(hook.id, hook.url, JSON.stringify(hook.events), hook.format, hook.sealedSecret, iso(hook.createdAt))
    .first();
  return WebhookRowSchema.parse(row);
}

export async function listWebhooks(db: D1Database): Promise<Webhook[]> {
  const { results } = await db
    .prepare("SELECT id, url, events, format, created_at FROM webhooks ORDER BY created_at DESC, id DESC")
    .all();
  return results.map((row) => WebhookRowSchema.parse(row));
}

export async function webhookExists(db: D1Database, id: string): Promise<boolean> {
  return (await db.prepare("SELECT 1 AS one FROM webhooks WHERE id = ?").bind(id).first()) !== null;
}

/** Deletes the webhook with its pending and past deliveries; false when there was none. */
export async function deleteWebhook(db: D1Database, id: string): Promise<boolean> {
  const [, removed] = await db.batch([
    db.prepare("DELETE FROM webhook_deliveries WHERE webhook_id = ?").bind(id),
    db.prepare("DELETE FROM webhooks WHERE id = ?").bind(id),
  ]);
  return (removed?.meta.changes ?? 0) > 0;
}

const DeliveryRowSchema = z.object({
  id: z.string(),
  event: WebhookEventTypeSchema,
  event_id: z.string(),
  status: DeliverySchema.shape.status,
  attempts: z.number().int(),
  last_status_code: z.number().int().nullable(),
  last_error: z.string().nullable(),
  next_attempt_at: z.number().nullable(),
  created_at: z.string(),
  delivered_at: z.string().nullable(),
});

/** The webhook's deliveries, newest first. */
export async function listDeliveries(db: D1Database, webhookId: string, limit: number): Promise<Delivery[]> {
  const { results } = await db
    .prepare(
      `SELECT d.id, e.type AS event, d.event_id, d.status, d.attempts, d.last_status_code, d.last_error,
              d.next_attempt_at, d.created_at, d.delivered_at
       FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
       WHERE d.webhook_id = ? ORDER BY d.created_at DESC, d.id DESC LIMIT ?`,
    )
    .bind(webhookId, limit)
    .all();
  return results.map((raw) => {
    const row = DeliveryRowSchema.parse(raw);
    const pending = row.status === "pending" && row.next_attempt_at !== null;
    return { ...row, next_attempt_at: pending ? iso(row.next_attempt_at as number) : null };
  });
}
