import { createRoute, z } from "@hono/zod-openapi";
import { createMiddleware } from "hono/factory";
import { streamSSE } from "hono/streaming";
import { requireScope } from "../auth/middleware";
import { ApiError, errorResponses, refusalError } from "../errors";
import { getUsage, usageView } from "../gateway/usage-store";
import { sha256Hex } from "../lib/crypto";
import { bearerSecurity, createRouter, idParams, jsonResponse, limitQuery } from "../router";
import type { AppEnv, Services } from "../services";
import { verifyCallbackToken } from "./callback";
import { listCreates, listCreatesOf } from "./create-records";
import { newInferenceKey } from "./inference-key";
import { BadCursorError, getLease, type LeaseRow, listEvents, listLeases, toLease } from "./ledger";
import { leaseFor, rentedByOrAdmin } from "./ownership";
import { createLease } from "./rent";
import { LeaseEventSchema, LeaseInputSchema, LeaseSchema, leaseStatuses, RentedLeaseSchema } from "./schema";

const LEASE_ID = /^lse_[0-9a-z]{22}$/;
/** An SSE stream ends after this long; EventSource reconnects with Last-Event-ID and resumes. */
const STREAM_MAX_MS = 5 * 60_000;
const STREAM_POLL_MS = 1_000;
/** Polls after `stopped` with no new event before the stream ends (the last events may lag). */
const STREAM_TAIL_POLLS = 2;

const IdParams = idParams("lse_01jb3k7q2m9x4v8n6c5t0w");

const ListQuery = z.strictObject({
  status: z
    .enum(["active", ...leaseStatuses])
    .optional()
    .openapi({ description: "`active` = not stopped" }),
  limit: limitQuery(50),
  cursor: z.string().max(500).optional().openapi({ description: "next_cursor of the previous page" }),
});

const EventsQuery = z.strictObject({
  after: z
    .string()
    .regex(/^\d{1,15}$/, "expected a whole number")
    .transform(Number)
    .optional()
    .openapi({ type: "integer", description: "only events with a larger seq (as Last-Event-ID does for the stream)" }),
});

const OkSchema = z.object({ ok: z.literal(true), already: z.boolean().optional() }).openapi("Ok");

async function leaseOr404(services: Services, leaseId: string): Promise<LeaseRow> {
  const row = LEASE_ID.test(leaseId) ? await getLease(services.db, leaseId) : null;
  if (!row) throw new ApiError("not_found", `no lease ${JSON.stringify(leaseId.slice(0, 64))}`);
  return row;
}

const createLeaseRoute = createRoute({
  method: "post",
  path: "/leases",
  tags: ["leases"],
  summary: "Rent a machine",
  description:
    "Tries the named offer, or the ranked offers for the filters, in order. 202 as soon as a provider accepted the rental; the keeper then watches it come up. A repeated Idempotency-Key returns the same lease (200) and rents nothing.",
  security: bearerSecurity,
  middleware: [requireScope("rent")] as const,
  request: {
    headers: z.object({
      "idempotency-key": z.string().min(1).max(200).optional().openapi({ description: "same key, same lease" }),
    }),
    body: { required: true, content: { "application/json": { schema: LeaseInputSchema } } },
  },
  responses: {
    202: jsonResponse(RentedLeaseSchema, "Rented: the lease is provisioning (a model lease's inference_key, once)."),
    200: jsonResponse(LeaseSchema, "The lease this Idempotency-Key already created."),
    ...errorResponses("forbidden", "budget_exceeded", "no_capacity", "limit_reached", "provider_error"),
  },
});

const listLeasesRoute = createRoute({
  method: "get",
  path: "/leases",
  tags: ["leases"],
  summary: "List leases, newest first",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  request: { query: ListQuery },
  responses: {
    200: jsonResponse(
      z.object({ leases: z.array(LeaseSchema), next_cursor: z.string().nullable() }),
      "A page of leases.",
    ),
    ...errorResponses("forbidden"),
  },
});

const getLeaseRoute = createRoute({
  method: "get",
  path: "/leases/{id}",
  tags: ["leases"],
  summary: "One lease",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  request: { params: IdParams },
  responses: { 200: jsonResponse(LeaseSchema, "The lease."), ...errorResponses("forbidden", "not_found") },
});

const stopLeaseRoute = createRoute({
  method: "post",
  path: "/leases/{id}/stop",
  tags: ["leases"],
  summary: "Stop a lease",
  description:
    "Teardown is asynchronous: the lease shows `stopping`, then `stopped` with `teardown_verified_at`. Stopping twice answers `already: true`.",
  security: bearerSecurity,
  middleware: [requireScope("stop")] as const,
  request: { params: IdParams },
  responses: {
    200: jsonResponse(OkSchema, "Teardown requested (or already under way)."),
    ...errorResponses("forbidden", "not_found"),
  },
});

const inferenceKeyRoute = createRoute({
  method: "post",
  path: "/leases/{id}/inference-key",
  tags: ["leases"],
  summary: "A new inference key for a model lease",
  description: "The old key stops working at once; the new one is shown only in this answer.",
  security: bearerSecurity,
  middleware: [requireScope("rent")] as const,
  request: { params: IdParams },
  responses: {
    200: jsonResponse(
      z.object({ inference_key: z.string().openapi({ example: "glk_…" }) }).openapi("InferenceKey"),
      "The new key.",
    ),
    ...errorResponses("forbidden", "not_found", "lease_not_running"),
  },
});

const eventsRoute = createRoute({
  method: "get",
  path: "/leases/{id}/events",
  tags: ["leases"],
  summary: "A lease's event log, or a live stream of it",
  description:
    "With `Accept: text/event-stream`: Server-Sent Events (id = seq, data = the event as JSON) that follow the lease until it is stopped; a reconnect with `Last-Event-ID` resumes after that event.",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  request: { params: IdParams, query: EventsQuery },
  responses: {
    200: {
      description: "The events, oldest first.",
      content: {
        "application/json": { schema: z.object({ events: z.array(LeaseEventSchema) }) },
        "text/event-stream": { schema: z.string().openapi({ description: "SSE: `id: <seq>`, `data: <event JSON>`" }) },
      },
    },
    ...errorResponses("forbidden", "not_found"),
  },
});

/** Checks the call-back token before the body is looked at: a stranger learns nothing but 401. */
const callbackAuth = createMiddleware<AppEnv>(async (c, next) => {
  const row = await leaseOr404(c.get("services"), c.req.param("id") ?? "");
  if (!(await verifyCallbackToken(c.req.header("authorization"), row.callback_hash))) {
    throw new ApiError(
      "unauthorized",
      "wrong call-back token for this lease",
      {},
      {
        "WWW-Authenticate": 'Bearer realm="gpulease-callback"',
      },
    );
  }
  await next();
});

const doneRoute = createRoute({
  method: "post",
  path: "/leases/{id}/done",
  tags: ["leases"],
  summary: "The job's call-back: stop the lease",
  description:
    "Authorized by the lease's call-back token (`Authorization: Bearer $GPULEASE_CALLBACK_TOKEN`, as the machine receives it), not an API token. Stops the lease with `stop_reason: job_done` and records the exit code.",
  security: bearerSecurity,
  middleware: [callbackAuth] as const,
  request: {
    params: IdParams,
    body: {
      required: true,
      content: {
        "application/json": {
          schema: z.strictObject({ exit_code: z.number().int().min(-2147483648).max(2147483647) }),
        },
      },
    },
  },
  responses: {
    200: jsonResponse(OkSchema, "The lease is stopping (or already was)."),
    ...errorResponses("unauthorized", "not_found"),
  },
});

/** Routes behind API-token auth. */
export const leaseRoutes = createRouter()
  .openapi(createLeaseRoute, async (c) => {
    const services = c.get("services");
    const outcome = await createLease(services, c.req.valid("json"), {
      idempotencyKey: c.req.valid("header")["idempotency-key"] ?? null,
      tokenId: c.get("caller").tokenId,
      origin: new URL(c.req.url).origin,
    });
    if (!outcome.ok) throw refusalError(outcome.refusal);
    const { lease, created, inferenceKey } = outcome;
    const body = inferenceKey ? { ...lease, inference_key: inferenceKey } : lease;
    return created ? c.json(body, 202) : c.json(body, 200);
  })
  .openapi(listLeasesRoute, async (c) => {
    const query = c.req.valid("query");
    try {
      const { rows, nextCursor } = await listLeases(c.get("services").db, {
        status: query.status,
        limit: query.limit ?? 50,
        cursor: query.cursor,
      });
      const creates = await listCreatesOf(
        c.get("services").db,
        rows.map((r) => r.id),
      );
      const caller = c.get("caller");
      const leases = rows.map((r) => leaseFor(caller, r.token_id, toLease(r, creates.get(r.id) ?? [])));
      return c.json({ leases, next_cursor: nextCursor }, 200);
    } catch (error) {
      if (error instanceof BadCursorError) {
        throw new ApiError("invalid_request", `invalid query: cursor: ${error.message}`, {
          issues: [{ path: "cursor", message: error.message }],
        });
      }
      throw error;
    }
  })
  .openapi(getLeaseRoute, async (c) => {
    const services = c.get("services");
    const row = await leaseOr404(services, c.req.valid("param").id);
    const [creates, usage] = await Promise.all([listCreates(services.db, row.id), getUsage(services.db, row.id)]);
    const lease = toLease(row, creates, usageView(usage, row, services.config.eurUsd));
    return c.json(leaseFor(c.get("caller"), row.token_id, lease), 200);
  })
  .openapi(inferenceKeyRoute, async (c) => {
    const services = c.get("services");
    const row = await leaseOr404(services, c.req.valid("param").id);
    if (!row.spec.model) throw new ApiError("not_found", "not a model lease: it has no inference key");
    if (!rentedByOrAdmin(c.get("caller"), row.token_id))
      throw new ApiError("forbidden", "only the token that rented this lease, or an admin, may rotate its key");
    const key = newInferenceKey();
    const { ok } = await services.keepers.setInferenceKey(row.id, await sha256Hex(key));
    if (!ok) throw new ApiError("lease_not_running", `the lease is ${row.status}: no key for it`);
    return c.json({ inference_key: key }, 200);
  })
  .openapi(stopLeaseRoute, async (c) => {
    const services = c.get("services");
    const row = await leaseOr404(services, c.req.valid("param").id);
    if (row.status === "stopping" || row.status === "stopped") return c.json({ ok: true as const, already: true }, 200);
    const result = await services.keepers.stop(row.id, "requested", "stop requested through the API");
    return c.json(result.already ? { ok: true as const, already: true } : { ok: true as const }, 200);
  })
  .openapi(eventsRoute, async (c) => {
    const services = c.get("services");
    const row = await leaseOr404(services, c.req.valid("param").id);
    const after = c.req.valid("query").after ?? 0;
    if (!(c.req.header("accept") ?? "").includes("text/event-stream")) {
      return c.json({ events: await listEvents(services.db, row.id, after) }, 200);
    }
    const lastEventId = Number(c.req.header("last-event-id"));
    const from = Number.isSafeInteger(lastEventId) && lastEventId > 0 ? lastEventId : after;
    return streamSSE(c, (stream) => followEvents(services, row.id, from, stream)) as never;
  });

/** Writes the lease's events as they are appended, until it is stopped (or the stream's time is up). */
async function followEvents(
  services: Services,
  leaseId: string,
  afterSeq: number,
  stream: Parameters<Parameters<typeof streamSSE>[1]>[0],
): Promise<void> {
  let after = afterSeq;
  let quietAfterStop = 0;
  const endAt = Date.now() + STREAM_MAX_MS;
  while (!stream.aborted && !stream.closed) {
    const batch = await listEvents(services.db, leaseId, after, 100);
    for (const event of batch) {
      await stream.writeSSE({ id: String(event.seq), data: JSON.stringify(event), retry: 2000 });
      after = event.seq;
    }
    if (batch.length === 100) continue;
    const lease = await getLease(services.db, leaseId);
    if (!lease || lease.status === "stopped") {
      if (batch.some((e) => e.kind === "stopped") || quietAfterStop >= STREAM_TAIL_POLLS) break;
      quietAfterStop += 1;
    }
    if (Date.now() >= endAt) break;
    await stream.sleep(STREAM_POLL_MS);
  }
}

/** The job's own call-back, authorised by the lease's call-back token. */
export const leaseCallbackRoutes = createRouter().openapi(doneRoute, async (c) => {
  const services = c.get("services");
  const row = await leaseOr404(services, c.req.valid("param").id);
  if (row.status === "stopping" || row.status === "stopped") return c.json({ ok: true as const, already: true }, 200);
  const result = await services.keepers.jobDone(row.id, c.req.valid("json").exit_code);
  return c.json(result.already ? { ok: true as const, already: true } : { ok: true as const }, 200);
});
