import { defineConfig } from "vitest/config";

// End-to-end suites: plain Node processes (a browser, the CLI, webhook receivers) against one
// `wrangler dev` with the simulated cloud, started once by the global setup.
export default defineConfig({
  test: {
    include: ["test/e2e/**/*.test.ts"],
    environment: "node",
    globalSetup: ["./test/e2e/global-setup.ts"],
    // One worker serves every file: files run one after another so their leases do not mix.
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 120_000,
  },
});
