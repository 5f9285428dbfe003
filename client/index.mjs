// @ts-check
// The typed gpulease client: openapi-fetch over the types generated from the worker's own
// /openapi.json (client/schema.d.ts). Plain ESM, so Node runs it from a clone with no build.
import createClient from "openapi-fetch";

/**
 * @param {{ baseUrl: string; token?: string; fetch?: typeof fetch; headers?: Record<string, string> }} options
 * @returns {import("openapi-fetch").Client<import("./schema.js").paths>}
 */
export function createGpuleaseClient({ baseUrl, token, fetch: fetchImpl, headers = {} }) {
  return createClient({
    baseUrl: baseUrl.replace(/\/+$/, ""),
    headers: { ...(token ? { Authorization: `Bearer ${token}` } : {}), ...headers },
    ...(fetchImpl ? { fetch: fetchImpl } : {}),
  });
}
