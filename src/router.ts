import { OpenAPIHono, type Hook } from "@hono/zod-openapi";
import type { z } from "zod";
import { ApiError } from "./errors";
import type { AppEnv } from "./services";

/** Turns zod issues into the `issues` list of the 400 envelope: one entry per field. */
export function validationError(error: z.ZodError, where: string): ApiError {
  const issues = error.issues.map((issue) => ({
    path: issue.path.length ? issue.path.map(String).join(".") : where,
    message: issue.message,
  }));
  const first = issues[0];
  const summary = first ? `${first.path}: ${first.message}` : "invalid request";
  const more = issues.length > 1 ? ` (and ${issues.length - 1} more)` : "";
  return new ApiError("invalid_request", `invalid ${where}: ${summary}${more}`, { issues });
}

const defaultHook: Hook<unknown, AppEnv, string, unknown> = (result, _c) => {
  if (!result.success) {
    throw validationError(result.error as z.ZodError, result.target);
  }
};

/** Every router of the app: validation failures all become the same 400 envelope. */
export function createRouter() {
  return new OpenAPIHono<AppEnv>({ defaultHook });
}

/** The security requirement of every /v1 route in the OpenAPI document. */
export const bearerSecurity = [{ Bearer: [] }];
