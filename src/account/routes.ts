import { createRouter } from "../router";

export const accountRoutes = createRouter();
