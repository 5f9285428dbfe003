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
    await env.DB.prepare(
      `UPDATE leases SET status = 'stopping', provider_ref = NULL,
         creates = '[{"provider":"sim","offer_id":"sim:x","sent_at":"2026-01-01T00:00:00Z"}]' WHERE id = ?`,
    )
      .bind(unresolved)
      .run();
    // A stopping lease with its machine recorded is an ordinary teardown, not an unknown.
    await env.DB.prepare("UPDATE leases SET status = 'stopping' WHERE id = ?").bind(recorded).run();

    const view = await account();
    expect(view.unresolved_rentals).toContain(unresolved);
    expect(view.unresolved_rentals).not.toContain(recorded);

    await env.DB.prepare("UPDATE leases SET status = 'stopped' WHERE id IN (?, ?)").bind(unresolved, recorded).run();
    expect((await account()).unresolved_rentals).not.toContain(unresolved);
  });
});
