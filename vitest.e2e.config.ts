import { defineConfig } from "vitest/config";
import { longFirst } from "./test/support/long-first";

/**
 * The four suites that wait on sim boots of a minute or more, longest first; the short ones
 * follow one another in the fifth worker.
 */
const LONG_FIRST = [
  "test/e2e/dashboard.test.ts",
  "test/e2e/webhooks.test.ts",
  "test/e2e/cli.test.ts",
  "test/e2e/readme.test.ts",
];

// End-to-end suites: plain Node processes (a browser, the CLI, webhook receivers) against
// `wrangler dev` with the simulated cloud, started by the global setup: one worker per suite that
// rents, so the files run side by side (they mostly wait on the sim's real-time boot and retries).
export default defineConfig({
  test: {
    include: ["test/e2e/**/*.test.ts"],
    environment: "node",
    globalSetup: ["./test/e2e/global-setup.ts"],
    sequence: { sequencer: longFirst(LONG_FIRST) },
    maxWorkers: LONG_FIRST.length + 1,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
