declare namespace Cloudflare {
  interface Env {
    TEST_MIGRATIONS: D1Migration[];
    /** requests the bad-input fuzzer sends */
    FUZZ_RUNS: string;
    /** leases the keeper churn runs */
    CHURN_LEASES: string;
    /** scale-downs the endpoint suite runs (bench/endpoints.mjs asks for 20) */
    ENDPOINT_SCALE_DOWNS: string;
  }
}

/** The pool's own module (what `cloudflare:test` is built on); only what test/setup.ts uses. */
declare module "cloudflare:test-internal" {
  /** Waits for every `waitUntil` promise registered so far, Durable Objects' included. */
  export function waitForGlobalWaitUntil(): Promise<void>;
}
