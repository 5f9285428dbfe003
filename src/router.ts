import { type Hook, OpenAPIHono, z } from "@hono/zod-openapi";
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

/** A JSON response entry of an OpenAPI route. */
export const jsonResponse = <T extends z.ZodType>(schema: T, description: string) => ({
  description,
  content: { "application/json": { schema } },
});

/** The `{id}` path parameter; `example` shows the id's shape (lse_..., sch_...). */
export const idParams = (example: string) =>
  z.object({ id: z.string().openapi({ param: { name: "id", in: "path" }, example }) });

/** The `limit` query parameter of a list route: a whole number from 1 to 200. */
export const limitQuery = (defaultLimit: number) =>
  z
    .string()
    .regex(/^\d{1,3}$/, "expected a whole number")
    .transform(Number)
    .pipe(z.number().int().min(1).max(200))
    .optional()
    .openapi({ type: "integer", description: `default ${defaultLimit}, max 200`, example: defaultLimit });
