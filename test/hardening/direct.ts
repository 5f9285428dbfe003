import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import worker from "../../src/index";
import { ADMIN_TOKEN } from "../helpers";

/**
 * api() through the worker's fetch handler called directly, with its own ExecutionContext,
 * instead of SELF. SELF.fetch gets slower with every call made in a test file (in
 * @cloudflare/vitest-pool-workers 0.23: about 15 ms a request over the first 400 calls, 500 ms
 * after 1,600, and finally "Maximum call stack size exceeded"), so suites that send thousands of
 * requests use this. Same handler, same env, same Durable Objects.
 */
export async function apiDirect(
  path: string,
  init: RequestInit & { json?: unknown; token?: string | null } = {},
): Promise<Response> {
  const headers = new Headers(init.headers);
  const token = init.token === undefined ? ADMIN_TOKEN : init.token;
  if (token) headers.set("Authorization", `Bearer ${token}`);
  let body = init.body;
  if (init.json !== undefined) {
    headers.set("Content-Type", "application/json");
    body = JSON.stringify(init.json);
  }
  return workerFetch(new Request(`http://gpulease.test${path}`, { ...init, headers, body }));
}

/** Sends a Request to the worker's fetch handler and waits for its waitUntil work. */
export async function workerFetch(request: Request): Promise<Response> {
  const ctx = createExecutionContext();
  const response = await worker.fetch(request as Request<unknown, IncomingRequestCfProperties>, env, ctx);
  await waitOnExecutionContext(ctx);
  return response;
}
