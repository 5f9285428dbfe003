import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { RENT_DEADLINE_MS } from "../../src/leases/create";
import { ProviderError } from "../../src/providers/http";
import {
  CREATE_RATE_LIMIT_WAIT_MS,
  createRunpodRestProvider,
  type RunpodRestOptions,
} from "../../src/providers/runpod-rest";
import type { MachineSpec } from "../../src/providers/types";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RUNPOD_FAKE_KEY, RunpodFake } from "../fakes/runpod";
import { tooManyRequests } from "../fakes/runpod-rest";
import { ollamaSpec, runpodOffer } from "../support/provider-fixtures";

// RunPod REST v2 as the live service and runpodctl behave: docs/providers.md#runpod-rest-v2.

const T0 = Date.parse("2026-11-29T02:00:00Z");

let fake: RunpodFake;
let installed: InstalledFakes;
let sleeps: number[];

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(T0);
  fake = new RunpodFake();
  installed = installFakes(fake);
  sleeps = [];
});

afterEach(() => {
  installed.restore();
  vi.useRealTimers();
});

function runpod(overrides: Partial<RunpodRestOptions> = {}) {
  return createRunpodRestProvider({
    apiKey: RUNPOD_FAKE_KEY,
    baseUrl: "http://runpod.fake",
    proxyTemplate: "http://{id}-{port}.proxy.runpod.fake",
    minCudaVersion: "12.4",
    balance: async () => ({ amount: 1, currency: "USD" }),
    timeoutMs: 200,
    sleep: async (ms) => {
      sleeps.push(ms);
    },
    ...overrides,
  });
}

const spec = (overrides: Partial<MachineSpec> = {}) =>
  ollamaSpec({ label: "gl-ollama-0001", image: "ollama/ollama:0.11.4", env: {}, disk_gb: 20, ...overrides });

async function rentOne(s = spec()): Promise<string> {
  const result = await runpod().rent(runpodOffer(), s);
  if (!result.ok) throw new Error(`rent failed: ${result.error}`);
  return result.ref;
}

describe("429 is back off and resume (docs/providers.md#runpod-rate-limits)", () => {
  it("a create answered 429 with Retry-After: 12 waits it out and rents the same offer", async () => {
    fake.fault("deploy", tooManyRequests(12));
    const result = await runpod().rent(runpodOffer(), spec());
    expect(result).toMatchObject({ ok: true });
    expect(sleeps).toEqual([12_000]);
    expect(fake.calls("deploy").map((r) => r.status)).toEqual([429, 201]);
    expect(fake.model.list()).toHaveLength(1);
  });

  it("two 429s of 2 s each: the third create rents", async () => {
    fake.fault("deploy", tooManyRequests(2), 2);
    expect(await runpod().rent(runpodOffer(), spec())).toMatchObject({ ok: true });
    expect(sleeps).toEqual([2_000, 2_000]);
  });

  it("a Retry-After past the create's budget is refused at once: no wait, no pod, not ambiguous", async () => {
    fake.fault("deploy", tooManyRequests(30));
    const result = await runpod().rent(runpodOffer(), spec());
    expect(result).toMatchObject({ ok: false, kind: "rejected" });
    expect(sleeps).toEqual([]);
    expect(fake.model.list()).toHaveLength(0);
  });

  it("the create's wait budget fits inside the rent's deadline", () => {
    expect(CREATE_RATE_LIMIT_WAIT_MS).toBeLessThan(RENT_DEADLINE_MS);
  });

  it("a keeper's status read waits out a short Retry-After", async () => {
    const ref = await rentOne();
    fake.fault("pod", tooManyRequests(1));
    expect((await runpod().status(ref)).state).toBe("running");
    expect(sleeps).toEqual([1_000]);
  });

  it("a keeper's read under a long Retry-After ends as rate_limited without sleeping (the next alarm retries)", async () => {
    const ref = await rentOne();
    fake.fault("pod", tooManyRequests(12));
    fake.fault("terminate", tooManyRequests(60));
    const read = await runpod()
      .status(ref)
      .catch((e: unknown) => e);
    expect(read).toBeInstanceOf(ProviderError);
    expect((read as ProviderError).kind).toBe("rate_limited");
    await expect(runpod().terminate(ref)).rejects.toMatchObject({ kind: "rate_limited" });
    expect(sleeps).toEqual([]);
    expect(fake.model.list()).toHaveLength(1);
  });
});
