import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";

/** The suites that also run with RUNPOD_TRANSPORT=graphql: the whole lease life, the reaper, stop-all and the fault matrix. */
const BOTH_TRANSPORTS = [
  "test/leases/providers.test.ts",
  "test/reaper/reaper.test.ts",
  "test/hardening/faults.test.ts",
];

export default defineConfig(async () => {
  const migrations = await readD1Migrations("./migrations");
  const project = (name: string, include: string[], vars: Record<string, string>) => ({
    plugins: [
      cloudflareTest({
        wrangler: { configPath: "./wrangler.toml" },
        remoteBindings: false,
        miniflare: {
          bindings: {
            TEST_MIGRATIONS: migrations,
            ADMIN_TOKEN: "test-admin-token-0123456789",
            RUNPOD_API_KEY: "rpa_TESTKEY_runpod_0123456789",
            VAST_API_KEY: "vast-test-key-0123456789abcdef",
            VRAMFARM_TOKEN: "gf_live_testtoken0123456789",
            ENABLE_SIM: "true",
            RUNPOD_GRAPHQL_URL: "http://runpod.fake/graphql",
            RUNPOD_API_URL: "http://runpod.fake",
            VAST_API_URL: "http://vast.fake",
            VRAMFARM_API_URL: "http://vramfarm.fake/api",
            RUNPOD_PROXY_TEMPLATE: "http://{id}-{port}.proxy.runpod.fake",
            // Suites send many requests a minute with the admin token; test/auth lowers these per request.
            RATE_LIMIT_PER_MIN: "1000000",
            RENT_RATE_LIMIT_PER_MIN: "1000000",
            ...vars,
          },
          // Tripwire: a provider call that escapes the in-isolate fakes must never reach a network.
          outboundService: async (request: Request) =>
            new Response(`unmocked outbound request: ${request.method} ${request.url}`, { status: 599 }),
        },
      }),
    ],
    test: {
      name,
      setupFiles: ["./test/setup.ts"],
      include,
      exclude: ["test/e2e/**"],
      // Lease-life tests drive hundreds of keeper alarms against D1; on a loaded 2-core machine
      // that can pass 5 s. Generous, since a hang is still caught.
      testTimeout: 30_000,
    },
  });
  return {
    test: {
      projects: [
        project("rest", ["test/**/*.test.ts"], { RUNPOD_TRANSPORT: "rest" }),
        project("graphql", BOTH_TRANSPORTS, { RUNPOD_TRANSPORT: "graphql" }),
      ],
    },
  };
});
