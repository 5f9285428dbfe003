import type { MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { internalCallerOf } from "../auth/internal";
import { ApiError } from "../errors";

/**
 * Every request body the worker reads has a bound, read as a stream and cut there (a declared
 * Content-Length above it is refused unread): sign-in before anything else is looked at, the
 * dashboard's forms, the API, and what the gateway sends on to a machine (docs/architecture.md).
 */
const KIB = 1024;
export const BODY_BOUNDS = {
  /** a token and where to go next */
  login: 8 * KIB,
  /** the dashboard's forms (a rent form with its env values is the largest) */
  dashboard: 256 * KIB,
  /** the API's JSON bodies */
  api: 1024 * KIB,
  /** a prompt or a batch to embed, sent on to the lease's machine */
  gateway: 8 * 1024 * KIB,
} as const;

const limits = new Map(
  Object.entries(BODY_BOUNDS).map(([where, maxSize]) => [
    where,
    bodyLimit({
      maxSize,
      onError: () => {
        const error = `the request body is larger than ${maxSize / KIB} KiB`;
        throw new ApiError("invalid_request", error, { issues: [{ path: "body", message: error }] });
      },
    }),
  ]),
);

function boundOf(path: string): keyof typeof BODY_BOUNDS {
  if (path.startsWith("/llm/")) return "gateway";
  if (path === "/login") return "login";
  if (path.startsWith("/v1/") || path === "/v1") return "api";
  return "dashboard";
}

/** Middleware for every route: the bound of the request's path. */
export const boundedBody: MiddlewareHandler = async (c, next) => {
  const limit = limits.get(boundOf(c.req.path));
  // The dashboard's in-process API calls carry a form already read within its own bound, and are
  // known by their Request object, which a re-read body would replace.
  if (!limit || !c.req.raw.body || internalCallerOf(c.req.raw)) return next();
  return limit(c, next);
};
