import { createRoute, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/middleware";
import { errorResponses } from "../errors";
import { ProviderNameSchema } from "../providers/types";
import { bearerSecurity, createRouter, jsonResponse, limitQuery } from "../router";
import { listReaperRuns, ReaperRunSchema } from "./runs";
import { stopAll } from "./stop-all";

const RunsQuery = z.strictObject({
  limit: limitQuery(20),
});

const listRunsRoute = createRoute({
  method: "get",
  path: "/reaper/runs",
  tags: ["reaper"],
  summary: "What each reaper run saw and did, newest first",
  description:
    "Each run lists every provider's own machines once (a failed listing is reported and nothing is concluded from it) and diffs them with the ledger. `outcome: reported` means REAPER_MODE=report: nothing was done.",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  request: { query: RunsQuery },
  responses: {
    200: jsonResponse(z.object({ runs: z.array(ReaperRunSchema) }), "The runs."),
    ...errorResponses("forbidden"),
  },
});

const StopAllSchema = z
  .object({
    ok: z.literal(true),
    leases: z.number().int().openapi({ description: "active leases asked to stop" }),
    machines: z.number().int().openapi({
      description: "machines with our label prefix found at the providers, all now torn down with verification",
    }),
    errors: z.array(z.object({ provider: ProviderNameSchema, error: z.string() })).openapi({
      description:
        "providers whose listing failed, or stopped at its page bound: call again, some of their machines were not found this time",
    }),
  })
  .openapi("StopAll");

const stopAllRoute = createRoute({
  method: "post",
  path: "/leases/stop-all",
  tags: ["leases"],
  summary: "Stop everything",
  description:
    "Stops every active lease and tears down every machine at any provider that carries our label prefix (unknown ones are adopted as leases with stop_reason `reaper`). Teardown is verified as for a single stop.",
  security: bearerSecurity,
  middleware: [requireScope("admin")] as const,
  responses: { 200: jsonResponse(StopAllSchema, "Everything is being torn down."), ...errorResponses("forbidden") },
});

export const reaperRoutes = createRouter()
  .openapi(listRunsRoute, async (c) => {
    const runs = await listReaperRuns(c.get("services").db, c.req.valid("query").limit ?? 20);
    return c.json({ runs }, 200);
  })
  .openapi(stopAllRoute, async (c) => c.json(await stopAll(c.get("services")), 200));
