import { env } from "cloudflare:workers";
import { afterEach, beforeEach, expect } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { simCloud } from "../../src/sim/cloud";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { OllamaRegistryFake } from "../fakes/ollama-registry";
import { api } from "../helpers";
import type { TestClock } from "./clock";
import { driveTo } from "./keeper";
import { rent } from "./lease";

/**
 * A suite of sim model leases on `clock`: the registry fake and a quick sim (20 s boot, 5 s to
 * Ollama) per test, every lease stopped and its teardown driven to the end after each. Returns the
 * rental of one running model lease (its id and inference key).
 */
export function simModelLeases(clock: TestClock, model: string): () => Promise<{ id: string; key: string }> {
  let fakes: InstalledFakes;
  beforeEach(async () => {
    clock.install();
    clock.advance(3_600_000);
    fakes = installFakes(new OllamaRegistryFake());
    await simCloud(env.SIM_CLOUD).reset();
    await simCloud(env.SIM_CLOUD).configure({
      bootSeconds: 20,
      readySeconds: 5,
      lingerSeconds: 0,
      creditUsd: 100_000,
      downloadMbs: 500,
    });
  });
  afterEach(async () => {
    const leases = ((await (await api("/v1/leases?limit=200")).json()) as { leases: Lease[] }).leases;
    for (const lease of leases) {
      if (lease.status === "stopped") continue;
      await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
      await driveTo(lease.id, "stopped", { clock, maxAlarms: 400 });
    }
    fakes.restore();
  });
  return async () => {
    const res = await rent({ provider: "sim", model, max_minutes: 30 });
    const body = (await res.json()) as Lease & { inference_key: string };
    expect(res.status).toBe(202);
    await driveTo(body.id, "running", { clock, maxAlarms: 200 });
    return { id: body.id, key: body.inference_key };
  };
}
