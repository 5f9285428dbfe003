import { ApiError } from "../errors";

/**
 * The gateway's own errors in the shape of the API the caller speaks, so its client reads them as
 * it reads the server's: OpenAI's `{"error": {"message", "type", "param", "code"}}` on `/v1`
 * (ollama/ollama `openai/openai.go` ErrorResponse; the `openai` npm client reads `message`, `type`
 * and `code` from it) and Ollama's `{"error": "<message>"}` on `/api` (`server/routes.go`). The
 * status and headers (WWW-Authenticate, Retry-After) are the gpulease error's; `code` is its code.
 */

export type GatewayDialect = "openai" | "ollama";

/** The dialect of a gateway path after `/llm/{lease_id}/`, or null (then gpulease's own envelope). */
export function dialectOf(rest: string): GatewayDialect | null {
  const root = rest.split("/")[0];
  return root === "v1" ? "openai" : root === "api" ? "ollama" : null;
}

/** OpenAI's error `type` for a status (its API reference, "Error codes"). */
function openaiType(status: number): string {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 409:
      return "conflict_error";
    case 429:
      return "rate_limit_error";
    default:
      return "api_error";
  }
}

export function gatewayErrorResponse(error: ApiError, dialect: GatewayDialect): Response {
  const body =
    dialect === "openai"
      ? { error: { message: error.message, type: openaiType(error.status), param: null, code: error.code } }
      : { error: error.message };
  const headers = new Headers(error.headers);
  headers.set("Content-Type", "application/json; charset=utf-8");
  return new Response(JSON.stringify(body), { status: error.status, headers });
}

/** Runs a gateway handler; an ApiError it throws is answered in the caller's dialect. */
export async function inDialect(rest: string, handler: () => Promise<Response>): Promise<Response> {
  const dialect = dialectOf(rest);
  try {
    return await handler();
  } catch (error) {
    if (dialect === null || !(error instanceof ApiError)) throw error;
    return gatewayErrorResponse(error, dialect);
  }
}
