import type { Client } from "openapi-fetch";
import type { components, operations, paths } from "./schema.js";

export type { components, operations, paths };
/** A lease as the API returns it. */
export type Lease = components["schemas"]["Lease"];
/** One entry of a lease's event log (GET /v1/leases/{id}/events). */
export type LeaseEvent = components["schemas"]["LeaseEvent"];
/** The kinds of lease event (src/leases/events.ts in the worker). */
export type LeaseEventKind = components["schemas"]["LeaseEventKind"];
/** The error envelope of every non-2xx answer. */
export type ApiErrorBody = components["schemas"]["Error"];
export type GpuleaseClient = Client<paths>;

/** A client for one gpulease worker; every call is typed from its OpenAPI document. */
export function createGpuleaseClient(options: {
  baseUrl: string;
  token?: string;
  fetch?: typeof fetch;
  headers?: Record<string, string>;
}): GpuleaseClient;
