import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RunpodFake } from "../fakes/runpod";
import { VramfarmFake } from "../fakes/vramfarm";
import { CrashFake, CrashSwitch, leaseRows, rentWithCrash } from "../money-safety/crash";
import { apiDirect } from "../robustness/direct";
import { fireNext, TestClock } from "../robustness/drive";
import { batchBody } from "../support/lease";

// Findings 1 and 2 of the money-safety review, through the public surface and the keeper's
// alarms only (no reaper: it is the safety net, not the mechanism).

const clock = new TestClock();
let installed: InstalledFakes | null = null;
let current: CrashSwitch | null = null;
let runpod: RunpodFake;
let vramfarm: VramfarmFake;

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  runpod = new RunpodFake({ quirks: { bootMs: 30_000, lingerMs: 5_000 } });
  vramfarm = new VramfarmFake({ bootMs: 30_000 });
  installed = installFakes(
    new CrashFake(() => current, runpod, "runpod"),
    new CrashFake(() => current, vramfarm, "vramfarm"),
  );
  await env.DB.prepare("UPDATE leases SET status = 'stopped' WHERE status != 'stopped'").run();
});

afterEach(() => {
  installed?.restore();
  installed = null;
});

async function keeperOnly(leaseId: string, alarms = 120): Promise<void> {
  for (let i = 0; i < alarms; i++) {
    const row = await env.DB.prepare("SELECT status FROM leases WHERE id = ?")
      .bind(leaseId)
      .first<{ status: string }>();
    if (row?.status === "stopped") return;
    if (!(await fireNext(clock, leaseId))) return;
  }
}

async function newestLease() {
  const rows = await leaseRows();
  const row = await env.DB.prepare("SELECT id FROM leases ORDER BY rowid DESC LIMIT 1").first<{ id: string }>();
  return rows.find((r) => r.id === row?.id)!;
}

describe("write-ahead renting", () => {
  it("finding 1: the request dies after VRAMfarm created the server: the keeper finds it and tears it down", async () => {
    current = new CrashSwitch(
      { at: 0, mode: "fail", match: /^d1 batch\(4\)/, after: /POST \/api\/instances$/ },
      async () => {},
    );
    const answer = await rentWithCrash(current, batchBody("vramfarm"));
    const sw = current;
    current = null;
    expect(sw.reached, sw.seen.join(", ")).toBe(true);
    expect(answer.status).toBe(500);
    expect(vramfarm.model.list()).toHaveLength(1);
    const lease = await newestLease();
    await keeperOnly(lease.id);
    const end = await newestLease();
    clock.advance(60_000);
    // Failed on main: "stopped" with teardown_verified_at while the VRAMfarm server ran on.
    expect(vramfarm.model.list().map((m) => m.id)).toEqual([]);
    expect(end).toMatchObject({ status: "stopped", provider: "vramfarm" });
    expect(end.provider_ref).toBeTruthy();
  });

  it("finding 2: a stop that lands while the create is in flight still ends with the machine torn down", async () => {
    // The stop arrives during the create; the create's answer is lost and the label lookup fails.
    let stopSent = false;
    const interrupting = {
      handles: (url: URL) => runpod.handles(url),
      async handle(request: Request): Promise<Response> {
        const query = await request.clone().text();
        const path = new URL(request.url).pathname;
        // The create and the listing on either transport: REST v2 (the default) or GraphQL.
        const isCreate =
          query.includes("podFindAndDeployOnDemand") || (request.method === "POST" && path === "/v2/pods");
        const isListing = /myself[\s\S]*pods/.test(query) || (request.method === "GET" && path === "/v2/pods");
        if (isCreate && !stopSent) {
          stopSent = true;
          const lease = await newestLease();
          await apiDirect(`/v1/leases/${lease.id}/stop`, { method: "POST" });
          await keeperOnly(lease.id, 3);
          await (await runpod.handle(request)).arrayBuffer();
          return new Response("Internal Server Error", { status: 500 });
        }
        if (stopSent && isListing && listingFailures-- > 0)
          return new Response("<html>502 Bad Gateway</html>", { status: 502 });
        return runpod.handle(request);
      },
    };
    let listingFailures = 8;
    installed?.restore();
    installed = installFakes(interrupting);
    const res = await apiDirect("/v1/leases", {
      method: "POST",
      json: { provider: "runpod", gpu: "4090", template: "custom", image: "ghcr.io/you/batch:1", max_minutes: 60 },
    });
    expect(stopSent).toBe(true);
    expect(res.status).toBeLessThan(600);
    const lease = await newestLease();
    await keeperOnly(lease.id);
    const end = await newestLease();
    clock.advance(60_000);
    // Failed on main: the lease ended stopped with teardown_verified_at and the pod ran on.
    expect(runpod.model.list().map((m) => m.label)).toEqual([]);
    expect(end.status).toBe("stopped");
  });
});
