import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { MachineSpec, Provider } from "../../src/providers/types";
import { createVastProvider } from "../../src/providers/vast";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { json } from "../fakes/respond";
import { VAST_FAKE_KEY, VAST_FAKE_URL, VastFake } from "../fakes/vast";
import { api, errorBody } from "../helpers";
import { ollamaSpec } from "../support/provider-fixtures";

// Vast.ai corrections from the second pass over vast-cli, gpuhunt, SkyPilot and vast-ai/docs
// (docs/providers.md#vastai).

let fake: VastFake;
let installed: InstalledFakes;
beforeEach(() => {
  fake = new VastFake();
  installed = installFakes(fake);
});
afterEach(() => installed.restore());

const vast = (overrides: { createTimeoutMs?: number } = {}): Provider =>
  createVastProvider({ apiKey: VAST_FAKE_KEY, baseUrl: VAST_FAKE_URL, sleep: async () => {}, ...overrides });

const spec = (overrides: Partial<MachineSpec> = {}) =>
  ollamaSpec({ label: "gpulease-lse-v", context_length: null, ...overrides });

const bundleBodies = () =>
  fake.requests
    .filter((r) => r.method === "POST" && r.path === "/api/v0/bundles/")
    .map((r) => r.body as Record<string, unknown>);

describe("offer search", () => {
  it("filters disk_space by the disk the create will ask, and cuda_max_good by MIN_CUDA_VERSION", async () => {
    await createVastProvider({
      apiKey: VAST_FAKE_KEY,
      baseUrl: VAST_FAKE_URL,
      sleep: async () => {},
      minCudaVersion: "12.8",
    }).listOffers({ weights_gb: 40 });
    const body = bundleBodies()[0]!;
    // vastDiskGb(40) = max(40, 2 × 40 + 20) = 100 GB, the disk rent() asks for these weights.
    expect(body.disk_space).toEqual({ gte: 100 });
    expect(body.allocated_storage).toBe(100);
    expect(body.cuda_max_good).toEqual({ gte: 12.8 });
  });
});

describe("status", () => {
  it("offline is not gone (the host can come back and bill): teardown keeps going", async () => {
    const offers = await vast().listOffers({ gpu: "4090" });
    const result = await vast().rent(offers[0]!, spec());
    if (!result.ok) throw new Error(result.error);
    fake.inject("show", { kind: "flap", as: "offline" });
    expect((await vast().status(result.ref)).state).toBe("exited");
  });

  it("cur_state terminated is gone", async () => {
    installed.restore();
    installed = installFakes(
      {
        handles: (url) => url.host === "vast.fake" && url.pathname === "/api/v0/instances/27114906/",
        handle: async () =>
          json({
            instances: { id: 27114906, actual_status: "exited", cur_state: "terminated", intended_status: "stopped" },
          }),
      },
      fake,
    );
    expect((await vast().status("27114906")).state).toBe("gone");
  });
});

describe("create", () => {
  it("a create that times out is ambiguous, never refused", async () => {
    const offers = await vast().listOffers({ gpu: "4090" });
    fake.inject("create", { kind: "hang" });
    expect(await vast({ createTimeoutMs: 50 }).rent(offers[0]!, spec())).toMatchObject({
      ok: false,
      kind: "ambiguous",
    });
  });

  it("validateSpec names env values over 256 characters and args over 4096", () => {
    const provider = vast();
    expect(provider.validateSpec?.({ env: { OK: "x".repeat(256) }, cmd: null, template: "custom" })).toEqual([]);
    expect(provider.validateSpec?.({ env: { BIG: "x".repeat(257) }, cmd: null, template: "custom" })).toEqual([
      expect.stringContaining("env BIG"),
    ]);
    expect(provider.validateSpec?.({ env: {}, cmd: "y".repeat(4090), template: "custom" })).toEqual([
      expect.stringContaining("4096"),
    ]);
  });
});

describe("account", () => {
  it("reads credit, and falls back to balance when credit is absent", async () => {
    expect((await vast().balance()).amount).toBe(37.52);
    installed.restore();
    installed = installFakes(
      {
        handles: (url) => url.host === "vast.fake" && url.pathname === "/api/v0/users/current/",
        handle: async () => json({ id: 1, balance: 12.5 }),
      },
      fake,
    );
    expect((await vast().balance()).amount).toBe(12.5);
  });
});

describe("through the API", () => {
  it("refuses a Vast.ai lease whose env value is over Vast's limit with a 400 before renting anything", async () => {
    const res = await api("/v1/leases", {
      method: "POST",
      json: {
        provider: "vast",
        gpu: "4090",
        max_minutes: 30,
        template: "custom",
        image: "x/y:1",
        env: { BIG: "x".repeat(300) },
      },
    });
    expect(res.status).toBe(400);
    const body = await errorBody(res);
    expect(body.code).toBe("invalid_request");
    expect(body.issues?.[0]).toMatchObject({ path: "env" });
    expect(fake.requests.some((r) => r.method === "PUT")).toBe(false);
  });
});
