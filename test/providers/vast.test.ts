import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ProviderError } from "../../src/providers/http";
import type { MachineSpec, Provider, ProviderOffer } from "../../src/providers/types";
import { createVastProvider } from "../../src/providers/vast";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { VAST_ECHOED_API_KEY, VAST_FAKE_KEY, VAST_FAKE_URL, VastFake } from "../fakes/vast";
import { PROVIDER_SECRETS } from "../helpers";
import { ollamaSpec } from "../support/provider-fixtures";

const T0 = Date.parse("2026-11-29T02:00:00Z");

let now: number;
let sleeps: number[];
let fake: VastFake;
let fakes: InstalledFakes;
let vast: Provider;

function provider(timeoutMs = 2_000): Provider {
  return createVastProvider({
    apiKey: VAST_FAKE_KEY,
    baseUrl: VAST_FAKE_URL,
    timeoutMs,
    createTimeoutMs: timeoutMs,
    // Waiting advances the fake's clock: Vast's 429s are minimum intervals, not wall time.
    sleep: async (ms) => {
      sleeps.push(ms);
      now += ms;
    },
  });
}

beforeEach(() => {
  now = T0;
  sleeps = [];
  fake = new VastFake({ now: () => now, bootMs: 60_000 });
  fakes = installFakes(fake);
  vast = provider();
});

afterEach(() => {
  fakes.restore();
});

const spec = ollamaSpec;

async function offerFor(gpu = "4090"): Promise<ProviderOffer> {
  const offers = await vast.listOffers({ gpu, vram_gb: 20 });
  const first = offers[0];
  if (!first) throw new Error(`no ${gpu} offer`);
  return first;
}

async function rented(overrides: Partial<MachineSpec> = {}): Promise<string> {
  const result = await vast.rent(await offerFor(), spec(overrides));
  if (!result.ok) throw new Error(`rent failed: ${result.error}`);
  return result.ref;
}

const bodiesOf = (method: string, pathPart: string) =>
  fake.requests
    .filter((r) => r.method === method && r.path.includes(pathPart))
    .map((r) => r.body as Record<string, unknown>);

async function providerError(promise: Promise<unknown>): Promise<ProviderError> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ProviderError);
  return error as ProviderError;
}

function expectNoSecret(text: string) {
  for (const secret of [...PROVIDER_SECRETS, VAST_ECHOED_API_KEY]) expect(text).not.toContain(secret);
}

describe("vast offers", () => {
  it("asks /bundles/ with the filters of docs/providers.md#vast-offers, GPU RAM in MiB and the disk sized from the weights", async () => {
    await vast.listOffers({ vram_gb: 24, weights_gb: 18, gpu_count: 1, max_price_usd: 0.8 });
    const [body] = bodiesOf("POST", "/api/v0/bundles/");
    expect(body).toMatchObject({
      verified: { eq: true },
      rentable: { eq: true },
      rented: { eq: false },
      external: { eq: false },
      direct_port_count: { gte: 1 },
      cuda_max_good: { gte: 12.4 },
      compute_cap: { gte: 750 },
      // the driver's MiB are below the size sold (an A10 "24 GB" has 23,028): 24 × 1024 × 0.93
      gpu_total_ram: { gte: 22_855 },
      num_gpus: { eq: 1 },
      dph_total: { lte: 0.8 },
      type: "on-demand",
      order: [["dph_total", "asc"]],
      // max(40, 2 × 18 + 20), also the disk_space filter and the create's disk
      allocated_storage: 56,
      disk_space: { gte: 56 },
    });
    expect(body?.limit).toBeGreaterThan(0);
  });

  it("drops mining and old cards and normalises an offer", async () => {
    fake.offers = fake.offers.map((o) => ({ ...o, compute_cap: 890, cuda_max_good: 12.8 }));
    const offers = await vast.listOffers({});
    const names = offers.map((o) => o.gpu);
    expect(names).not.toContain("CMP 170HX");
    expect(names).not.toContain("Tesla P100");
    expect(names).not.toContain("GTX 1080 Ti");
    // unverified and already rented offers are filtered by the query itself
    expect(offers.map((o) => o.offer_id)).not.toContain("vast:18463536");
    expect(offers.map((o) => o.offer_id)).not.toContain("vast:18463537");
    const rtx4090 = offers.find((o) => o.offer_id === "vast:18463529");
    expect(rtx4090).toEqual({
      offer_id: "vast:18463529",
      provider: "vast",
      gpu: "RTX 4090",
      gpu_key: "rtx-4090",
      gpu_count: 1,
      vram_gb: 24,
      memory_mib: 24_564,
      // dph_base 0.35 + storage 0.2 $/GB/month × 40 GB / 720 h
      price_per_hour: 0.3611,
      currency: "USD",
      cloud: null,
      availability: "available",
      location: "Oregon, US",
      bandwidth_gbs: 916.1,
      download_mbs: (904.2 / 8) * 0.5,
      download_cost_per_gb: 0.003,
      min_billed_minutes: 0,
      templates: ["ollama", "custom"],
    });
  });

  it("caps the advertised line speed, halves it, and leaves an unknown bandwidth to the spec table", async () => {
    const offers = await vast.listOffers({ gpu: "3090" });
    expect(offers).toHaveLength(1);
    expect(offers[0]).toMatchObject({
      gpu_key: "rtx-3090",
      bandwidth_gbs: null,
      download_mbs: (2500 / 8) * 0.5,
      location: null,
    });
  });

  it("reads gpu_total_ram as MiB and filters by the size sold: 40 GB excludes every 24 GB card", async () => {
    const offers = await vast.listOffers({ vram_gb: 40 });
    expect(offers.map((o) => o.gpu).sort()).toEqual(["A100 PCIE", "H100 SXM"]);
    expect(offers.find((o) => o.gpu === "H100 SXM")).toMatchObject({
      gpu_count: 2,
      vram_gb: 160,
      memory_mib: 163_118,
      gpu_key: "h100-sxm",
    });
  });

  it("lists a 48 GB L40S (46,068 MiB) for vram_gb 48, which GPU RAM read as MB / 1000 refused", async () => {
    fake.offers.push({ ...fake.offers[0]!, id: 77, gpu_name: "L40S", gpu_ram: 46_068, gpu_total_ram: 46_068 });
    const offers = await vast.listOffers({ vram_gb: 48 });
    expect(offers.find((o) => o.offer_id === "vast:77")).toMatchObject({ vram_gb: 48, memory_mib: 46_068 });
  });

  it("matches the gpu filter as a substring, case-insensitive", async () => {
    const offers = await vast.listOffers({ gpu: "h100" });
    expect(offers.map((o) => o.gpu)).toEqual(["H100 SXM"]);
  });

  it("skips a single offer that does not parse instead of failing the listing", async () => {
    fake.offers.push({ ...fake.offers[0]!, id: 99, gpu_name: 42 as unknown as string });
    const offers = await vast.listOffers({ gpu: "4090" });
    expect(offers.map((o) => o.offer_id)).toEqual(["vast:18463529"]);
  });

  it("throws on a malformed or empty listing and on an unexpected status", async () => {
    fake.inject("offers", { kind: "malformed" });
    expect((await providerError(vast.listOffers({}))).kind).toBe("parse");
    fake.inject("offers", { kind: "empty" });
    expect((await providerError(vast.listOffers({}))).kind).toBe("parse");
    fake.inject("offers", { kind: "http", status: 500 });
    expect((await providerError(vast.listOffers({}))).status).toBe(500);
  });
});

describe("vast rent", () => {
  it("creates from the offer with an env object, the port mapping, cancel_unavail and the label", async () => {
    const offer = await offerFor();
    const result = await vast.rent(offer, spec());
    expect(result).toMatchObject({ ok: true, price_per_hour: offer.price_per_hour });
    // docs/providers.md#vast-create: the instance id is new_contract, not the offer id.
    expect(result.ok && result.ref).not.toBe("18463529");
    expect(result.ok && fake.model.get(result.ref)?.label).toBe("gpulease-lse01");
    const put = fake.requests.find((r) => r.method === "PUT");
    expect(put?.path).toBe("/api/v0/asks/18463529/");
    expect(put?.body).toEqual({
      client_id: "me",
      image: "ollama/ollama:latest",
      disk: 56,
      label: "gpulease-lse01",
      env: {
        "-p 11434:11434": "1",
        OLLAMA_HOST: "0.0.0.0:11434",
        OLLAMA_KEEP_ALIVE: "-1",
        OLLAMA_CONTEXT_LENGTH: "8192",
      },
      runtype: "args",
      onstart: null,
      args: null,
      price: null,
      cancel_unavail: true,
    });
  });

  it("runs a custom command through /bin/sh -c and publishes each requested port", async () => {
    await rented({
      template: "custom",
      image: "ghcr.io/you/batch:1",
      cmd: "python run.py && echo done",
      env: { MODE: "nightly" },
      ports: [8000],
      disk_gb: 120,
    });
    const [body] = bodiesOf("PUT", "/api/v0/asks/");
    expect(body).toMatchObject({
      image: "ghcr.io/you/batch:1",
      disk: 120,
      env: { MODE: "nightly", "-p 8000:8000": "1" },
      runtype: "args",
      onstart: "/bin/sh",
      args: ["-c", "python run.py && echo done"],
    });
    expect(body?.env).not.toHaveProperty("OLLAMA_HOST");
  });

  it.each([404, 410] as const)("reads an offer taken in the meantime (%i) as no capacity", async (status) => {
    const offer = await offerFor();
    fake.quirks.offerRace = { status, times: 1 };
    const result = await vast.rent(offer, spec());
    expect(result).toMatchObject({ ok: false, kind: "no_capacity" });
    expect(!result.ok && result.error).toContain("no_such_ask");
    expect(fake.model.list()).toHaveLength(0);
  });

  it("rejects with Vast's reason when the credit is too low", async () => {
    const offer = await offerFor();
    fake.credit = 0;
    expect(await vast.rent(offer, spec())).toEqual({
      ok: false,
      kind: "rejected",
      error: "insufficient_credit: Your balance is too low",
    });
  });

  it("destroys the instance that arrives with an error, then reports the error", async () => {
    const offer = await offerFor();
    fake.quirks.errorWithContract = true;
    const result = await vast.rent(offer, spec());
    expect(result).toMatchObject({ ok: false, kind: "rejected" });
    expect(!result.ok && result.error).toContain("bid price too low");
    const [stray] = [...fake.model.machines.values()];
    expect(fake.requests.some((r) => r.method === "DELETE" && r.path === `/api/v0/instances/${stray?.id}/`)).toBe(true);
    expect(fake.model.state(stray!.id)).toBe("gone");
  });

  it("answers ambiguous when that stray instance cannot be destroyed", async () => {
    const offer = await offerFor();
    fake.quirks.errorWithContract = true;
    fake.inject("destroy", { kind: "http", status: 500 }, 10);
    const result = await vast.rent(offer, spec());
    expect(result).toMatchObject({ ok: false, kind: "ambiguous" });
    expect(fake.model.list()).toHaveLength(1);
  });

  it("answers ambiguous on a timeout, and the instance is then found by its label", async () => {
    const offer = await offerFor();
    vast = provider(100);
    fake.inject("create", { kind: "hang" }, 1, true);
    const result = await vast.rent(offer, spec());
    expect(result).toMatchObject({ ok: false, kind: "ambiguous" });
    expect(!result.ok && result.error).toMatch(/did not answer in time/);
    const found = await vast.findByLabel("gpulease-lse01");
    expect(found).toMatchObject({ label: "gpulease-lse01", state: "booting" });
    expect(found?.ref).toBe(fake.model.list()[0]?.id);
  });

  it("never repeats a create after a 5xx: one PUT, ambiguous", async () => {
    const offer = await offerFor();
    fake.inject("create", { kind: "http", status: 503 }, 5);
    expect(await vast.rent(offer, spec())).toMatchObject({ ok: false, kind: "ambiguous" });
    expect(bodiesOf("PUT", "/api/v0/asks/")).toHaveLength(1);
  });

  it("sends a rate-limited create once more after Vast's create interval", async () => {
    const offer = await offerFor();
    fake.inject("create", { kind: "http", status: 429 });
    expect(await vast.rent(offer, spec())).toMatchObject({ ok: true });
    expect(bodiesOf("PUT", "/api/v0/asks/")).toHaveLength(2);
    expect(sleeps).toContain(13_000);
  });

  it("treats an unknown error inside HTTP 200, and an unreadable 200, as ambiguous (an instance may exist)", async () => {
    const offer = await offerFor();
    fake.inject("create", { kind: "error200" });
    expect(await vast.rent(offer, spec())).toEqual({
      ok: false,
      kind: "ambiguous",
      error: "HTTP 200: server_error: Internal error, please try again",
    });
    fake.inject("create", { kind: "malformed" }, 1, true);
    expect(await vast.rent(offer, spec())).toMatchObject({ ok: false, kind: "ambiguous" });
  });

  it("refuses an env string (docs/providers.md#vast-create) at the fake, which the adapter never sends", async () => {
    const response = await fetch(`${VAST_FAKE_URL}/api/v0/asks/18463529/`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${VAST_FAKE_KEY}`, "Content-Type": "application/json" },
      body: JSON.stringify({ client_id: "me", image: "x", env: "-e A=1 -p 11434:11434" }),
    });
    expect(response.status).toBe(400);
  });
});

describe("vast status", () => {
  it("goes from provisioning to loading to running with the random HostPort as the URL", async () => {
    const ref = await rented();
    expect(await vast.status(ref)).toMatchObject({
      state: "booting",
      access: null,
      price_per_hour: expect.any(Number),
      cost: null,
    });
    now += 40_000;
    expect((await vast.status(ref)).state).toBe("booting");
    now += 30_000;
    const running = await vast.status(ref);
    expect(running.state).toBe("running");
    const url = fake.ollamaUrl(ref);
    expect(url).not.toContain(":11434");
    // runtype "args" runs the image as-is: no sshd, so no ssh access reported (docs/providers.md#vast-instances).
    expect(running.access).toEqual({ urls: [url], ssh: null });
  });

  it.each(["empty", "null", "absent"] as const)(
    "reads ports %s before running, and trims the IP",
    async (portsBeforeRunning) => {
      fake.quirks.portsBeforeRunning = portsBeforeRunning;
      fake.quirks.ipWhitespace = true;
      const ref = await rented();
      expect((await vast.status(ref)).state).toBe("booting");
      now += 61_000;
      const running = await vast.status(ref);
      expect(running.access?.urls).toEqual([fake.ollamaUrl(ref)]);
      expect(running.access?.urls[0]).toMatch(/^http:\/\/198\.51\.100\.\d+:\d+$/);
    },
  );

  it('reads {"instances": null} as gone', async () => {
    const ref = await rented();
    await vast.terminate(ref);
    expect(await vast.status(ref)).toEqual({
      state: "gone",
      access: null,
      cost: null,
      traffic_cost: null,
      price_per_hour: null,
      error: null,
    });
  });

  it("reads a 404 as gone", async () => {
    fake.quirks.deletedReadsAs = "404";
    expect((await vast.status("123456")).state).toBe("gone");
  });

  it("throws on a failed or unreadable read, never reporting gone", async () => {
    const ref = await rented();
    vast = provider(100);
    const faults = [
      { kind: "http", status: 500 },
      { kind: "malformed" },
      { kind: "empty" },
      { kind: "error200" },
      { kind: "hang" },
    ] as const;
    for (const fault of faults) {
      // every attempt of the client's retries fails
      fake.inject("show", fault, 10);
      const error = await providerError(vast.status(ref));
      expectNoSecret(error.message);
      fake.faults.show = [];
    }
    fake.inject("show", { kind: "http", status: 502 }, 10);
    expect((await providerError(vast.status(ref))).status).toBe(502);
  });

  it("reports an OCI failure in created, and exited/unknown/offline, as exited with Vast's message", async () => {
    const oci = fake.plant({
      label: "gpulease-a",
      bootMs: 1_000,
      failStart: "Error response from daemon: OCI runtime create failed: runc create failed",
    });
    const dead = fake.plant({
      label: "gpulease-b",
      bootMs: 1_000,
      failStart: "container exited",
      failStatus: "exited",
    });
    const lost = fake.plant({ label: "gpulease-c", bootMs: 1_000, failStart: "host offline", failStatus: "offline" });
    now += 2_000;
    expect(await vast.status(oci.id)).toMatchObject({
      state: "exited",
      error: expect.stringContaining("OCI runtime create failed"),
    });
    expect(await vast.status(dead.id)).toMatchObject({ state: "exited", error: "container exited" });
    expect(await vast.status(lost.id)).toMatchObject({ state: "exited", error: "host offline" });
  });

  it("reports an outbid spot instance (stopped everywhere) as exited", async () => {
    const ref = await rented();
    now += 61_000;
    fake.model.exit(ref, "outbid");
    expect(await vast.status(ref)).toMatchObject({ state: "exited", error: "outbid" });
  });

  it("takes a destroyed-but-listed instance as gone, as vast-cli's instance_exist does", async () => {
    fake = new VastFake({ now: () => now, lingerMs: 30_000 });
    fakes.restore();
    fakes = installFakes(fake);
    fake.quirks.lingerAs = "destroyed";
    const ref = await rented();
    await vast.terminate(ref);
    expect((await vast.status(ref)).state).toBe("gone");
    now += 31_000;
    expect((await vast.status(ref)).state).toBe("gone");
  });

  it("reports a flapping read as it comes and recovers on the next read", async () => {
    const ref = await rented();
    now += 61_000;
    fake.inject("show", { kind: "flap", as: "loading" });
    expect((await vast.status(ref)).state).toBe("booting");
    expect((await vast.status(ref)).state).toBe("running");
  });

  it("answers Ollama readiness through the instance's own address once it listens", async () => {
    fake.quirks.ollamaDelayMs = 10_000;
    const ref = await rented();
    now += 61_000;
    const running = await vast.status(ref);
    expect(await vast.ollamaProbe(ref, running, null)).toEqual({ phase: "down" });
    now += 10_000;
    expect(await vast.ollamaProbe(ref, running, null)).toEqual({ phase: "ready", digest: "" });
    expect(await vast.ollamaProbe(ref, { ...running, state: "booting", access: null }, null)).toEqual({
      phase: "down",
    });
  });
});

describe("vast terminate", () => {
  it.each(["no_such_instance_200", "no_such_instance_404", "not_found_404"] as const)(
    "is idempotent when the second destroy says %s",
    async (destroyGoneAs) => {
      fake.quirks.destroyGoneAs = destroyGoneAs;
      const ref = await rented();
      await vast.terminate(ref);
      await vast.terminate(ref);
      expect(fake.requests.filter((r) => r.method === "DELETE")).toHaveLength(2);
    },
  );

  it.each(["text", "detail", "json"] as const)(
    "retries a 429 without Retry-After (%s body) with its own backoff",
    async (rateLimitBody) => {
      fake.quirks.rateLimits = true;
      fake.quirks.rateLimitBody = rateLimitBody;
      const first = fake.plantOrphan("gpulease-1").id;
      const second = fake.plantOrphan("gpulease-2").id;
      await vast.terminate(first);
      await vast.terminate(second);
      expect(sleeps.length).toBeGreaterThan(0);
      expect(fake.model.state(second)).toBe("gone");
    },
  );

  it("gives up with rate_limited when Vast keeps refusing", async () => {
    fake.inject("destroy", { kind: "http", status: 429 }, 20);
    const error = await providerError(vast.terminate("27114906"));
    expect(error.kind).toBe("rate_limited");
  });

  it("resolves when the destroy is accepted but ignored: only a status read proves absence", async () => {
    const ref = await rented();
    fake.inject("destroy", { kind: "ignore" });
    await vast.terminate(ref);
    expect((await vast.status(ref)).state).toBe("booting");
  });

  it("throws when a destroy fails for another reason", async () => {
    fake.inject("destroy", { kind: "error200" });
    expect((await providerError(vast.terminate("27114906"))).kind).toBe("api");
  });
});

describe("vast own machines", () => {
  it("finds by label with select_filters as URL-encoded JSON", async () => {
    const orphan = fake.plantOrphan("gpulease-orphan");
    fake.plantOrphan("gpulease-other");
    expect(await vast.findByLabel("gpulease-orphan")).toMatchObject({
      ref: orphan.id,
      label: "gpulease-orphan",
      price_per_hour: 0.3611,
      created_at: new Date(T0).toISOString(),
    });
    const list = fake.requests.find((r) => r.path === "/api/v1/instances/");
    const query = new URL(list!.url).searchParams;
    expect(JSON.parse(query.get("select_filters")!)).toEqual({ label: { eq: "gpulease-orphan" } });
    expect(list!.url).toContain("select_filters=%7B%22label%22");
    expect(await vast.findByLabel("gpulease-missing")).toBeNull();
  });

  it("pages the listing with next_token to the end and matches the prefix here", async () => {
    const ours = Array.from({ length: 55 }, (_, i) => fake.plantOrphan(`gpulease-${i}`).id);
    fake.plantUnlabelled();
    fake.plantOrphan("someone-else");
    const own = (await vast.listOwn("gpulease-", [])).machines;
    expect(own.map((m) => m.ref).sort()).toEqual(ours.sort());
    const pages = fake.requests.filter((r) => r.path === "/api/v1/instances/").map((r) => new URL(r.url).searchParams);
    expect(pages).toHaveLength(3);
    expect(pages.every((p) => Number(p.get("limit")) <= 25 && !p.has("select_filters"))).toBe(true);
    expect(pages[0]?.has("after_token")).toBe(false);
    expect(pages[1]?.get("after_token")).toBeTruthy();
  });

  it('reads {"instances": null} as an empty listing', async () => {
    expect(await vast.listOwn("gpulease-", [])).toEqual({ machines: [], next: null });
  });

  it("throws when a page fails or does not parse", async () => {
    Array.from({ length: 30 }, (_, i) => fake.plantOrphan(`gpulease-${i}`));
    fake.faults.list = [{ fault: { kind: "malformed" }, times: 1 }];
    await providerError(vast.listOwn("gpulease-", []));
    fake.faults.list = [];
    fake.inject("list", { kind: "error200" });
    await providerError(vast.listOwn("gpulease-", []));
  });
});

describe("vast account and secrets", () => {
  it("reads the credit and nothing else from /users/current/", async () => {
    expect(await vast.balance()).toEqual({ amount: 37.52, currency: "USD" });
  });

  it("never lets the echoed api_key into an error", async () => {
    fake.inject("user", { kind: "http", status: 500, body: `{"credit": "x", "api_key": "${VAST_ECHOED_API_KEY}"}` });
    expectNoSecret((await providerError(vast.balance())).message);
    fake.inject("user", { kind: "http", status: 500, body: `{"credit": "x", "api_key": "${VAST_ECHOED_API_KEY}` });
    expectNoSecret((await providerError(vast.balance())).message);
  });

  it("scrubs keys out of a create error", async () => {
    const offer = await offerFor();
    fake.inject("create", {
      kind: "http",
      status: 500,
      body: `bad key ${VAST_FAKE_KEY} api_key=${VAST_ECHOED_API_KEY}`,
    });
    const result = await vast.rent(offer, spec());
    expect(result).toMatchObject({ ok: false, kind: "ambiguous" });
    expectNoSecret(!result.ok ? result.error : "");
  });

  it("sends the key only as a Bearer header, with a User-Agent, never in a URL", async () => {
    const ref = await rented();
    await vast.status(ref);
    await vast.listOwn("gpulease-", []);
    await vast.findByLabel("gpulease-lse01");
    await vast.balance();
    await vast.terminate(ref);
    expect(fake.requests.length).toBeGreaterThan(6);
    for (const request of fake.requests) {
      expect(request.url).not.toContain("api_key");
      expectNoSecret(decodeURIComponent(request.url));
      expect(request.authorization).toBe(`Bearer ${VAST_FAKE_KEY}`);
      expect(request.userAgent).toMatch(/^gpulease\//);
    }
  });

  it("reports a wrong key as an auth error without echoing it", async () => {
    const wrong = createVastProvider({
      apiKey: "vast-wrong-key-000000000000",
      baseUrl: VAST_FAKE_URL,
      sleep: async () => {},
    });
    const error = await providerError(wrong.balance());
    expect(error.kind).toBe("auth");
    expect(error.message).not.toContain("vast-wrong-key-000000000000");
  });
});
