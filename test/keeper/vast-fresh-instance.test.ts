import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { VastFake } from "../fakes/vast";
import { api } from "../helpers";
import { TestClock } from "../support/clock";
import { driveUntil } from "../support/keeper";

// vast-cli retries an empty show right after a create (docs/providers.md#vast-instances).

const clock = new TestClock();
let fake: VastFake;
let installed: InstalledFakes;

beforeEach(async () => {
  clock.install();
  fake = new VastFake({ bootMs: 60_000 });
  installed = installFakes(fake);
  await env.DB.batch([env.DB.prepare("DELETE FROM lease_events"), env.DB.prepare("DELETE FROM leases")]);
});
afterEach(() => installed.restore());

describe("a Vast.ai instance that shows nothing right after its create", () => {
  it("is not taken for gone: the lease comes up on it", async () => {
    fake.quirks.showLagMs = 45_000;
    const res = await api("/v1/leases", {
      method: "POST",
      json: { provider: "vast", gpu: "4090", max_minutes: 30, template: "custom", image: "x/y:1", cmd: "sleep 600" },
    });
    expect(res.status).toBe(202);
    const { id } = (await res.json()) as { id: string };
    const end = await driveUntil(id, ["running", "stopped"], { clock });
    expect(end.lease).toMatchObject({ status: "running", error: null });
    expect(fake.model.list().map((m) => fake.model.state(m.id))).toEqual(["running"]);
  });
});
