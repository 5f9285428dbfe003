import { env } from "cloudflare:workers";
import { beforeEach, expect, it } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { simCloud } from "../../src/sim/cloud";
import { driveUntil, Recorder, TestClock } from "../robustness/drive";

// An ignored terminate costs seconds, not a RETERMINATE_INTERVAL_S: the keeper re-sends after
// ~5 s, doubling. Prints stop → verified (virtual time, default intervals) for the note; the
// assertion is only on behaviour (verified, and the machine really gone).

const clock = new TestClock();

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  await simCloud(env.SIM_CLOUD).reset();
  await env.DB.prepare("UPDATE leases SET status = 'stopped' WHERE status != 'stopped'").run();
});

it("two ignored terminates: the teardown still verifies, and the figure is printed", async () => {
  // Set before renting: the sim gives each new machine its count of terminates to ignore.
  await simCloud(env.SIM_CLOUD).configure({ faults: { ignore_terminates: 2 } });
  const recorder = new Recorder();
  const rented = await recorder.call("/v1/leases", {
    method: "POST",
    json: { provider: "sim", gpu: "4090", gpu_count: 1, template: "custom", image: "x/y:1", max_minutes: 60 },
  });
  const id = (rented.json as Lease).id;
  expect((await driveUntil(clock, recorder, id, ["running"])).reached).toBe(true);
  await recorder.call(`/v1/leases/${id}/stop`, { method: "POST" });
  const end = await driveUntil(clock, recorder, id, ["stopped"]);
  expect(end.lease.teardown_verified_at).not.toBeNull();
  expect((await simCloud(env.SIM_CLOUD).describe()).machines).toEqual([]);
  const events = (await recorder.call(`/v1/leases/${id}/events`)).json as { events: { kind: string }[] };
  const terminates = events.events.filter((e) => e.kind === "terminate_sent").length;
  const seconds =
    (Date.parse(end.lease.teardown_verified_at ?? "") - Date.parse(end.lease.stop_requested_at ?? "")) / 1000;
  console.log(
    `stop → verified with two ignored terminates (VERIFY_INTERVAL_S 5, RETERMINATE_INTERVAL_S 30, sim linger default): ${seconds} s, ${terminates} terminates sent, ${end.alarms} alarms`,
  );
  expect(terminates).toBeGreaterThanOrEqual(3);
});
