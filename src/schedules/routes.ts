import { createRoute, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/middleware";
import { ApiError, errorResponses, refusalError } from "../errors";
import { appendEvent } from "../leases/ledger";
import { createLease } from "../leases/rent";
import { LeaseSchema } from "../leases/schema";
import { newId } from "../lib/ids";
import { iso } from "../lib/time";
import { bearerSecurity, createRouter, idParams, jsonResponse, limitQuery, validationError } from "../router";
import type { Services } from "../services";
import { cronFor } from "./cron";
import { checkOffers } from "./expected";
import {
  cronPatchProblem,
  type ExpectedCost,
  ScheduleInputSchema,
  ScheduleListSchema,
  SchedulePatchSchema,
  ScheduleRunListSchema,
  ScheduleSchema,
} from "./schema";
import {
  deleteSchedule,
  finishRun,
  getSchedule,
  insertRunStatement,
  insertSchedule,
  listRuns,
  listSchedules,
  noteScheduleOrigin,
  type ScheduleRow,
  toSchedule,
  toScheduleRun,
  unmaskedLease,
  updateSchedule,
} from "./store";

const SCHEDULE_ID = /^sch_[0-9a-z]{22}$/;

const IdParams = idParams("sch_01jb3k7q2m9x4v8n6c5t0w");

/** The first cron run after `now`, as stored in next_run_at (null for a disabled schedule). */
function nextRunAt(cron: string, timezone: string, enabled: boolean, now: number): string | null {
  if (!enabled) return null;
  const next = cronFor(cron, timezone).nextAfter(now);
  return next === null ? null : iso(next);
}

async function scheduleOr404(services: Services, scheduleId: string): Promise<ScheduleRow> {
  const row = SCHEDULE_ID.test(scheduleId) ? await getSchedule(services.db, scheduleId) : null;
  if (!row) throw new ApiError("not_found", `no schedule ${JSON.stringify(scheduleId.slice(0, 64))}`);
  return row;
}

/** A run's worst case at the best offer right now; null when none matches or a listing failed. */
async function expectedCost(services: Services, row: ScheduleRow): Promise<ExpectedCost | null> {
  try {
    const check = await checkOffers(services, row.lease_spec);
    return check.kind === "offer" ? check.expected : null;
  } catch {
    return null;
  }
}

const createScheduleRoute = createRoute({
  method: "post",
  path: "/schedules",
  tags: ["schedules"],
  summary: "Create a schedule",
  description:
    "A cron expression (5 fields) read in an IANA time zone, daylight saving handled, and the POST /v1/leases body each run rents with. The dispatcher (every minute) starts one lease per due time.",
  security: bearerSecurity,
  middleware: [requireScope("admin")] as const,
  request: { body: { required: true, content: { "application/json": { schema: ScheduleInputSchema } } } },
  responses: {
    201: jsonResponse(ScheduleSchema, "The schedule, with its next_run_at."),
    ...errorResponses("forbidden"),
  },
});

const listSchedulesRoute = createRoute({
  method: "get",
  path: "/schedules",
  tags: ["schedules"],
  summary: "List schedules",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  responses: { 200: jsonResponse(ScheduleListSchema, "Every schedule, oldest first."), ...errorResponses("forbidden") },
});

const getScheduleRoute = createRoute({
  method: "get",
  path: "/schedules/{id}",
  tags: ["schedules"],
  summary: "One schedule, with the expected cost of a run",
  description:
    "`expected_cost` is the worst case of a run (price × max_minutes, capped by max_cost) at the best offer right now.",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  request: { params: IdParams },
  responses: { 200: jsonResponse(ScheduleSchema, "The schedule."), ...errorResponses("forbidden", "not_found") },
});

const patchScheduleRoute = createRoute({
  method: "patch",
  path: "/schedules/{id}",
  tags: ["schedules"],
  summary: "Change a schedule",
  description: "Any field; `lease` replaces the whole lease body. next_run_at is recomputed from now.",
  security: bearerSecurity,
  middleware: [requireScope("admin")] as const,
  request: {
    params: IdParams,
    body: { required: true, content: { "application/json": { schema: SchedulePatchSchema } } },
  },
  responses: { 200: jsonResponse(ScheduleSchema, "The schedule."), ...errorResponses("forbidden", "not_found") },
});

const deleteScheduleRoute = createRoute({
  method: "delete",
  path: "/schedules/{id}",
  tags: ["schedules"],
  summary: "Delete a schedule",
  description: "Its leases stay in the ledger; an active one keeps running to its caps.",
  security: bearerSecurity,
  middleware: [requireScope("admin")] as const,
  request: { params: IdParams },
  responses: {
    200: jsonResponse(z.object({ ok: z.literal(true) }), "Deleted."),
    ...errorResponses("forbidden", "not_found"),
  },
});

const runNowRoute = createRoute({
  method: "post",
  path: "/schedules/{id}/run",
  tags: ["schedules"],
  summary: "Start one run now",
  description:
    "Rents with the schedule's lease body at once, like POST /v1/leases. A repeated Idempotency-Key returns the same lease (200).",
  security: bearerSecurity,
  middleware: [requireScope("rent")] as const,
  request: {
    params: IdParams,
    headers: z.object({
      "idempotency-key": z.string().min(1).max(200).optional().openapi({ description: "same key, same lease" }),
    }),
  },
  responses: {
    202: jsonResponse(LeaseSchema, "Rented: the lease is provisioning."),
    200: jsonResponse(LeaseSchema, "The lease this Idempotency-Key already created."),
    ...errorResponses("forbidden", "not_found", "budget_exceeded", "no_capacity", "limit_reached", "provider_error"),
  },
});

const RunsQuery = z.strictObject({
  limit: limitQuery(20),
});

const listRunsRoute = createRoute({
  method: "get",
  path: "/schedules/{id}/runs",
  tags: ["schedules"],
  summary: "A schedule's runs, newest first",
  description:
    "One row per due time: started (with its lease, what it cost and how long it ran), skipped or failed (with why), or retrying for capacity.",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  request: { params: IdParams, query: RunsQuery },
  responses: { 200: jsonResponse(ScheduleRunListSchema, "The runs."), ...errorResponses("forbidden", "not_found") },
});

export const scheduleRoutes = createRouter()
  .openapi(createScheduleRoute, async (c) => {
    const services = c.get("services");
    const input = c.req.valid("json");
    const now = services.clock();
    const scheduleId = newId("sch", now);
    await insertSchedule(services.db, {
      id: scheduleId,
      name: input.name,
      cron: input.cron,
      timezone: input.timezone,
      enabled: input.enabled,
      lease: input.lease,
      next_run_at: nextRunAt(input.cron, input.timezone, input.enabled, now),
      origin: new URL(c.req.url).origin,
      now: iso(now),
    });
    const row = await scheduleOr404(services, scheduleId);
    return c.json(toSchedule(row), 201);
  })
  .openapi(listSchedulesRoute, async (c) => {
    const rows = await listSchedules(c.get("services").db);
    return c.json({ schedules: rows.map(toSchedule) }, 200);
  })
  .openapi(getScheduleRoute, async (c) => {
    const services = c.get("services");
    const row = await scheduleOr404(services, c.req.valid("param").id);
    return c.json({ ...toSchedule(row), expected_cost: await expectedCost(services, row) }, 200);
  })
  .openapi(patchScheduleRoute, async (c) => {
    const services = c.get("services");
    const row = await scheduleOr404(services, c.req.valid("param").id);
    const patch = c.req.valid("json");
    const problem = cronPatchProblem(patch, row);
    if (problem) throw validationError(problem, "json");
    const next = {
      name: patch.name ?? row.name,
      cron: patch.cron ?? row.cron,
      timezone: patch.timezone ?? row.timezone,
      enabled: patch.enabled ?? row.enabled,
      lease: patch.lease ? unmaskedLease(patch.lease, row.lease_spec) : row.lease_spec,
    };
    const now = services.clock();
    const timingChanged = next.cron !== row.cron || next.timezone !== row.timezone || next.enabled !== row.enabled;
    // An unchanged timing keeps a next_run_at that is due but not yet dispatched.
    const nextRun =
      timingChanged || row.next_run_at === null
        ? nextRunAt(next.cron, next.timezone, next.enabled, now)
        : row.next_run_at;
    await updateSchedule(services.db, row.id, {
      ...next,
      next_run_at: nextRun,
      origin: new URL(c.req.url).origin,
      now: iso(now),
    });
    return c.json(toSchedule(await scheduleOr404(services, row.id)), 200);
  })
  .openapi(deleteScheduleRoute, async (c) => {
    const services = c.get("services");
    const scheduleId = c.req.valid("param").id;
    if (!SCHEDULE_ID.test(scheduleId) || !(await deleteSchedule(services.db, scheduleId))) {
      throw new ApiError("not_found", `no schedule ${JSON.stringify(scheduleId.slice(0, 64))}`);
    }
    return c.json({ ok: true as const }, 200);
  })
  .openapi(runNowRoute, async (c) => {
    const services = c.get("services");
    const row = await scheduleOr404(services, c.req.valid("param").id);
    const origin = new URL(c.req.url).origin;
    if (origin !== row.origin) await noteScheduleOrigin(services.db, row.id, origin);
    const outcome = await createLease(
      services,
      { ...row.lease_spec, name: row.lease_spec.name ?? row.name },
      {
        idempotencyKey: c.req.valid("header")["idempotency-key"] ?? null,
        scheduleId: row.id,
        tokenId: c.get("caller").tokenId,
        origin,
      },
    );
    if (!outcome.ok) throw refusalError(outcome.refusal);
    const { lease, created } = outcome;
    if (!created) return c.json(lease, 200);
    const at = iso(services.clock());
    await insertRunStatement(services.db, {
      scheduleId: row.id,
      dueAt: at,
      status: "claimed",
      detail: "run now",
      now: at,
    }).run();
    await finishRun(services.db, {
      scheduleId: row.id,
      dueAt: at,
      status: "started",
      leaseId: lease.id,
      detail: "run now",
      attempted: true,
      now: at,
    });
    await appendEvent(services.db, lease.id, at, {
      kind: "schedule_run",
      detail: `started now by request, schedule ${row.id}`,
    });
    return c.json(lease, 202);
  })
  .openapi(listRunsRoute, async (c) => {
    const services = c.get("services");
    const row = await scheduleOr404(services, c.req.valid("param").id);
    const runs = await listRuns(services.db, row.id, c.req.valid("query").limit ?? 20);
    const now = services.clock();
    return c.json({ runs: runs.map(({ run, lease }) => toScheduleRun(run, lease, now, services.config.eurUsd)) }, 200);
  });
