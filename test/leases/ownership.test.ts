import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Lease } from "../../src/leases/schema";
import { simCloud } from "../../src/sim/cloud";
import { slackBody } from "../../src/webhooks/body";
import { issueToken } from "../auth/tokens-helper";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { OllamaRegistryFake } from "../fakes/ollama-registry";
import { api } from "../helpers";
import { TestClock } from "../support/clock";
import { driveTo } from "../support/keeper";
import { rent } from "../support/lease";

// Whose lease a token may change, and who sees the machine's own (open) Ollama URL: the token
// that rented the lease and admins (README "Tokens and scopes").
const clock = new TestClock(Date.parse("2035-06-01T00:00:00Z"));
let fakes: InstalledFakes;

beforeEach(async () => {
  clock.install();
  clock.advance(3_600_000);
  fakes = installFakes(new OllamaRegistryFake());
  await simCloud(env.SIM_CLOUD).reset();
  await simCloud(env.SIM_CLOUD).configure({ bootSeconds: 20, readySeconds: 5, lingerSeconds: 0, creditUsd: 100_000 });
});

afterEach(async () => {
  const leases = ((await (await api("/v1/leases?limit=200")).json()) as { leases: Lease[] }).leases;
  for (const lease of leases) {
    if (lease.status === "stopped") continue;
    await api(`/v1/leases/${lease.id}/stop`, { method: "POST" });
    await driveTo(lease.id, "stopped", { clock, maxAlarms: 400 });
  }
  fakes.restore();
});

async function rentModelAs(token: string): Promise<Lease> {
  const res = await rent({ provider: "sim", model: "llama3.2:1b", max_minutes: 30 }, { token });
  const body = await res.text();
  if (res.status !== 202) throw new Error(`rent: ${res.status} ${body}`);
  return JSON.parse(body) as Lease;
}

const rotate = (leaseId: string, token?: string) =>
  api(`/v1/leases/${leaseId}/inference-key`, { method: "POST", ...(token ? { token } : {}) });

describe("a lease is changed by the token that rented it, or an admin", () => {
  it("another rent token cannot rotate a lease's inference key (403); the renter and an admin can", async () => {
    const owner = await issueToken(["read", "rent"], "owner");
    const other = await issueToken(["read", "rent"], "other");
    const lease = await rentModelAs(owner.token);
    await driveTo(lease.id, "running", { clock, maxAlarms: 200 });

    const stolen = await rotate(lease.id, other.token);
    expect(stolen.status).toBe(403);
    expect(((await stolen.json()) as { code: string }).code).toBe("forbidden");
    expect((await rotate(lease.id, owner.token)).status).toBe(200);
    expect((await rotate(lease.id)).status).toBe(200);
  });
});

describe("access (the machine's own open Ollama URL) is for the renter and admins", () => {
  it("a read token sees access null in GET, the list and the events; the renter and admin see the URL", async () => {
    const owner = await issueToken(["read", "rent"], "owner");
    const reader = await issueToken(["read"], "reader");
    const lease = await rentModelAs(owner.token);
    await driveTo(lease.id, "running", { clock, maxAlarms: 200 });

    const asOwner = (await (await api(`/v1/leases/${lease.id}`, { token: owner.token })).json()) as Lease;
    expect(asOwner.access?.urls.length).toBeGreaterThan(0);
    const url = asOwner.access!.urls[0]!;
    const asAdmin = (await (await api(`/v1/leases/${lease.id}`)).json()) as Lease;
    expect(asAdmin.access?.urls).toEqual(asOwner.access?.urls);

    const read = await (await api(`/v1/leases/${lease.id}`, { token: reader.token })).text();
    expect(JSON.parse(read).access).toBeNull();
    expect(read).not.toContain(url);
    const list = await (await api("/v1/leases", { token: reader.token })).text();
    expect(list).not.toContain(url);
    const events = await (await api(`/v1/leases/${lease.id}/events`, { token: reader.token })).text();
    expect(events).not.toContain(url);
  });

  it("Slack's lease.running message does not carry the machine's URL", () => {
    const text = slackBody({
      type: "lease.running",
      data: {
        lease: { id: "lse_x", name: "job", access: { urls: ["https://abc-11434.proxy.runpod.net"], ssh: null } },
      },
    } as never);
    expect(text).not.toContain("proxy.runpod.net");
  });
});

describe("Slack text is escaped as Slack documents (&, <, >)", () => {
  it("a lease name or event detail cannot ping a channel or disguise a link", () => {
    const text = JSON.parse(
      slackBody({
        type: "lease.stopped",
        data: {
          lease: { id: "lse_x", name: "<!channel> & co" },
          detail: "see <https://evil.example|https://runpod.io>",
        },
      } as never),
    ).text as string;
    expect(text).not.toContain("<!channel>");
    expect(text).not.toContain("<https://");
    expect(text).toContain("&lt;!channel&gt; &amp; co");
    expect(text).toContain("&lt;https://evil.example|https://runpod.io&gt;");
  });
});
