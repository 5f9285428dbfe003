import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { newId } from "../../src/lib/ids";
import { POD_PAGES_PER_CALL } from "../../src/providers/runpod-rest";
import { LISTING_CALLS_PER_RUN } from "../../src/reaper/listings";
import type { ReaperProvider, ReaperRun } from "../../src/reaper/runs";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VastFake } from "../fakes/vast";
import { VramfarmFake } from "../fakes/vramfarm";
import { api } from "../helpers";
import { clock, drainLeases, driveUntil, fireCron, getLease, resetSim, useFakeClock } from "../schedules/support";
import { batchBody, rentOk } from "../support/lease";

// The reaper and stop-all over RunPod REST v2's paged pod listing (docs/architecture.md, "The
// reaper's listing cursor"; docs/providers.md#runpod-rest-pages). The bound on pages per
// listing is the adapter's constant; a page size of 1 makes it reachable with a few pods.

const REAPER = "*/10 * * * *";
/** Pages one run reads at most: the adapter's bound per call × the calls chained in a run. */
const RUN_PAGES = POD_PAGES_PER_CALL * LISTING_CALLS_PER_RUN;
const GRACE_S = 15 * 60;

let runpod: RunpodFake;
let fakes: InstalledFakes;
let start = Date.parse("2032-02-01T00:00:00Z");

beforeEach(async () => {
  start += 24 * 3_600_000;
  useFakeClock(start);
  await resetSim();
  runpod = new RunpodFake();
  // Every configured provider answers, so a run's errors are RunPod's alone.
  fakes = installFakes(runpod, new VastFake(), new VramfarmFake());
});

afterEach(async () => {
  await drainLeases();
  fakes.restore();
});

async function reap(): Promise<ReaperRun> {
  await fireCron(REAPER, clock.now);
  const { runs } = (await (await api("/v1/reaper/runs?limit=1")).json()) as { runs: ReaperRun[] };
  return runs[0]!;
}

const runpodOf = (run: ReaperRun): ReaperProvider | undefined => run.providers.find((p) => p.provider === "runpod");
const adoptedRefs = (run: ReaperRun) =>
  run.actions.filter((a) => a.kind === "adopt" && a.provider === "runpod").map((a) => a.provider_ref);
const label = (leaseId: string) => `gpulease-${leaseId}`;
const strangers = (count: number) =>
  Array.from({ length: count }, (_, i) => runpod.plantPod({ name: `someone-else-${i}` }));
const alive = (id: string) => runpod.model.get(id) !== undefined && runpod.model.state(id) !== "gone";
/** The cursor each of the listing requests since `from` carried (null: page 1). */
const cursorsSince = (from: number) =>
  runpod
    .calls("myself")
    .slice(from)
    .map((r) => new URL(r.url).searchParams.get("cursor"));

describe("the reaper over a paged RunPod listing", () => {
  it("finds an orphan that is listed only on a later page, in one run", async () => {
    strangers(3 * runpod.quirks.podsPageSize);
    const orphanId = newId("lse");
    const orphan = runpod.plantPod({ name: label(orphanId) });
    clock.advance(GRACE_S + 60);

    const run = await reap();
    expect(runpodOf(run)).toMatchObject({ listed: 1, error: null, complete: true });
    expect(run.actions).toContainEqual(
      expect.objectContaining({ kind: "adopt", provider: "runpod", provider_ref: orphan, lease_id: orphanId }),
    );
    await driveUntil(orphanId, "stopped");
    expect(alive(orphan)).toBe(false);
  });

  it("a listing cut short at the run's bound goes on at the next run, which then starts again at page 1", async () => {
    runpod.quirks.podsPageSize = 1;
    strangers(RUN_PAGES);
    const orphanId = newId("lse");
    const orphan = runpod.plantPod({ name: label(orphanId) });
    clock.advance(GRACE_S + 60);

    const first = await reap();
    expect(runpodOf(first)).toMatchObject({ listed: 0, error: null, complete: false });
    expect(runpodOf(first)?.note).toContain("stopped at the run's bound");
    expect(adoptedRefs(first)).toEqual([]);
    const firstCalls = runpod.calls("myself").length;
    expect(firstCalls).toBe(RUN_PAGES);

    clock.advance(600);
    const second = await reap();
    expect(adoptedRefs(second)).toEqual([orphan]);
    expect(runpodOf(second)).toMatchObject({ listed: 1, complete: false });
    expect(runpodOf(second)?.note).toContain("began at the cursor");
    // It went on with the cursor the first run's last page gave, and read the one page left.
    expect(cursorsSince(firstCalls)).toHaveLength(1);
    expect(cursorsSince(firstCalls)[0]).toMatch(/^pc_/);
    await driveUntil(orphanId, "stopped");
    expect(alive(orphan)).toBe(false);

    // That run reached the end: the cursor is cleared and the next run lists from page 1.
    const beforeThird = runpod.calls("myself").length;
    clock.advance(600);
    const third = await reap();
    expect(cursorsSince(beforeThird)[0]).toBeNull();
    expect(runpodOf(third)).toMatchObject({ complete: true });
    expect(runpodOf(third)?.note ?? "").not.toMatch(/cursor an earlier run|bound/);
  });

  it("draws no 'machine missing' conclusion from a listing that did not run from page 1 to the end", async () => {
    const lease = await driveUntil((await rentOk(batchBody("runpod", { max_minutes: 600 }))).id, "running");
    // The lease's pod vanishes behind gpulease's back: absent from every listing from now on.
    runpod.removePod(lease.provider_ref!);
    runpod.quirks.podsPageSize = 1;
    const others = strangers(RUN_PAGES + 1);
    const reconciles = (run: ReaperRun) => run.actions.filter((a) => a.kind === "reconcile" && a.lease_id === lease.id);

    // Cut short at the bound, then resumed from the cursor to the end: neither saw every page in one run.
    const cutShort = await reap();
    expect(reconciles(cutShort)).toEqual([]);
    expect(runpodOf(cutShort)).toMatchObject({ complete: false, error: null });
    clock.advance(600);
    const resumed = await reap();
    expect(reconciles(resumed)).toEqual([]);
    expect(runpodOf(resumed)).toMatchObject({ complete: false, error: null });

    // Fewer pods than the bound: page 1 to the end in one run, and the missing pod is concluded.
    for (const id of others) runpod.removePod(id);
    clock.advance(600);
    const complete = await reap();
    expect(runpodOf(complete)).toMatchObject({ complete: true });
    expect(reconciles(complete)).toEqual([expect.objectContaining({ outcome: "done" })]);
    expect((await getLease(lease.id)).status).not.toBe("stopped");
  });

  it("a saved cursor RunPod refuses is dropped: that run lists from page 1 again and says so", async () => {
    runpod.quirks.podsPageSize = 1;
    runpod.quirks.podsCursorTtlMs = 5 * 60_000;
    // On page 1, but too young for the first run to adopt.
    const orphanId = newId("lse");
    const orphan = runpod.plantPod({ name: label(orphanId) });
    strangers(RUN_PAGES);

    const first = await reap();
    expect(runpodOf(first)).toMatchObject({ listed: 1, complete: false });
    expect(adoptedRefs(first)).toEqual([]);
    const firstCalls = runpod.calls("myself").length;

    clock.advance(GRACE_S + 60);
    const second = await reap();
    // The cursor saved 16 minutes ago is refused (400); the listing starts again at page 1.
    expect(cursorsSince(firstCalls)[0]).toMatch(/^pc_/);
    expect(runpod.calls("myself")[firstCalls]?.status).toBe(400);
    expect(cursorsSince(firstCalls)[1]).toBeNull();
    expect(runpodOf(second)).toMatchObject({ error: null, listed: 1 });
    expect(runpodOf(second)?.note).toMatch(/saved cursor was refused .*listed again from page 1/);
    expect(adoptedRefs(second)).toEqual([orphan]);
    await driveUntil(orphanId, "stopped");
  });
});

describe("stop-all over a paged RunPod listing", () => {
  it("tears down what the bounded listing saw and reports that it stopped at the page bound", async () => {
    runpod.quirks.podsPageSize = 1;
    const seenId = newId("lse");
    const seen = runpod.plantPod({ name: label(seenId) });
    strangers(RUN_PAGES - 1);
    const pastId = newId("lse");
    const past = runpod.plantPod({ name: label(pastId) });

    const res = await api("/v1/leases/stop-all", { method: "POST" });
    expect(await res.json()).toEqual({
      ok: true,
      leases: 0,
      machines: 1,
      errors: [{ provider: "runpod", error: expect.stringContaining("page bound") }],
    });
    await driveUntil(seenId, "stopped");
    expect(alive(seen)).toBe(false);
    // Beyond the bound: not seen by stop-all, found by the reaper once past its grace period.
    expect(alive(past)).toBe(true);
    clock.advance(GRACE_S + 60);
    const run = await reap();
    expect(adoptedRefs(run)).toEqual([past]);
    await driveUntil(pastId, "stopped");
    expect(alive(past)).toBe(false);
  });
});

describe("the reaper's coverage whatever a cursor's life", () => {
  it("a cursor that lives shorter than the reaper's interval: the page past the adapter's bound is still seen, and the run says it saw every page", async () => {
    runpod.quirks.podsPageSize = 1;
    runpod.quirks.podsCursorTtlMs = 60_000;
    strangers(POD_PAGES_PER_CALL);
    // Page 11: past one listOwn call's bound.
    const orphanId = newId("lse");
    const orphan = runpod.plantPod({ name: label(orphanId) });
    clock.advance(GRACE_S + 60);

    const runs: ReaperRun[] = [];
    for (let i = 0; i < 3; i++) {
      runs.push(await reap());
      clock.advance(600_000);
    }
    // Failed on the old code: each run's saved cursor had expired, so every run read pages 1-10 again.
    expect(runs.flatMap(adoptedRefs)).toEqual([orphan]);
    expect(runpodOf(runs[0]!)).toMatchObject({ error: null, complete: true });
    expect(runpodOf(runs[0]!)?.note).toMatch(/read in 2 listing calls/);
    await driveUntil(orphanId, "stopped");
    expect(alive(orphan)).toBe(false);
  });
});
