import { createRoute, z } from "@hono/zod-openapi";
import { HTTPException } from "hono/http-exception";
import { accountRoutes } from "./account/routes";
import { authenticate, enforceScope, rateLimit } from "./auth/middleware";
import { tokenRoutes } from "./auth/routes";
import { ConfigError, loadSettings } from "./config";
import { dashboardRoutes } from "./dashboard/routes";
import { docsPage } from "./docs/reference";
import { endpointGatewayRoutes } from "./endpoints/gateway";
import { endpointRoutes } from "./endpoints/routes";
import { ApiError } from "./errors";
import { gatewayRoutes } from "./gateway/routes";
import { leaseCallbackRoutes, leaseRoutes } from "./leases/routes";
import { boundedBody } from "./lib/body-bound";
import { createLogger } from "./lib/log";
import { requestIdOf } from "./lib/request-id";
import { secretsOfEnv } from "./lib/scrub";
import { offerRoutes } from "./offers/routes";
import { finishDocument } from "./openapi";
import { cloudLabels } from "./providers/catalogue";
import { reaperRoutes } from "./reaper/routes";
import { createRouter } from "./router";
import { scheduleRoutes } from "./schedules/routes";
import { createServices, type Services } from "./services";
import { simOllamaRoutes } from "./sim/ollama-routes";
import { simRoutes } from "./sim/routes";
import { VERSION } from "./version";
import { webhookRoutes } from "./webhooks/routes";

const healthRoute = createRoute({
  method: "get",
  path: "/health",
  tags: ["meta"],
  summary: "Liveness: no token needed",
  security: [],
  responses: {
    200: {
      description: "The worker answers.",
      content: { "application/json": { schema: z.object({ ok: z.literal(true), version: z.string() }) } },
    },
  },
});

export interface AppOptions {
  /** replaces the services built from env (tests inject clocks and fakes this way) */
  services?: (env: Env) => Services;
}

/** The whole HTTP surface: routes, auth, the error envelope and the OpenAPI document. */
export function createApp(options: AppOptions = {}) {
  const app = createRouter();

  // First: every response, errors and 404s included, names its request, and so does every log line.
  app.use("*", async (c, next) => {
    const requestId = requestIdOf(c.req.header("X-Request-Id"));
    c.set("requestId", requestId);
    c.header("X-Request-Id", requestId);
    await next();
  });

  app.use("*", async (c, next) => {
    const requestId = c.get("requestId");
    if (options.services) {
      const services = options.services(c.env);
      c.set("services", { ...services, log: services.log.with({ request_id: requestId }) });
      return next();
    }
    const { config, invalid } = loadSettings(c.env);
    const path = new URL(c.req.url).pathname;
    if (invalid.length && (path === "/health" || path.startsWith("/v1/"))) {
      // Nothing is rented or changed on settings nobody meant; keepers and the reaper go on.
      const error = `invalid configuration: ${invalid.join("; ")}`;
      envLogger(c.env, requestId).error("config_invalid", { error });
      const body =
        path === "/health"
          ? { ok: false as const, code: "config_invalid" as const, error, request_id: requestId }
          : { error, code: "config_invalid" as const, request_id: requestId };
      return c.json(body, 503);
    }
    const services = createServices(c.env, config);
    c.set("services", { ...services, log: services.log.with({ request_id: requestId }) });
    await next();
  });

  app.use("*", boundedBody);
  app.openapi(healthRoute, (c) => c.json({ ok: true as const, version: VERSION }, 200));

  // The LLM gateway authenticates with a lease's inference key (or an infer token), not /v1's;
  // endpoints' routes (/llm/v1/…, /llm/e/{name}/…) first, as /llm/{lease_id}/… would take them.
  app.route("/", endpointGatewayRoutes);
  app.route("/", gatewayRoutes);
  // The job's call-back carries its lease's own secret, not an API token: mounted before auth.
  app.route("/v1", leaseCallbackRoutes);
  app.use("/v1/*", authenticate);
  // Every authenticated request counts against its token's budget, then the central scope policy.
  app.use("/v1/*", rateLimit, enforceScope);
  app.route("/v1", offerRoutes);
  app.route("/v1", leaseRoutes);
  app.route("/v1", endpointRoutes);
  app.route("/v1", scheduleRoutes);
  app.route("/v1", reaperRoutes);
  app.route("/v1", accountRoutes);
  app.route("/v1", tokenRoutes);
  app.route("/v1", simRoutes);
  app.route("/", simOllamaRoutes);
  app.route("/v1", webhookRoutes);

  app.openAPIRegistry.registerComponent("securitySchemes", "Bearer", {
    type: "http",
    scheme: "bearer",
    description: "The ADMIN_TOKEN secret, or a scoped token (gl_...) made with POST /v1/tokens.",
  });
  const documentConfig = {
    openapi: "3.1.0",
    info: {
      title: "gpulease",
      version: VERSION,
      description: `Rent GPU machines from ${cloudLabels()}; every teardown verified.`,
    },
  };
  app.get("/openapi.json", (c) => c.json(finishDocument(app.getOpenAPI31Document(documentConfig))));
  app.get("/docs", docsPage);

  // The web dashboard at /: its pages call the routes above in-process, as the signed-in token.
  app.route(
    "/",
    dashboardRoutes((request, env, ctx) => Promise.resolve(app.fetch(request, env, ctx))),
  );

  app.notFound((c) =>
    c.json(
      {
        error: `no route for ${c.req.method} ${new URL(c.req.url).pathname}`,
        code: "not_found" as const,
        request_id: c.get("requestId"),
      },
      404,
    ),
  );

  app.onError((err, c) => {
    const request_id = c.get("requestId");
    if (err instanceof ApiError) {
      for (const [name, value] of Object.entries(err.headers)) c.header(name, value);
      return c.json({ ...err.body(), request_id }, err.status);
    }
    if (err instanceof HTTPException && err.status < 500) {
      // Hono's own 4xx (a body that is not JSON, a malformed header) get the same envelope.
      const code = err.status === 401 ? "unauthorized" : err.status === 404 ? "not_found" : "invalid_request";
      const status = code === "invalid_request" ? 400 : err.status;
      const error = err.message || "invalid request";
      // A body that is not JSON, or JSON sent as another content type: the body is the field.
      const issues = code === "invalid_request" ? [{ path: "body", message: error }] : undefined;
      return c.json({ error, code, ...(issues ? { issues } : {}), request_id }, status as 400 | 401 | 404);
    }
    // The services may be missing (a config that does not load): log with the env's secrets then.
    const log = c.get("services")?.log ?? envLogger(c.env, request_id);
    if (err instanceof ConfigError) {
      log.error("config_invalid", { error: err });
      return c.json({ error: err.message, code: "internal" as const, request_id }, 500);
    }
    // Unexpected: log the scrubbed message (never the stack or a secret), answer generically.
    log.error("internal_error", { method: c.req.method, path: new URL(c.req.url).pathname, error: err });
    return c.json({ error: "internal error; the request was logged", code: "internal" as const, request_id }, 500);
  });

  return app;
}

/** A logger for when the config did not load: it scrubs the secrets straight from the env. */
function envLogger(env: Env, requestId: string) {
  return createLogger(secretsOfEnv(env), { request_id: requestId });
}
