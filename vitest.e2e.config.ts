import { defineConfig } from "vitest/config";

// End-to-end suites: plain Node processes (a browser, the CLI, webhook receivers) against
// `wrangler dev` with the simulated cloud, started by the global setup: one worker per suite that
// rents, so the files run side by side (they mostly wait on the sim's real-time boot and retries).
export default defineConfig({
  test: {
    include: ["test/e2e/**/*.test.ts"],
    environment: "node",
    globalSetup: ["./test/e2e/global-setup.ts"],
    maxWorkers: 4,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
