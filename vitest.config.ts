import { availableParallelism } from "node:os";
import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-pool-workers";
import { defineConfig, type TestProjectInlineConfiguration } from "vitest/config";

/**
 * Suites of pure modules (no bindings, no fetch, no Durable Objects): they run in Node and skip
 * workerd's start-up. Any other suite runs in workerd with the worker's bindings.
 */
const PURE_SUITES = [
  "test/auth/policy.test.ts",
  "test/auth/rate-window.test.ts",
  "test/keeper/decide.test.ts",
  "test/offers/rank.test.ts",
  "test/providers/runpod-sizing.test.ts",
  "test/reaper/plan.test.ts",
  "test/schedules/plan.test.ts",
];

/**
 * The fault matrix is the longest file by far; it runs once per provider (FAULT_PROVIDERS), as
 * three projects, so that its parts share the workers with the other files instead of being the
 * last one left running.
 */
const FAULT_MATRIX = "test/robustness/faults.test.ts";
const FAULT_PROVIDERS = ["runpod", "vast", "vramfarm"];

async function workersProject(
  name: string,
  include: string[],
  exclude: string[],
  extraBindings: Record<string, string> = {},
): Promise<TestProjectInlineConfiguration> {
  return {
    plugins: [
      cloudflareTest({
        wrangler: { configPath: "./wrangler.toml" },
        remoteBindings: false,
        miniflare: {
          bindings: {
            TEST_MIGRATIONS: await readD1Migrations("./migrations"),
            ADMIN_TOKEN: "test-admin-token-0123456789",
            RUNPOD_API_KEY: "rpa_TESTKEY_runpod_0123456789",
            VAST_API_KEY: "vast-test-key-0123456789abcdef",
            VRAMFARM_TOKEN: "gf_live_testtoken0123456789",
            ENABLE_SIM: "true",
            RUNPOD_GRAPHQL_URL: "http://runpod.fake/graphql",
            RUNPOD_API_URL: "http://runpod.fake",
            RUNPOD_TRANSPORT: "rest",
            VAST_API_URL: "http://vast.fake",
            VRAMFARM_API_URL: "http://vramfarm.fake/api",
            RUNPOD_PROXY_TEMPLATE: "http://{id}-{port}.proxy.runpod.fake",
            // Suites send many requests a minute with the admin token; test/auth lowers these per request.
            RATE_LIMIT_PER_MIN: "1000000",
            RENT_RATE_LIMIT_PER_MIN: "1000000",
            // Requests the bad-input fuzzer sends (test/robustness/fuzz.test.ts); CI keeps at least 5,000.
            FUZZ_RUNS: process.env.FUZZ_RUNS ?? "5000",
            FAULT_PROVIDERS: FAULT_PROVIDERS.join(","),
            ...extraBindings,
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
      exclude,
      // Lease-life tests drive hundreds of keeper alarms against D1; on a loaded 2-core machine
      // that can pass 5 s. Generous, since a hang is still caught.
      testTimeout: 30_000,
    },
  };
}

/**
 * The suites that also run with RUNPOD_TRANSPORT=graphql (GraphQL stays selectable until it
 * retires): the whole lease life, the reaper with stop-all, and the fault matrix's RunPod cells.
 */
const BOTH_TRANSPORTS = ["test/leases/providers.test.ts", "test/reaper/reaper.test.ts"];

export default defineConfig(async () => ({
  test: {
    // Vitest's default is one worker less than the cores: one file at a time on 2 cores. A workerd
    // file spends part of its time starting up and waiting on its runtime, so two overlap well.
    maxWorkers: Math.max(2, availableParallelism()),
    projects: [
      { test: { name: "pure", environment: "node", include: PURE_SUITES } },
      await workersProject("workers", ["test/**/*.test.ts"], ["test/e2e/**", FAULT_MATRIX, ...PURE_SUITES]),
      ...(await Promise.all(
        FAULT_PROVIDERS.map((provider) =>
          workersProject(`faults-${provider}`, [FAULT_MATRIX], [], { FAULT_PROVIDERS: provider }),
        ),
      )),
      await workersProject("graphql", BOTH_TRANSPORTS, [], { RUNPOD_TRANSPORT: "graphql" }),
      await workersProject("faults-runpod-graphql", [FAULT_MATRIX], [], {
        FAULT_PROVIDERS: "runpod",
        RUNPOD_TRANSPORT: "graphql",
      }),
    ],
  },
}));
