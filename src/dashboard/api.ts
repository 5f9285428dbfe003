import type { Context, ExecutionContext } from "hono";
import { actAs } from "../auth/internal";
import type { ApiFetch, DashEnv } from "./env";

export interface ApiProblem {
  status: number;
  error: string;
  code: string;
  issues?: { path: string; message: string }[];
}

export type ApiAnswer<T> = { ok: true; status: number; data: T } | { ok: false; status: number; problem: ApiProblem };

/**
 * Calls the HTTP API in-process as the signed-in session's caller: the same routes, scope policy,
 * rate limits, validation and keeper calls as a script with that token gets.
 */
export async function callApi<T>(
  c: Context<DashEnv>,
  fetchApi: ApiFetch,
  method: "GET" | "POST" | "PATCH" | "DELETE",
  path: string,
  json?: unknown,
  extraHeaders: Record<string, string> = {},
): Promise<ApiAnswer<T>> {
  const headers = new Headers({ ...extraHeaders, Accept: "application/json" });
  const requestId = c.req.header("x-request-id");
  if (requestId) headers.set("X-Request-Id", requestId);
  if (json !== undefined) headers.set("Content-Type", "application/json");
  const request = actAs(
    new Request(new URL(path, c.req.url), {
      method,
      headers,
      body: json === undefined ? undefined : JSON.stringify(json),
    }),
    c.get("session").caller,
  );
  let ctx: ExecutionContext | undefined;
  try {
    ctx = c.executionCtx;
  } catch {
    ctx = undefined;
  }
  const response = await fetchApi(request, c.env, ctx);
  const body = (await response.json().catch(() => null)) as unknown;
  if (response.ok) return { ok: true, status: response.status, data: body as T };
  const envelope = (body ?? {}) as Partial<ApiProblem>;
  return {
    ok: false,
    status: response.status,
    problem: {
      status: response.status,
      error: envelope.error ?? `the API answered ${response.status}`,
      code: envelope.code ?? "internal",
      issues: envelope.issues,
    },
  };
}
