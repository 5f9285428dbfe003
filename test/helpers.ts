import { createExecutionContext, SELF, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import worker from "../src/index";

export const ADMIN_TOKEN = "test-admin-token-0123456789";
export const PROVIDER_SECRETS = [
  "rpa_TESTKEY_runpod_0123456789",
  "vast-test-key-0123456789abcdef",
  "gf_live_testtoken0123456789",
];

export type ApiInit = RequestInit & { json?: unknown; token?: string | null };

/** A request to the worker, as the admin by default (`token: null` for none). */
export function apiRequest(path: string, init: ApiInit = {}): Request {
  const headers = new Headers(init.headers);
  const token = init.token === undefined ? ADMIN_TOKEN : init.token;
  if (token) headers.set("Authorization", `Bearer ${token}`);
  let body = init.body;
  if (init.json !== undefined) {
    headers.set("Content-Type", "application/json");
    body = JSON.stringify(init.json);
  }
  return new Request(`http://gpulease.test${path}`, { ...init, headers, body });
}

/**
 * A request through the worker's own fetch handler (same handler, env and Durable Objects as
 * SELF), waiting for its waitUntil work. SELF.fetch once got slower with every call a runtime
 * served (a Proxy more per call in @cloudflare/vitest-pool-workers 0.23, patched on install by
 * scripts/patch-test-deps.mjs); the direct call also skips a hop, which suites that read the
 * lease after each of hundreds of alarms notice.
 */
export async function api(path: string, init: ApiInit = {}): Promise<Response> {
  return workerFetch(apiRequest(path, init));
}

/** api() through SELF.fetch, the runtime's own entry, for the few checks that need it. */
export async function apiViaSelf(path: string, init: ApiInit = {}): Promise<Response> {
  return SELF.fetch(apiRequest(path, init));
}

/** Sends a Request to the worker's fetch handler and waits for its waitUntil work. */
export async function workerFetch(request: Request): Promise<Response> {
  const ctx = createExecutionContext();
  const response = await worker.fetch(request as Request<unknown, IncomingRequestCfProperties>, env, ctx);
  await waitOnExecutionContext(ctx);
  return response;
}

/** Asserts the error envelope and returns it. */
export async function errorBody(
  res: Response,
): Promise<{ error: string; code: string; issues?: { path: string; message: string }[] }> {
  const body = (await res.json()) as { error: string; code: string; issues?: { path: string; message: string }[] };
  if (typeof body.error !== "string" || typeof body.code !== "string") {
    throw new Error(`not an error envelope: ${JSON.stringify(body)}`);
  }
  return body;
}
