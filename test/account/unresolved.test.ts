import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { api } from "../helpers";
import { rentOk } from "../support/lease";

const SIM_LEASE = { provider: "sim", gpu: "4090", template: "custom", image: "ghcr.io/you/batch:1", max_minutes: 30 };

const rentSim = async () => (await rentOk(SIM_LEASE)).id;

async function account(): Promise<{ unresolved_rentals: string[]; unverified_teardowns: string[] }> {
  const res = await api("/v1/account");
  expect(res.status).toBe(200);
  return res.json();
}

describe("GET /v1/account: rentals whose outcome is unknown", () => {
  it("lists a stopping lease whose create was sent but whose machine was never found, and only that", async () => {
    const unresolved = await rentSim();
    const recorded = await rentSim();
    // The state a rent request leaves when it dies between the create and recording its answer
    // (reaching it through the sim takes a crash; test/money-safety covers the path itself).
    await env.DB.batch([
      env.DB.prepare("UPDATE leases SET status = 'stopping', provider_ref = NULL WHERE id = ?").bind(unresolved),
      env.DB.prepare(
        "UPDATE lease_creates SET resolution = 'unresolved', provider_ref = NULL, resolved_at = NULL WHERE lease_id = ?",
      ).bind(unresolved),
    ]);
    // A stopping lease with its machine recorded is an ordinary teardown, not an unknown.
    await env.DB.prepare("UPDATE leases SET status = 'stopping' WHERE id = ?").bind(recorded).run();

    const view = await account();
    expect(view.unresolved_rentals).toContain(unresolved);
    expect(view.unresolved_rentals).not.toContain(recorded);
    const lease = await (await api(`/v1/leases/${unresolved}`)).json<{ creates: unknown[] }>();
    expect(lease.creates).toEqual([
      expect.objectContaining({ provider: "sim", resolution: "unresolved", provider_ref: null, resolved_at: null }),
    ]);

    // Resolved (a lookup after its timeout found nothing): no longer an unknown.
    await env.DB.prepare("UPDATE lease_creates SET resolution = 'none' WHERE lease_id = ?").bind(unresolved).run();
    expect((await account()).unresolved_rentals).not.toContain(unresolved);
  });
});
