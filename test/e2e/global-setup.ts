import type { TestProject } from "vitest/node";
// @ts-expect-error: plain ESM helper shared with the benches, no type declarations
import { startWorker } from "../../scripts/lib/local-worker.mjs";

declare module "vitest" {
  export interface ProvidedContext {
    /** base URL of the worker under test, e.g. http://127.0.0.1:39123 */
    baseUrl: string;
    /** its ADMIN_TOKEN */
    adminToken: string;
  }
}

/** Starts one local worker (sim on, fast polls) for every e2e file and stops it afterwards. */
export default async function setup(project: TestProject) {
  const worker = await startWorker({
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
  });
  project.provide("baseUrl", worker.base);
  project.provide("adminToken", worker.admin);
  return async () => {
    await worker.stop();
  };
}
