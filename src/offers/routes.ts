import { createRouter } from "../router";

export const offerRoutes = createRouter();
