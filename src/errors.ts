import { z } from "@hono/zod-openapi";

/** Every error code of the API, with the HTTP status it is sent with. */
export const statusByCode = {
  invalid_request: 400,
  unauthorized: 401,
  budget_exceeded: 402,
  forbidden: 403,
  not_found: 404,
  no_capacity: 409,
  limit_reached: 409,
  conflict: 409,
  endpoint_exists: 409,
  lease_not_running: 409,
  rate_limited: 429,
  internal: 500,
  provider_error: 502,
  config_invalid: 503,
  endpoint_starting: 503,
  endpoint_unavailable: 503,
} as const;

export type ErrorCode = keyof typeof statusByCode;
export type ErrorStatus = (typeof statusByCode)[ErrorCode];

export const ErrorSchema = z
  .object({
    error: z.string().openapi({ example: "max_minutes: Too big: expected number to be <=10080" }),
    code: z.enum(Object.keys(statusByCode) as [ErrorCode, ...ErrorCode[]]),
    issues: z
      .array(z.object({ path: z.string(), message: z.string() }))
      .optional()
      .openapi({ description: "the fields that failed validation (invalid_request)" }),
    attempts: z
      .array(z.object({ offer_id: z.string(), error: z.string() }))
      .optional()
      .openapi({ description: "every rental attempt (no_capacity)" }),
    lease_id: z.string().optional(),
    request_id: z
      .string()
      .optional()
      .openapi({ description: "this request's id, also sent as X-Request-Id; quote it when reporting an error" }),
    retry_after: z
      .number()
      .int()
      .optional()
      .openapi({ description: "seconds to wait before retrying (rate_limited); also sent as the Retry-After header" }),
  })
  .openapi("Error");

export type ErrorBody = z.infer<typeof ErrorSchema>;

/** The one error class: thrown anywhere, rendered by app.onError into the envelope. */
export class ApiError extends Error {
  readonly status: ErrorStatus;
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly detail: Omit<ErrorBody, "error" | "code"> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "ApiError";
    this.status = statusByCode[code];
  }

  body(): ErrorBody {
    return { error: this.message, code: this.code, ...this.detail };
  }
}

const descriptions: Record<ErrorCode, string> = {
  invalid_request: "The request failed validation; `issues` names the fields.",
  unauthorized: "No token, or an unknown or revoked one.",
  budget_exceeded: "The rental would break the daily or monthly budget.",
  forbidden: "The token lacks the scope this route needs.",
  not_found: "No such object.",
  no_capacity: "No matching offer could be rented; `attempts` lists each try.",
  limit_reached: "Too many active leases.",
  conflict: "The request conflicts with the object's state.",
  endpoint_exists: "An endpoint with this name exists.",
  lease_not_running: "The lease is not running (yet, or any more): its model cannot be reached.",
  rate_limited: "Too many requests; see Retry-After.",
  internal: "Unexpected failure (logged).",
  provider_error: "A provider failed in a way the caller must know.",
  endpoint_starting: "The endpoint has no replica answering yet; one is starting (see Retry-After).",
  endpoint_unavailable:
    "The endpoint's replica starts keep failing: it rents nothing until changed or 15 minutes pass.",
  config_invalid:
    "A setting is malformed (`error` names it); caps and teardown keep running on the last valid settings.",
};

/** OpenAPI `responses` entries for the given error codes (codes sharing a status are merged). */
export function errorResponses(...codes: ErrorCode[]) {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of [
    "invalid_request",
    "unauthorized",
    "forbidden",
    "rate_limited",
    "internal",
    ...codes,
  ] as ErrorCode[]) {
    const list = byStatus.get(statusByCode[code]) ?? [];
    if (!list.includes(code)) list.push(code);
    byStatus.set(statusByCode[code], list);
  }
  const responses: Record<
    number,
    { description: string; content: { "application/json": { schema: typeof ErrorSchema } } }
  > = {};
  for (const [status, list] of byStatus) {
    responses[status] = {
      description: list.map((code) => `\`${code}\`: ${descriptions[code]}`).join(" "),
      content: { "application/json": { schema: ErrorSchema } },
    };
  }
  return responses;
}

/** The HTTP answer to a refused rental: its code names the status (statusByCode), its detail rides along. */
export function refusalError(refusal: { code: ErrorCode; message: string; detail: Record<string, unknown> }): ApiError {
  return new ApiError(refusal.code, refusal.message, refusal.detail);
}
