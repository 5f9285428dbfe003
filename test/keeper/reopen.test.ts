import { expect, it } from "vitest";
import { RunpodFake } from "../fakes/runpod";
import { runReaperCron } from "../money-safety/crash";
import { driveUntil, fireNext, Recorder, scenarioPerTest } from "../robustness/drive";
import { Faulty } from "../robustness/faulty";

const { clock, useFakes } = scenarioPerTest();

it("finding 6: a lease the reaper reopens needs two gone reads again, not one", async () => {
  const runpod = new RunpodFake({ quirks: { bootMs: 30_000, lingerMs: 5_000 } });
  const faulty = new Faulty("runpod", runpod);
  useFakes(faulty);
  const recorder = new Recorder();
  const rented = await recorder.call("/v1/leases", {
    method: "POST",
    json: { provider: "runpod", gpu: "4090", template: "custom", image: "ghcr.io/you/batch:1", max_minutes: 60 },
  });
  expect(rented.status).toBe(202);
  const leaseId = (rented.json as { id: string }).id;
  expect((await driveUntil(clock, recorder, leaseId, ["running"])).reached).toBe(true);

  // The provider lies twice ("gone") while ignoring the terminate: the keeper ends the teardown.
  faulty.inject("terminate", { kind: "ignore" }, { times: 100 });
  faulty.inject("status", { kind: "gone" }, { times: 2 });
  await recorder.call(`/v1/leases/${leaseId}/stop`, { method: "POST" });
  expect((await driveUntil(clock, recorder, leaseId, ["stopped"])).reached).toBe(true);
  expect(runpod.model.list()).toHaveLength(1);

  // The reaper sees the pod still there and reopens the teardown.
  faulty.clear();
  faulty.inject("terminate", { kind: "ignore" }, { times: 100 });
  clock.advance(16 * 60_000);
  await runReaperCron(clock);
  expect((await recorder.lease(leaseId)).status).toBe("stopping");

  // One lying "gone" read must not end the reopened teardown. Failed on main: it did, at once.
  faulty.inject("status", { kind: "gone" }, { times: 1 });
  await fireNext(clock, leaseId);
  expect((await recorder.lease(leaseId)).status).toBe("stopping");
  faulty.clear();
  expect((await driveUntil(clock, recorder, leaseId, ["stopped"])).reached).toBe(true);
  clock.advance(60_000);
  expect(runpod.model.list()).toHaveLength(0);
});
