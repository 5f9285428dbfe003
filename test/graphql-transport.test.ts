import { afterAll, beforeAll, describe } from "vitest";
import { overlayVars } from "../src/config";
import { freshState } from "./support/fresh";

/*
 * RunPod's GraphQL transport stays selectable until it retires. This file re-runs, with
 * RUNPOD_TRANSPORT=graphql laid over the env (overlayVars), the suites that take a RunPod
 * transport end to end. The tests and the worker share one isolate, so the worker and its
 * Durable Objects read the same overlay. Each suite starts from a fresh state, as it does as a
 * file of its own.
 */
const SUITES: Record<string, string> = {
  "the lease life (leases/providers.test.ts)": "./leases/providers.test.ts",
  "the reaper and stop-all (reaper/reaper.test.ts)": "./reaper/reaper.test.ts",
  "the RunPod fault matrix (robustness/faults-runpod.test.ts)": "./robustness/faults-runpod.test.ts",
};

/**
 * Files run one after another in a runtime that keeps its modules, and a module registers its
 * tests only when it is evaluated. The query makes this import a module of its own, so the suite
 * registers here even after (or before) the same file ran under its own name.
 */
const load = (file: string) => import(/* @vite-ignore */ `${file}?transport=graphql`);

beforeAll(() => overlayVars({ RUNPOD_TRANSPORT: "graphql" }));
afterAll(() => overlayVars({}));

for (const [name, file] of Object.entries(SUITES)) {
  describe(name, async () => {
    beforeAll(freshState);
    await load(file);
  });
}
