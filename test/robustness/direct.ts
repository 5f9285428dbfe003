// The fetch handler called directly lives in test/helpers.ts now; these names stay for the suites that use them.
export { api as apiDirect, workerFetch } from "../helpers";
