import { createRouter } from "../router";

export const tokenRoutes = createRouter();
