declare namespace Cloudflare {
  interface Env {
    TEST_MIGRATIONS: D1Migration[];
    /** requests the bad-input fuzzer sends */
    FUZZ_RUNS: string;
    /** the providers the fault matrix covers in this project, comma-separated */
    FAULT_PROVIDERS: string;
  }
}
