import type { TestProject } from "vitest/node";
// @ts-expect-error: plain ESM helper shared with the benches, no type declarations
import { startWorker } from "../../scripts/lib/local-worker.mjs";

/**
 * One local worker per suite that rents or stops leases (the CLI's stop-all stops every lease of
 * its worker), so the suites run side by side without seeing each other's leases. The short
 * read-only suites (health, openapi) use the CLI's.
 */
export const SUITES = ["cli", "dashboard", "webhooks"] as const;
export type Suite = (typeof SUITES)[number];

export interface LocalWorker {
  /** base URL of the worker under test, e.g. http://127.0.0.1:39123 */
  baseUrl: string;
  /** its ADMIN_TOKEN */
  adminToken: string;
}

declare module "vitest" {
  export interface ProvidedContext {
    workers: Record<Suite, LocalWorker>;
  }
}

/** Starts the local workers (sim on, fast polls) for the e2e files and stops them afterwards. */
export default async function setup(project: TestProject) {
  const started = await Promise.all(
    SUITES.map(() =>
      startWorker({
        sim: true,
        vars: [
          "--var",
          "MAX_ACTIVE_LEASES:50",
          "--var",
          "POLL_INTERVAL_S:1",
          "--var",
          "VERIFY_INTERVAL_S:1",
          "--var",
          "ALLOW_HTTP_WEBHOOKS:true",
        ],
      }),
    ),
  );
  project.provide(
    "workers",
    Object.fromEntries(
      SUITES.map((suite, i) => [suite, { baseUrl: started[i].base, adminToken: started[i].admin }]),
    ) as Record<Suite, LocalWorker>,
  );
  return async () => {
    await Promise.all(started.map((worker: { stop(): Promise<void> }) => worker.stop()));
  };
}
