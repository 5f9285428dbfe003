import { accessSync, constants } from "node:fs";
import { availableParallelism } from "node:os";
import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-pool-workers";
import { defineConfig, type TestProjectInlineConfiguration } from "vitest/config";
// @ts-expect-error: plain ESM script, also run on its own by npm scripts; no type declarations
import { copyDocsAssets } from "./scripts/docs-assets.mjs";
import { longFirst } from "./test/support/long-first";

/**
 * workerd keeps Durable Object and D1 storage as SQLite files under the temp folder (miniflare
 * reads TMPDIR when it starts a runtime). On Linux, unless TMPDIR is set, they go to shared
 * memory: writing them to disk took a quarter of the suites' time.
 */
function storageInMemory(): void {
  if (process.env.TMPDIR || process.platform !== "linux") return;
  try {
    accessSync("/dev/shm", constants.W_OK);
    process.env.TMPDIR = "/dev/shm";
  } catch {
    // no writable /dev/shm: stay on disk
  }
}
storageInMemory();
// /docs/api-reference.js, served by the runtime's static assets (wrangler.toml [assets]).
copyDocsAssets();

/**
 * Suites of pure modules (no bindings, no fetch, no Durable Objects): they run in Node and skip
 * workerd's start-up. Any other suite runs in workerd with the worker's bindings.
 */
const PURE_SUITES = [
  "test/account/spend.test.ts",
  "test/app/docs-assets.test.ts",
  "test/app/provider-names.test.ts",
  "test/auth/policy.test.ts",
  "test/auth/rate-window.test.ts",
  "test/cli/patient-fetch.test.ts",
  "test/endpoints/decide.test.ts",
  "test/gateway/stream-usage.test.ts",
  "test/gateway/usage.test.ts",
  "test/keeper/decide-creates.test.ts",
  "test/keeper/decide.test.ts",
  "test/keeper/meter.test.ts",
  "test/keeper/plan.test.ts",
  "test/leases/rental.test.ts",
  "test/models/gguf.test.ts",
  "test/models/need.test.ts",
  "test/models/reference.test.ts",
  "test/models/runner-pin.test.ts",
  "test/models/runner-table.test.ts",
  "test/offers/rank-measured.test.ts",
  "test/offers/rank.test.ts",
  "test/providers/gpu-memory-doc.test.ts",
  "test/providers/runpod-sizing.test.ts",
  "test/reaper/plan.test.ts",
  "test/schedules/plan.test.ts",
  "test/webhooks/signing.test.ts",
  "test/webhooks/url.test.ts",
];

async function workersProject(include: string[], exclude: string[]): Promise<TestProjectInlineConfiguration> {
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
            // Sim model leases size and pull from the registry fake, as real ones do; a suite of
            // the sim's own library lays SIM_MODELS=library over this (test/sim/library-offline.test.ts).
            SIM_MODELS: "registry",
            RUNPOD_GRAPHQL_URL: "http://runpod.fake/graphql",
            RUNPOD_API_URL: "http://runpod.fake",
            RUNPOD_TRANSPORT: "rest",
            VAST_API_URL: "http://vast.fake",
            VRAMFARM_API_URL: "http://vramfarm.fake/api",
            RUNPOD_PROXY_TEMPLATE: "http://{id}-{port}.proxy.runpod.fake",
            // Suites send many requests a minute with the admin token; test/auth lowers these per request.
            RATE_LIMIT_PER_MIN: "1000000",
            RENT_RATE_LIMIT_PER_MIN: "1000000",
            // Each gateway request's usage is sent as it ends (test/gateway/usage-hold.test.ts holds it).
            GATEWAY_USAGE_HOLD_MS: "0",
            // Requests the bad-input fuzzer sends (test/robustness/fuzz.test.ts); CI keeps at least 5,000.
            FUZZ_RUNS: process.env.FUZZ_RUNS ?? "5000",
            // Leases the keeper churn runs (test/keeper/churn.test.ts); `node bench/keeper-churn.mjs` runs 50.
            CHURN_LEASES: process.env.CHURN_LEASES ?? "4",
            // Scale-downs of test/endpoints/scale-down.test.ts; bench/endpoints.mjs runs 20.
            ENDPOINT_SCALE_DOWNS: process.env.ENDPOINT_SCALE_DOWNS ?? "3",
          },
          // Tripwire: a provider call that escapes the in-isolate fakes must never reach a network.
          outboundService: async (request: Request) =>
            new Response(`unmocked outbound request: ${request.method} ${request.url}`, { status: 599 }),
        },
      }),
    ],
    test: {
      name: "workers",
      setupFiles: ["./test/setup.ts"],
      include,
      exclude,
      // Lease-life tests drive hundreds of keeper alarms against D1; on a loaded 2-core machine
      // that can pass 5 s. Generous, since a hang is still caught.
      testTimeout: 30_000,
      // One workerd per vitest worker, reused by every file it runs: starting a runtime and
      // loading the worker's modules costs about 4 s a file, more than most files take. Each
      // file still starts from an empty ledger and fresh Durable Objects (test/setup.ts).
      isolate: false,
    },
  };
}

/** The files that take seconds, longest first (see test/support/long-first.ts). */
const LONG_FIRST = [
  "test/graphql-transport.test.ts",
  "test/robustness/fuzz.test.ts",
  "test/robustness/fuzz-registry-gateway.test.ts",
  "test/robustness/faults-runpod.test.ts",
  "test/robustness/faults-vramfarm.test.ts",
  "test/robustness/faults-vast.test.ts",
  "test/leases/sim-life.test.ts",
  "test/money-safety/crash-points-runpod.test.ts",
  "test/money-safety/crash-points-sim.test.ts",
  "test/money-safety/crash-points-vramfarm.test.ts",
  "test/money-safety/crash-points-vast.test.ts",
  "test/schedules/dispatcher.test.ts",
];
/** The Node suites first: a second of work while the first workerd starts. */
const PROJECT_ORDER = ["pure", "workers"];

export default defineConfig(async () => ({
  test: {
    sequence: { sequencer: longFirst(LONG_FIRST, PROJECT_ORDER) },
    // One more worker than cores: a workerd file waits on its storage and its runtime between
    // calls, and the extra worker fills those waits (on 2 cores, before storage moved to memory:
    // 2 workers 104 s, 3 workers 89 s, 4 workers 95 s). `--maxWorkers` overrides it.
    maxWorkers: availableParallelism() + 1,
    projects: [
      // Plain functions without state: one Node worker runs them all.
      { test: { name: "pure", environment: "node", include: PURE_SUITES, isolate: false } },
      await workersProject(["test/**/*.test.ts"], ["test/e2e/**", ...PURE_SUITES]),
    ],
  },
}));
