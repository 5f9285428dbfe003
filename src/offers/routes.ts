import { createRoute } from "@hono/zod-openapi";
import { requireScope } from "../auth/middleware";
import { errorResponses } from "../errors";
import { bearerSecurity, createRouter } from "../router";
import { listModelOffers } from "./model-offers";
import { toOffer } from "./rank";
import { OffersQueryParamsSchema, OffersResponseSchema, OfferTypesResponseSchema } from "./schemas";
import { listOfferTypes, listRankedOffers } from "./service";

const offersRoute = createRoute({
  method: "get",
  path: "/offers",
  tags: ["offers"],
  summary: "Live offers from every configured provider, best value first",
  description:
    "A provider that fails, times out or is not configured is listed in `errors` and never fails the request. " +
    "Listings come from one cache shared by every instance of the worker (OFFERS_CACHE_S, default 30 s).",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  request: { query: OffersQueryParamsSchema },
  responses: {
    200: { description: "Ranked offers.", content: { "application/json": { schema: OffersResponseSchema } } },
    ...errorResponses("forbidden", "invalid_request", "provider_error"),
  },
});

const offerTypesRoute = createRoute({
  method: "get",
  path: "/offer-types",
  tags: ["offers"],
  summary: "One entry per GPU type: its cheapest offer and how many offers there are",
  security: bearerSecurity,
  middleware: [requireScope("read")] as const,
  request: { query: OffersQueryParamsSchema.omit({ limit: true, model: true, context_length: true }) },
  responses: {
    200: {
      description: "GPU types, best value first.",
      content: { "application/json": { schema: OfferTypesResponseSchema } },
    },
    ...errorResponses("forbidden"),
  },
});

export const offerRoutes = createRouter()
  .openapi(offersRoute, async (c) => {
    const services = c.get("services");
    const { model, context_length, ...query } = c.req.valid("query");
    if (!model) {
      const result = await listRankedOffers(services, query);
      return c.json({ ...result, offers: result.offers.map(toOffer) }, 200);
    }
    return c.json(await listModelOffers(services, { model, context_length }, query), 200);
  })
  .openapi(offerTypesRoute, async (c) => {
    return c.json(await listOfferTypes(c.get("services"), c.req.valid("query")), 200);
  });
