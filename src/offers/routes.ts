import { createRoute } from "@hono/zod-openapi";
import { requireScope } from "../auth/middleware";
import { ApiError, errorResponses, refusalError } from "../errors";
import { fitOn, sizeModel } from "../leases/model-sizing";
import { RentRefusal } from "../leases/refusal";
import { bearerSecurity, createRouter } from "../router";
import { toOffer } from "./rank";
import {
  DEFAULT_OFFER_LIMIT,
  MAX_OFFER_LIMIT,
  OffersQueryParamsSchema,
  OffersResponseSchema,
  OfferTypesResponseSchema,
} from "./schemas";
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
    const sizing = await sizeModel(services, {
      model,
      context_length,
      weights_gb: query.weights_gb,
      vram_gb: query.vram_gb,
    });
    if (sizing instanceof RentRefusal) throw refusalError(sizing);
    if (!sizing) throw new ApiError("invalid_request", "invalid query: model");
    // Ranked for these weights; the fit (per card count) is checked on every offer listed.
    const result = await listRankedOffers(services, {
      ...query,
      weights_gb: sizing.model.weights_gb,
      vram_gb: query.vram_gb ?? sizing.model.vram_need_gb ?? undefined,
      template: "ollama",
      limit: MAX_OFFER_LIMIT,
    });
    const offers = result.offers
      .map((offer) => ({ offer, fits: fitOn(sizing, offer.source) }))
      .filter((o) => o.fits !== null)
      .slice(0, query.limit ?? DEFAULT_OFFER_LIMIT)
      .map(({ offer, fits }) => ({ ...toOffer(offer), fits: fits ?? undefined }));
    return c.json({ ...result, offers }, 200);
  })
  .openapi(offerTypesRoute, async (c) => {
    return c.json(await listOfferTypes(c.get("services"), c.req.valid("query")), 200);
  });
