import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { CrashFake, CrashSwitch, rentWithCrash } from "../money-safety/crash";
import { TestClock } from "../robustness/drive";
import { batchBody } from "../support/lease";

// What one rental costs the worker's own invocation in round trips (each D1 call is CPU and
// latency in the request; bench/cpu.mjs measures the CPU): counted at the request's bindings by a
// dry run of the crash-point harness, which crashes nowhere.

const clock = new TestClock();
let installed: InstalledFakes | null = null;
let current: CrashSwitch | null = null;

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  installed = installFakes(new CrashFake(() => current, new RunpodFake({ quirks: { bootMs: 30_000 } }), "runpod"));
  await env.DB.prepare("UPDATE leases SET status = 'stopped' WHERE status != 'stopped'").run();
});

afterEach(() => {
  installed?.restore();
  installed = null;
});

describe("a rental's round trips", () => {
  it("a RunPod rental that answers at once: four D1 calls, two keeper calls, one create", async () => {
    current = new CrashSwitch({ at: 0, mode: "fail" }, async () => {});
    const answer = await rentWithCrash(current, batchBody("runpod"));
    const seen = current.seen;
    current = null;
    expect(answer.status).toBe(202);
    expect((answer.body as { provider_ref: string | null }).provider_ref).toBeTruthy();
    // The measured bandwidths, the lease's insert with its "created" event, the write-ahead
    // create record, the claim with its holder read in the same batch; the answer's create records
    // come back with the keeper's settlement (no read of its own).
    expect(
      seen.filter((label) => label.startsWith("d1 ")),
      seen.join(", "),
    ).toHaveLength(4);
    expect(
      seen.filter((label) => label.startsWith("keeper ")),
      seen.join(", "),
    ).toEqual(["keeper start", "keeper settle"]);
    expect(seen.filter((label) => label.startsWith("fetch ")).length, seen.join(", ")).toBeGreaterThanOrEqual(1);
  });
});
