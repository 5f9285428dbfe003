import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Lease } from "../../src/leases/schema";
import type { Schedule } from "../../src/schedules/schema";
import { apiRequest, workerFetch } from "../helpers";
import {
  clock,
  drainLeases,
  driveUntil,
  fireCron,
  leasesOfSchedule,
  resetSim,
  useFakeClock,
} from "../schedules/support";
import { simBody } from "../support/lease";

// PUBLIC_URL is unset in the tests' env: the worker's address is then the origin a request came
// in on (`npm start -- --port 8799` answers at http://localhost:8799), never a hard-coded one.
const PORT_8799 = "http://localhost:8799";
const ELSEWHERE = "http://127.0.0.1:8800";

/** A request as the admin, sent to the worker at `origin`. */
function at(origin: string, path: string, init: Parameters<typeof apiRequest>[1] = {}): Promise<Response> {
  const request = apiRequest(path, init);
  return workerFetch(new Request(`${origin}${path}`, request));
}

async function json<T>(res: Response, status: number): Promise<T> {
  const text = await res.text();
  if (res.status !== status) throw new Error(`${res.status} ${text}`);
  return JSON.parse(text) as T;
}

beforeEach(async () => {
  useFakeClock(Date.parse("2031-06-01T00:00:00Z"));
  await resetSim();
});

afterEach(async () => {
  await drainLeases();
});

describe("the worker's address when PUBLIC_URL is unset", () => {
  it("is the origin the rent came in on: access.urls and openai_base_url", async () => {
    const lease = await json<Lease>(
      await at(PORT_8799, "/v1/leases", { method: "POST", json: simBody({ gpu_count: 1 }) }),
      202,
    );
    const running = await driveUntil(lease.id, "running");
    expect(running.access?.urls[0]).toBe(`${PORT_8799}/sim/ollama/${running.provider_ref}`);
    expect(running.access?.openai_base_url).toBe(`${PORT_8799}/sim/ollama/${running.provider_ref}/v1`);
  });

  it("is, for a lease a schedule starts, the origin of the schedule's last request", async () => {
    const schedule = await json<Schedule>(
      await at(ELSEWHERE, "/v1/schedules", {
        method: "POST",
        json: { name: "nightly", cron: "0 2 * * *", lease: simBody({ gpu_count: 1 }) },
      }),
      201,
    );
    // Moved to another port: the last request the schedule saw came in there.
    await json<Schedule>(
      await at(PORT_8799, `/v1/schedules/${schedule.id}`, { method: "PATCH", json: { name: "moved" } }),
      200,
    );
    const due = Date.parse("2031-06-01T02:00:00Z");
    clock.set(due + 2_000);
    await fireCron("* * * * *", due);
    const [lease] = await leasesOfSchedule(schedule.id);
    if (!lease) throw new Error("the schedule started no lease");
    const running = await driveUntil(lease.id, "running");
    expect(running.access?.urls[0]).toBe(`${PORT_8799}/sim/ollama/${running.provider_ref}`);
  });
});
