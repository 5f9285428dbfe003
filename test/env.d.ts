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
