import type { Client } from "openapi-fetch";
import type { components, operations, paths } from "./schema.js";

export type { components, operations, paths };
/** A lease as the API returns it. */
export type Lease = components["schemas"]["Lease"];
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
