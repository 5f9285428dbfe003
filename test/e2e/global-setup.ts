import type { TestProject } from "vitest/node";
// @ts-expect-error: plain ESM helper shared with the benches, no type declarations
import { startFakeRegistry } from "../../bench/lib/fake-registry.mjs";
// @ts-expect-error: plain ESM helper shared with the benches, no type declarations
import { freePort, startWorker } from "../../scripts/lib/local-worker.mjs";

/**
 * One local worker per suite that rents or stops leases (the CLI's stop-all stops every lease of
 * its worker), so the suites run side by side without seeing each other's leases. The short
 * read-only suites (health, openapi) use the CLI's; the README's own "Try it" block gets one
 * of its own (it stops everything at its end).
 */
export const SUITES = ["cli", "dashboard", "webhooks", "model", "gateway", "readme"] as const;
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
    /** the model and gateway suites' Ollama registry (the fake, on loopback) */
    modelRegistryUrl: string;
  }
}

interface SuiteOptions {
  port?: number;
  vars: string[];
}

/**
 * A model suite's worker (model, gateway) sizes models from, and its sim machines pull from, the
 * registry fake on loopback; it answers at its own port (the sim's Ollama URLs name PUBLIC_URL). The gateway suite has a worker
 * of its own: the model suite finds its CLI-rented lease by model name among its worker's leases,
 * and both set the worker-wide sim config.
 */
async function modelSuite(registryUrl: string): Promise<SuiteOptions> {
  const port = (await freePort()) as number;
  return {
    port,
    vars: [
      "--var",
      `OLLAMA_REGISTRY_URL:${registryUrl}`,
      // the sim's machines pull from the fake too, not from the sim's own library
      "--var",
      "SIM_MODELS:registry",
      "--var",
      `PUBLIC_URL:http://127.0.0.1:${port}`,
    ],
  };
}

/**
 * One suite's worker. Six start side by side, each taking free ports as it goes, so a port found
 * free can be taken by another workerd before this one binds it: that start is tried again on
 * new ports (at most three times), never let fail the whole run.
 */
async function startSuite(suite: Suite, registryUrl: string) {
  for (let attempt = 1; ; attempt++) {
    const options: SuiteOptions =
      suite === "model" || suite === "gateway"
        ? await modelSuite(registryUrl)
        : // The CLI's `endpoint create` sizes its model at the registry: the fake.
          { vars: suite === "cli" ? ["--var", `OLLAMA_REGISTRY_URL:${registryUrl}`] : [] };
    try {
      return await startWorker({
        sim: true,
        port: options.port,
        // Every suite meets the default rate limits (60 requests, 10 rentals a minute), as a user does.
        liftRateLimits: false,
        keepWarm: true,
        vars: [
          "--var",
          "MAX_ACTIVE_LEASES:50",
          "--var",
          "POLL_INTERVAL_S:1",
          "--var",
          "VERIFY_INTERVAL_S:1",
          "--var",
          "ALLOW_HTTP_WEBHOOKS:true",
          ...options.vars,
        ],
      });
    } catch (error) {
      if (attempt >= 3 || !String(error).includes("Address already in use")) throw error;
    }
  }
}

/** Starts the local workers (sim on, fast polls) for the e2e files and stops them afterwards. */
export default async function setup(project: TestProject) {
  const registry = await startFakeRegistry();
  const started = await Promise.all(SUITES.map((suite) => startSuite(suite, registry.url)));
  project.provide(
    "workers",
    Object.fromEntries(
      SUITES.map((suite, i) => [suite, { baseUrl: started[i].base, adminToken: started[i].admin }]),
    ) as Record<Suite, LocalWorker>,
  );
  project.provide("modelRegistryUrl", registry.url);
  return async () => {
    await Promise.all(started.map((worker: { stop(): Promise<void> }) => worker.stop()));
    await registry.close();
  };
}
