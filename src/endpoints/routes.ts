import { createRoute, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/middleware";
import { ApiError, errorResponses, refusalError } from "../errors";
import { sizeModel } from "../leases/model-sizing";
import { RentRefusal } from "../leases/refusal";
import { randomSecret, sha256Hex } from "../lib/crypto";
import { newId } from "../lib/ids";
import { bearerSecurity, createRouter, jsonResponse } from "../router";
import type { Services } from "../services";
import type { EndpointDO } from "./endpoint-do";
import { ENDPOINT_NAME, type Endpoint, EndpointInputSchema, EndpointPatchSchema, EndpointSchema } from "./schema";
import {
  deleteEndpoint,
  type EndpointRow,
  getEndpointByName,
  insertEndpoint,
  listEndpoints,
  patchEndpoint,
  setEndpointKey,
} from "./store";

/** An endpoint's key for the LLM gateway (`gle_…`): shown once, stored as its SHA-256. */
export function newEndpointKey(): string {
  return `gle_${randomSecret()}`;
}

/** The endpoint's Durable Object (its replicas' loop), named by the endpoint's id. */
export function endpointObject(env: Env, endpointId: string): DurableObjectStub<EndpointDO> {
  return (env.ENDPOINT as DurableObjectNamespace<EndpointDO>).getByName(endpointId);
}

/** The API's Endpoint: the stored settings and the loop's live state. */
export async function endpointView(services: Services, row: EndpointRow, origin: string): Promise<Endpoint> {
  const live = await endpointObject(services.env, row.id).live(row);
  const base = (services.config.publicUrl ?? origin).replace(/\/+$/, "");
  return {
    name: row.name,
    model: row.model,
    context_length: row.context_length,
    min_replicas: row.min_replicas,
    max_replicas: row.max_replicas,
    idle_minutes: row.idle_minutes,
    cold_start_wait_s: row.cold_start_wait_s,
    target_in_flight: row.target_in_flight,
    budget_daily_usd: row.budget_daily_usd,
    provider: row.providers,
    gpu: row.gpu,
    max_price: row.max_price,
    max_minutes: row.max_minutes,
    ...live,
    base_url: `${base}/llm/v1`,
    created_at: row.created_at,
  };
}

const NameParams = z.object({
  name: z.string().openapi({ param: { name: "name", in: "path" }, example: "qwen" }),
});

async function endpointOr404(services: Services, name: string): Promise<EndpointRow> {
  const row = ENDPOINT_NAME.test(name) ? await getEndpointByName(services.db, name) : null;
  if (!row) throw new ApiError("not_found", `no endpoint ${JSON.stringify(name.slice(0, 64))}`);
  return row;
}

const createEndpointRoute = createRoute({
  method: "post",
  path: "/endpoints",
  tags: ["endpoints"],
  summary: "Create a model endpoint",
  description:
    "A named model served when called and costing nothing while idle: its replicas are model leases rented on demand and stopped when quiet. The key (`gle_…`) is shown only in this answer.",
  security: bearerSecurity,
  middleware: [requireScope("rent")] as const,
  request: { body: { required: true, content: { "application/json": { schema: EndpointInputSchema } } } },
  responses: {
    201: jsonResponse(
      z.object({ endpoint: EndpointSchema, key: z.string().openapi({ example: "gle_…" }) }).openapi("CreatedEndpoint"),
      "Created; min_replicas are being rented.",
    ),
    ...errorResponses("forbidden", "endpoint_exists", "provider_error"),
  },
});

const listEndpointsRoute = createRoute({
  method: "get",
  path: "/endpoints",
  tags: ["endpoints"],
  summary: "List model endpoints",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  responses: {
    200: jsonResponse(z.object({ endpoints: z.array(EndpointSchema) }), "Every endpoint, by name."),
    ...errorResponses("forbidden"),
  },
});

const getEndpointRoute = createRoute({
  method: "get",
  path: "/endpoints/{name}",
  tags: ["endpoints"],
  summary: "One model endpoint, with its replicas",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  request: { params: NameParams },
  responses: { 200: jsonResponse(EndpointSchema, "The endpoint."), ...errorResponses("forbidden", "not_found") },
});

const patchEndpointRoute = createRoute({
  method: "patch",
  path: "/endpoints/{name}",
  tags: ["endpoints"],
  summary: "Change an endpoint's scaling, cold start or budget",
  description: "Also closes an open breaker: the next request rents again.",
  security: bearerSecurity,
  middleware: [requireScope("rent")] as const,
  request: {
    params: NameParams,
    body: { required: true, content: { "application/json": { schema: EndpointPatchSchema } } },
  },
  responses: {
    200: jsonResponse(EndpointSchema, "The endpoint as changed."),
    ...errorResponses("forbidden", "not_found", "conflict"),
  },
});

const deleteEndpointRoute = createRoute({
  method: "delete",
  path: "/endpoints/{name}",
  tags: ["endpoints"],
  summary: "Delete an endpoint, stopping every replica",
  description: "Each replica is stopped as any lease is (teardown verified); their leases stay in the ledger.",
  security: bearerSecurity,
  middleware: [requireScope("rent")] as const,
  request: { params: NameParams },
  responses: {
    200: jsonResponse(z.object({ ok: z.literal(true), stopped: z.number().int() }), "Deleted."),
    ...errorResponses("forbidden", "not_found"),
  },
});

const rotateKeyRoute = createRoute({
  method: "post",
  path: "/endpoints/{name}/keys",
  tags: ["endpoints"],
  summary: "A new key for an endpoint",
  description: "The old key stops working at once; the new one is shown only in this answer.",
  security: bearerSecurity,
  middleware: [requireScope("rent")] as const,
  request: { params: NameParams },
  responses: {
    200: jsonResponse(z.object({ key: z.string().openapi({ example: "gle_…" }) }), "The new key."),
    ...errorResponses("forbidden", "not_found"),
  },
});

/** /v1/endpoints: create, list, show, change, delete, rotate the key. */
export const endpointRoutes = createRouter()
  .openapi(createEndpointRoute, async (c) => {
    const services = c.get("services");
    const input = c.req.valid("json");
    // A bad or unknown model is refused as a model lease's is, before anything is stored.
    const sizing = await sizeModel(services, { model: input.model, context_length: input.context_length });
    if (sizing instanceof RentRefusal) throw refusalError(sizing);
    const key = newEndpointKey();
    const now = services.clock();
    const id = newId("ept", now);
    const inserted = await insertEndpoint(
      services.db,
      { id, keyHash: await sha256Hex(key), tokenId: c.get("caller").tokenId, now },
      input,
    );
    if (!inserted) throw new ApiError("endpoint_exists", `an endpoint named ${input.name} exists`);
    const row = await endpointOr404(services, input.name);
    await endpointObject(services.env, row.id).configure(row, {
      resetBreaker: false,
      origin: new URL(c.req.url).origin,
    });
    return c.json({ endpoint: await endpointView(services, row, new URL(c.req.url).origin), key }, 201);
  })
  .openapi(listEndpointsRoute, async (c) => {
    const services = c.get("services");
    const origin = new URL(c.req.url).origin;
    const rows = await listEndpoints(services.db);
    return c.json({ endpoints: await Promise.all(rows.map((row) => endpointView(services, row, origin))) }, 200);
  })
  .openapi(getEndpointRoute, async (c) => {
    const services = c.get("services");
    const row = await endpointOr404(services, c.req.valid("param").name);
    return c.json(await endpointView(services, row, new URL(c.req.url).origin), 200);
  })
  .openapi(patchEndpointRoute, async (c) => {
    const services = c.get("services");
    const name = c.req.valid("param").name;
    await endpointOr404(services, name);
    const row = await patchEndpoint(services.db, name, c.req.valid("json"), services.clock());
    if (row === null) throw new ApiError("not_found", `no endpoint ${JSON.stringify(name)}`);
    if (row === "conflict") throw new ApiError("conflict", "min_replicas must not exceed max_replicas");
    await endpointObject(services.env, row.id).configure(row, {
      resetBreaker: true,
      origin: new URL(c.req.url).origin,
    });
    return c.json(await endpointView(services, row, new URL(c.req.url).origin), 200);
  })
  .openapi(deleteEndpointRoute, async (c) => {
    const services = c.get("services");
    const row = await endpointOr404(services, c.req.valid("param").name);
    // The row goes first: no request is routed and no replica rented once it is gone.
    await deleteEndpoint(services.db, row.id);
    const { stopped } = await endpointObject(services.env, row.id).remove();
    return c.json({ ok: true as const, stopped }, 200);
  })
  .openapi(rotateKeyRoute, async (c) => {
    const services = c.get("services");
    const row = await endpointOr404(services, c.req.valid("param").name);
    const key = newEndpointKey();
    const rotated = await setEndpointKey(services.db, row.name, await sha256Hex(key), services.clock());
    if (!rotated) throw new ApiError("not_found", `no endpoint ${JSON.stringify(row.name)}`);
    // The endpoint's object checks the key on each request: it holds the new one before the answer.
    await endpointObject(services.env, rotated.id).configure(rotated, { resetBreaker: false });
    return c.json({ key }, 200);
  });
