import { createRoute, z } from "@hono/zod-openapi";
import { ApiError, errorResponses } from "../errors";
import { idPattern, newId } from "../lib/ids";
import { bearerSecurity, createRouter, idParams, jsonResponse, limitQuery } from "../router";
import { WebhookEventTypeSchema } from "./events";
import { enqueuePing } from "./outbox";
import { newWebhookSecret, sealSecret } from "./secrets";
import {
  DeliverySchema,
  deleteWebhook,
  insertWebhook,
  listDeliveries,
  listWebhooks,
  WebhookFormatSchema,
  WebhookSchema,
  webhookExists,
} from "./store";
import { webhookUrlProblem } from "./url";

const CreateWebhookSchema = z
  .strictObject({
    url: z.string().max(2048).openapi({ example: "https://hooks.example.com/gpulease" }),
    events: z
      .array(z.union([WebhookEventTypeSchema, z.literal("*")]))
      .min(1)
      .max(32)
      .transform((events) => [...new Set(events)])
      .openapi({ description: 'event types, or ["*"] for every one', example: ["lease.stopped", "lease.running"] }),
    format: WebhookFormatSchema.default("json").openapi({
      description: "json: the event object; slack: `{text}` for a Slack-compatible incoming webhook",
    }),
  })
  .openapi("CreateWebhook");

const CreatedWebhookSchema = WebhookSchema.extend({
  secret: z.string().openapi({
    description: "signing secret for Gpulease-Signature; shown only in this response",
    example: "whsec_3q2-7wEVAGx1lPZmX0q9Rk0cW3sB1dUaYy4JtQ5nHfE",
  }),
}).openapi("CreatedWebhook");

const webhookId = idParams("whk_01jb3k8x0m4q7r2s5t6v9w");

const createWebhookRoute = createRoute({
  method: "post",
  path: "/webhooks",
  operationId: "createWebhook",
  tags: ["webhooks"],
  summary: "Register a webhook (admin)",
  description:
    "Deliveries are POSTed with Gpulease-Event, Gpulease-Delivery and Gpulease-Signature headers. URLs must be https:// unless ALLOW_HTTP_WEBHOOKS=true; a URL at this worker, or (in production) at a loopback, private or link-local address, is refused with 400.",
  security: bearerSecurity,
  request: { body: { content: { "application/json": { schema: CreateWebhookSchema } }, required: true } },
  responses: {
    201: jsonResponse(CreatedWebhookSchema, "The webhook with its signing secret, shown only here."),
    ...errorResponses(),
  },
});

const listWebhooksRoute = createRoute({
  method: "get",
  path: "/webhooks",
  operationId: "listWebhooks",
  tags: ["webhooks"],
  summary: "List webhooks (admin); never their secrets",
  security: bearerSecurity,
  responses: {
    200: jsonResponse(z.object({ webhooks: z.array(WebhookSchema) }), "Every webhook, newest first."),
    ...errorResponses(),
  },
});

const deleteWebhookRoute = createRoute({
  method: "delete",
  path: "/webhooks/{id}",
  operationId: "deleteWebhook",
  tags: ["webhooks"],
  summary: "Delete a webhook (admin) and its pending deliveries",
  security: bearerSecurity,
  request: { params: webhookId },
  responses: {
    200: jsonResponse(z.object({ ok: z.literal(true) }), "Deleted."),
    ...errorResponses("not_found"),
  },
});

const testWebhookRoute = createRoute({
  method: "post",
  path: "/webhooks/{id}/test",
  operationId: "testWebhook",
  tags: ["webhooks"],
  summary: "Send a `ping` to the webhook (admin)",
  security: bearerSecurity,
  request: { params: webhookId },
  responses: {
    202: jsonResponse(
      z.object({ ok: z.literal(true), delivery_id: z.string().openapi({ example: "dlv_01jb3k8x0m4q7r2s5t6v9w" }) }),
      "Queued; see GET /v1/webhooks/{id}/deliveries for the outcome.",
    ),
    ...errorResponses("not_found"),
  },
});

const deliveriesRoute = createRoute({
  method: "get",
  path: "/webhooks/{id}/deliveries",
  operationId: "listWebhookDeliveries",
  tags: ["webhooks"],
  summary: "The webhook's delivery log (admin), newest first",
  security: bearerSecurity,
  request: { params: webhookId, query: z.object({ limit: limitQuery(20) }) },
  responses: {
    200: jsonResponse(z.object({ deliveries: z.array(DeliverySchema) }), "The latest deliveries."),
    ...errorResponses("not_found"),
  },
});

/** The hosts of this worker: a webhook there would call the API from its own deliveries. */
function selfHosts(requestUrl: string, publicUrl: string | null): string[] {
  const hosts = [new URL(requestUrl).host];
  if (publicUrl) hosts.push(new URL(publicUrl).host);
  return hosts;
}

async function requireWebhook(db: D1Database, id: string): Promise<void> {
  if (!idPattern.test(id) || !(await webhookExists(db, id))) throw new ApiError("not_found", "no such webhook");
}

export const webhookRoutes = createRouter()
  .openapi(createWebhookRoute, async (c) => {
    const { url, events, format } = c.req.valid("json");
    const { db, clock, config } = c.get("services");
    const problem = webhookUrlProblem(url, {
      allowHttp: config.allowHttpWebhooks,
      selfHosts: selfHosts(c.req.url, config.publicUrl),
    });
    if (problem) {
      throw new ApiError("invalid_request", `invalid body: url: ${problem}`, {
        issues: [{ path: "url", message: problem }],
      });
    }
    const adminToken = config.secrets.adminToken;
    if (!adminToken) throw new ApiError("conflict", "ADMIN_TOKEN must be set: webhook secrets are sealed with it");
    const now = clock();
    const secret = newWebhookSecret();
    const hook = await insertWebhook(db, {
      id: newId("whk", now),
      url,
      events,
      format,
      sealedSecret: await sealSecret(secret, adminToken),
      createdAt: now,
    });
    return c.json({ ...hook, secret }, 201);
  })
  .openapi(listWebhooksRoute, async (c) => c.json({ webhooks: await listWebhooks(c.get("services").db) }, 200))
  .openapi(deleteWebhookRoute, async (c) => {
    const { id } = c.req.valid("param");
    if (!idPattern.test(id) || !(await deleteWebhook(c.get("services").db, id))) {
      throw new ApiError("not_found", "no such webhook");
    }
    return c.json({ ok: true as const }, 200);
  })
  .openapi(testWebhookRoute, async (c) => {
    const { id } = c.req.valid("param");
    const { db, clock, outbox } = c.get("services");
    await requireWebhook(db, id);
    const deliveryId = await enqueuePing(db, id, clock());
    await outbox.wake();
    return c.json({ ok: true as const, delivery_id: deliveryId }, 202);
  })
  .openapi(deliveriesRoute, async (c) => {
    const { id } = c.req.valid("param");
    const { limit } = c.req.valid("query");
    const { db } = c.get("services");
    await requireWebhook(db, id);
    return c.json({ deliveries: await listDeliveries(db, id, limit ?? 20) }, 200);
  });
