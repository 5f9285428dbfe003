import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ProviderError } from "../../src/providers/http";
import { createRunpodProvider } from "../../src/providers/runpod";
import type { MachineSpec, Provider } from "../../src/providers/types";
import { createVastProvider } from "../../src/providers/vast";
import { createVramfarmProvider } from "../../src/providers/vramfarm";
import { type FakeService, type InstalledFakes, installFakes } from "../fakes/install";
import { json, text } from "../fakes/respond";
import { RUNPOD_FAKE_KEY, RUNPOD_FAKE_URL, RunpodFake } from "../fakes/runpod";
import { VAST_FAKE_KEY, VAST_FAKE_URL, VastFake } from "../fakes/vast";
import { VRAMFARM_FAKE_TOKEN, VRAMFARM_FAKE_URL, VramfarmFake } from "../fakes/vramfarm";

// A machine is gone only on the provider's own word (docs/providers.md#teardown-evidence); a 404
// from an HTML page, a proxy or a wrong base URL is a failed read (`unknown`, i.e. still there).
// RunPod REST v2's cases live in runpod-rest.test.ts and runpod-rest-fidelity.test.ts.

let installed: InstalledFakes | null = null;
afterEach(() => {
  installed?.restore();
  installed = null;
  vi.useRealTimers();
});

/** Answers `path` on `host` with `response` ahead of the real fake. */
const shadow = (host: string, path: RegExp, response: () => Response): FakeService => ({
  handles: (url) => url.host === host && path.test(url.pathname),
  handle: async () => response(),
});

const HTML_404 = () =>
  new Response("<html><body><h1>404 Not Found</h1>nginx</body></html>", {
    status: 404,
    headers: { "Content-Type": "text/html" },
  });

const spec: MachineSpec = {
  label: "gpulease-lse-gone",
  template: "custom",
  image: "ghcr.io/x/batch:1",
  cmd: "python run.py",
  env: {},
  ports: [],
  disk_gb: 40,
  weights_gb: 8,
  context_length: null,
  max_minutes: 60,
};

const noSleep = async () => {};

describe("RunPod GraphQL", () => {
  let fake: RunpodFake;
  const runpod = (url = RUNPOD_FAKE_URL): Provider =>
    createRunpodProvider({
      apiKey: RUNPOD_FAKE_KEY,
      url,
      proxyTemplate: "http://{id}-{port}.proxy.runpod.fake",
      sleep: noSleep,
    });
  beforeEach(() => {
    fake = new RunpodFake();
  });

  it("`pod: null` in a well-formed answer is gone", async () => {
    installed = installFakes(fake);
    const ref = fake.plantPod({ name: "gpulease-x" });
    fake.removePod(ref);
    expect((await runpod().status(ref)).state).toBe("gone");
  });

  it("an HTML 404 at the GraphQL URL is a failed read", async () => {
    installed = installFakes(shadow("runpod.fake", /^\/graphql$/, HTML_404), fake);
    await expect(runpod().status("abc123def45678")).rejects.toBeInstanceOf(ProviderError);
  });

  it("an answer without `pod` at all (`data: {}`) is not gone", async () => {
    installed = installFakes(
      shadow("runpod.fake", /^\/graphql$/, () => json({ data: {} })),
      fake,
    );
    await expect(runpod().status("abc123def45678")).rejects.toBeInstanceOf(ProviderError);
  });

  it("a wrong base URL's 404 is a failed read", async () => {
    installed = installFakes(
      shadow("wrong.fake", /.*/, () => text("Not Found", 404)),
      fake,
    );
    await expect(runpod("http://wrong.fake/graphql").status("abc123def45678")).rejects.toBeInstanceOf(ProviderError);
  });
});

describe("Vast.ai", () => {
  let fake: VastFake;
  const vast = (): Provider => createVastProvider({ apiKey: VAST_FAKE_KEY, baseUrl: VAST_FAKE_URL, sleep: noSleep });
  beforeEach(() => {
    fake = new VastFake();
  });

  async function rentedAndDestroyed(): Promise<string> {
    const offers = await vast().listOffers({ gpu: "4090" });
    const result = await vast().rent(offers[0]!, spec);
    if (!result.ok) throw new Error(result.error);
    fake.model.remove(result.ref);
    return result.ref;
  }

  it('`{"instances": null}` is gone', async () => {
    installed = installFakes(fake);
    const ref = await rentedAndDestroyed();
    expect((await vast().status(ref)).state).toBe("gone");
  });

  it("a 404 with no_such_instance is gone", async () => {
    installed = installFakes(fake);
    fake.quirks.deletedReadsAs = "404";
    const ref = await rentedAndDestroyed();
    expect((await vast().status(ref)).state).toBe("gone");
  });

  it("a 404 with not_found is gone", async () => {
    installed = installFakes(
      shadow("vast.fake", /^\/api\/v0\/instances\/\d+\/$/, () =>
        json({ success: false, error: "not_found", msg: "Instance not found" }, 404),
      ),
      fake,
    );
    expect((await vast().status("27114906")).state).toBe("gone");
  });

  it("an HTML 404 is a failed read, on status and on destroy", async () => {
    installed = installFakes(shadow("vast.fake", /^\/api\/v0\/instances\/\d+\/$/, HTML_404), fake);
    await expect(vast().status("27114906")).rejects.toBeInstanceOf(ProviderError);
    await expect(vast().terminate("27114906")).rejects.toBeInstanceOf(ProviderError);
  });

  it("a JSON 404 without Vast's error code is a failed read", async () => {
    installed = installFakes(
      shadow("vast.fake", /^\/api\/v0\/instances\/\d+\/$/, () => json({ detail: "Not Found" }, 404)),
      fake,
    );
    await expect(vast().status("27114906")).rejects.toBeInstanceOf(ProviderError);
  });
});

describe("VRAMfarm", () => {
  let fake: VramfarmFake;
  const farm = (): Provider =>
    createVramfarmProvider({ apiKey: VRAMFARM_FAKE_TOKEN, baseUrl: VRAMFARM_FAKE_URL, eurUsd: 1.08, sleep: noSleep });
  beforeEach(() => {
    fake = new VramfarmFake();
  });

  it('a 404 with {"code": "not_found"} is gone', async () => {
    installed = installFakes(fake);
    expect((await farm().status("4101")).state).toBe("gone");
  });

  it("an HTML 404 or a 404 with another code is a failed read, on status and on stop", async () => {
    installed = installFakes(shadow("vramfarm.fake", /^\/api\/instances/, HTML_404), fake);
    await expect(farm().status("4101")).rejects.toBeInstanceOf(ProviderError);
    await expect(farm().terminate("4101")).rejects.toBeInstanceOf(ProviderError);
    installed.restore();
    installed = installFakes(
      shadow("vramfarm.fake", /^\/api\/instances/, () => json({ error: "no route", code: "route_missing" }, 404)),
      fake,
    );
    await expect(farm().status("4101")).rejects.toBeInstanceOf(ProviderError);
  });
});
