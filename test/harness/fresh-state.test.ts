import { abortAllDurableObjects } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { api } from "../helpers";
import { freshState } from "../support/fresh";
import { rent, simBody } from "../support/lease";

// Files share one runtime and its modules (isolate: false); freshState() is what makes each
// start as if it had the runtime to itself (test/setup.ts runs it before every file).

/** An earlier file takes every RTX 4090 of the sim and lists the sim's offers (cached). */
async function earlierFileTakesEvery4090(): Promise<void> {
  const planted = await api("/v1/sim/machines", {
    method: "POST",
    json: { label: null, gpu: "rtx-4090", gpu_count: 8 },
  });
  expect(planted.status).toBe(201);
  expect((await api("/v1/offers?provider=sim")).status).toBe(200);
  expect((await rent(simBody())).status).toBe(409);
}

async function simMachines(): Promise<unknown[]> {
  return ((await (await api("/v1/sim")).json()) as { machines: unknown[] }).machines;
}

describe("freshState", () => {
  it("gives the next file an empty sim and no cached offer listing", async () => {
    await earlierFileTakesEvery4090();
    await freshState();
    expect(await simMachines()).toEqual([]);
    // Not answered from the earlier listing ("no offer matches the request").
    const res = await rent(simBody());
    expect(res.status, await res.clone().text()).toBe(202);
  });

  it("empties the sim even when its object is no longer live (evicted or aborted)", async () => {
    await earlierFileTakesEvery4090();
    await abortAllDurableObjects();
    await freshState();
    expect(await simMachines()).toEqual([]);
  });
});
