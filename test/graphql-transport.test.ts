import { beforeAll, describe } from "vitest";
import { freshState } from "./support/fresh";

/*
 * RunPod's GraphQL transport stays selectable until it retires. The vitest project "graphql"
 * (RUNPOD_TRANSPORT=graphql, see vitest.config.ts) runs this one file, which re-runs the suites
 * that take a RunPod transport end to end; one file, so that project starts one workerd, not one
 * per suite. Each suite starts from a fresh state, as it does as a file of its own.
 */
const SUITES: Record<string, () => Promise<unknown>> = {
  "the lease life (leases/providers.test.ts)": () => import("./leases/providers.test"),
  "the reaper and stop-all (reaper/reaper.test.ts)": () => import("./reaper/reaper.test"),
  "the RunPod fault matrix (robustness/faults-runpod.test.ts)": () => import("./robustness/faults-runpod.test"),
};

for (const [name, load] of Object.entries(SUITES)) {
  describe(name, async () => {
    beforeAll(freshState);
    await load();
  });
}
