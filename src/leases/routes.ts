import { createRouter } from "../router";

/** Routes behind API-token auth. */
export const leaseRoutes = createRouter();

/** The job's own call-back, authorised by the lease's call-back token. */
export const leaseCallbackRoutes = createRouter();
