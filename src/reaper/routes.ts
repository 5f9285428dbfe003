import { createRouter } from "../router";

export const reaperRoutes = createRouter();
