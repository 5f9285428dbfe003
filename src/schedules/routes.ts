import { createRouter } from "../router";

export const scheduleRoutes = createRouter();
