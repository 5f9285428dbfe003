import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { gpuSpecFor } from "../../src/providers/gpus";
import { ProviderError } from "../../src/providers/http";
import { createRunpodProvider, type RunpodOptions } from "../../src/providers/runpod";
import type { MachineSpec } from "../../src/providers/types";
import { type InstalledFakes, installFakes } from "../fakes/install";
import {
  NO_CAPACITY_MESSAGES,
  type NoCapacityVariant,
  RUNPOD_FAKE_KEY,
  RUNPOD_FAKE_URL,
  RunpodFake,
} from "../fakes/runpod";
import { ollamaSpec, runpodOffer } from "../support/provider-fixtures";

const PROXY_TEMPLATE = "http://{id}-{port}.proxy.runpod.fake";
const T0 = Date.parse("2026-11-29T02:00:00Z");

let fake: RunpodFake;
let installed: InstalledFakes;
let sleeps: number[];

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(T0);
  fake = new RunpodFake();
  installed = installFakes(fake);
  sleeps = [];
});

afterEach(() => {
  installed.restore();
  vi.useRealTimers();
});

function runpod(overrides: Partial<RunpodOptions> = {}) {
  return createRunpodProvider({
    apiKey: RUNPOD_FAKE_KEY,
    url: RUNPOD_FAKE_URL,
    proxyTemplate: PROXY_TEMPLATE,
    timeoutMs: 200,
    sleep: async (ms) => {
      sleeps.push(ms);
    },
    ...overrides,
  });
}

const spec = (overrides: Partial<MachineSpec> = {}) =>
  ollamaSpec({ label: "gl-ollama-0001", image: "ollama/ollama:0.11.4", disk_gb: 20, max_minutes: 120, ...overrides });

const offer = runpodOffer;

async function rentedPod(overrides: Partial<MachineSpec> = {}): Promise<string> {
  const result = await runpod().rent(offer(), spec(overrides));
  if (!result.ok) throw new Error(`rent failed: ${result.error}`);
  return result.ref;
}

async function thrown(promise: Promise<unknown>): Promise<ProviderError> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  if (!(error instanceof ProviderError)) throw new Error(`expected a ProviderError, got ${String(error)}`);
  return error;
}

const deployInputs = () => fake.calls("deploy").map((r) => (r.variables as { input: Record<string, unknown> }).input);
const advance = (ms: number) => vi.setSystemTime(Date.now() + ms);

describe("transport", () => {
  it("the fake blocks a request without a User-Agent or with a bot UA (1010); the adapter always sends one", async () => {
    const body = JSON.stringify({ query: "query { gpuTypes { id } }" });
    const bare = await fetch(RUNPOD_FAKE_URL, {
      method: "POST",
      body,
      headers: { "Content-Type": "application/json" },
    });
    expect(bare.status).toBe(403);
    expect(await bare.text()).toBe("error code: 1010");
    const bot = await fetch(RUNPOD_FAKE_URL, {
      method: "POST",
      body,
      headers: { "Content-Type": "application/json", "User-Agent": "Python-urllib/3.12" },
    });
    expect(bot.status).toBe(403);

    const provider = runpod();
    await provider.listOffers({});
    const ref = await rentedPod();
    await provider.status(ref);
    await provider.listOwn("gl", []);
    await provider.balance();
    await provider.terminate(ref);
    const adapterCalls = fake.requests.slice(2);
    expect(adapterCalls.length).toBeGreaterThanOrEqual(6);
    for (const call of adapterCalls) {
      expect(call.userAgent).toMatch(/^gpulease\//);
      expect(call.status).toBe(200);
    }
  });

  it("a 1010 block surfaces as an auth error naming the provider's text", async () => {
    const stripUserAgent: typeof fetch = (input, init) => {
      const headers = new Headers(init?.headers);
      headers.delete("User-Agent");
      return fetch(input, { ...init, headers });
    };
    const error = await thrown(runpod({ fetch: stripUserAgent }).listOffers({}));
    expect(error.kind).toBe("auth");
    expect(error.message).toContain("error code: 1010");
  });

  it("sends the key only in the Authorization header, never in a URL or the query", async () => {
    const provider = runpod();
    await provider.listOffers({});
    const ref = await rentedPod();
    await provider.status(ref);
    await provider.findByLabel("gl-ollama-0001");
    await provider.balance();
    await provider.ollamaProbe(ref, await provider.status(ref), null);
    await provider.terminate(ref);
    expect(installed.requests.length).toBeGreaterThan(6);
    for (const request of installed.requests) expect(request.url).not.toContain(RUNPOD_FAKE_KEY);
    for (const call of fake.requests) {
      expect(call.authorization).toBe(`Bearer ${RUNPOD_FAKE_KEY}`);
      expect(call.query + JSON.stringify(call.variables)).not.toContain(RUNPOD_FAKE_KEY);
    }
  });

  it("no error message carries the key, even when RunPod echoes it back", async () => {
    fake.quirks.echoKeyInErrors = true;
    const provider = runpod();

    fake.quirks.auth = "no_permission";
    const unauthorized = await thrown(provider.balance());
    expect(unauthorized.message).toContain("Unauthorized");
    const refused = await provider.rent(offer(), spec());
    expect(refused.ok).toBe(false);

    fake.quirks.auth = "bad_key";
    const badKey = await thrown(provider.listOwn("gl", []));

    fake.quirks.auth = "ok";
    fake.fault("pod", {
      kind: "status",
      status: 500,
      body: `upstream failed for Authorization: Bearer ${RUNPOD_FAKE_KEY}`,
    });
    const serverError = await thrown(provider.status("abc123"));

    fake.quirks.noCapacity = { variant: "requested", times: 2 };
    const noCapacity = await provider.rent(offer(), spec());

    const texts = [
      unauthorized.message,
      badKey.message,
      serverError.message,
      !refused.ok ? refused.error : "",
      !noCapacity.ok ? noCapacity.error : "",
    ];
    expect(texts.every((t) => t.length > 0)).toBe(true);
    for (const t of texts) expect(t).not.toContain(RUNPOD_FAKE_KEY);
    expect(fake.requests.some((r) => r.status === 500)).toBe(true);
  });

  it("retries a 429, honouring Retry-After", async () => {
    fake.fault("gpuTypes", { kind: "status", status: 429, headers: { "Retry-After": "1" } }, 2);
    const offers = await runpod().listOffers({});
    expect(offers.length).toBeGreaterThan(0);
    expect(fake.calls("gpuTypes")).toHaveLength(3);
    expect(sleeps).toEqual([1000, 1000]);
  });

  it("retries a 429 without Retry-After with its own backoff, and a 503", async () => {
    const ref = await rentedPod();
    fake.fault("pod", { kind: "status", status: 429 });
    fake.fault("pod", { kind: "status", status: 503 });
    expect((await runpod().status(ref)).state).toBe("running");
    expect(fake.calls("pod")).toHaveLength(3);
    expect(sleeps).toHaveLength(2);
  });

  it("a 429 that outlasts the retries throws rate_limited", async () => {
    fake.fault("myself", { kind: "status", status: 429 }, 3);
    expect((await thrown(runpod().balance())).kind).toBe("rate_limited");
  });
});

describe("errors inside HTTP 200 and auth", () => {
  it("a key without permission gets 200 + Unauthorized: listing and balance throw, never 'no machines'", async () => {
    fake.plantPod({ name: "gl-orphan" });
    fake.quirks.auth = "no_permission";
    const provider = runpod();
    for (const call of [provider.listOwn("gl", []), provider.findByLabel("gl-orphan"), provider.balance()]) {
      const error = await thrown(call);
      expect(error.kind).toBe("auth");
      expect(error.message).toContain("Unauthorized");
    }
    expect(fake.requests.every((r) => r.status === 200)).toBe(true);
  });

  it("a bad key (401) throws auth on reads and is a definite refusal on create", async () => {
    fake.quirks.auth = "bad_key";
    const provider = runpod();
    expect((await thrown(provider.listOffers({}))).kind).toBe("auth");
    expect((await thrown(provider.status("abc123"))).kind).toBe("auth");
    const rent = await provider.rent(offer(), spec());
    expect(rent).toMatchObject({ ok: false, kind: "rejected" });
    expect(fake.model.list()).toHaveLength(0);
  });

  it("no key: myself is null, which throws instead of meaning 'no pods'", async () => {
    fake.plantPod({ name: "gl-orphan" });
    const keyless = runpod({ apiKey: "" });
    const body = await (
      await fetch(RUNPOD_FAKE_URL, {
        method: "POST",
        headers: { "User-Agent": "gpulease/test", "Content-Type": "application/json" },
        body: JSON.stringify({ query: "{ myself { id } }" }),
      })
    ).json();
    expect(body).toEqual({ data: { myself: null } });
    expect((await thrown(keyless.listOwn("gl", []))).kind).toBe("auth");
    expect((await thrown(keyless.findByLabel("gl-orphan"))).kind).toBe("auth");
    expect((await thrown(keyless.balance())).kind).toBe("auth");
    // the catalogue is public
    expect((await keyless.listOffers({})).length).toBeGreaterThan(0);
  });

  it("the fake answers unknown input fields, bad env and duration strings with HTTP 400 before deploying", async () => {
    const send = (input: Record<string, unknown>) =>
      fetch(RUNPOD_FAKE_URL, {
        method: "POST",
        headers: {
          "User-Agent": "gpulease/test",
          "Content-Type": "application/json",
          Authorization: `Bearer ${RUNPOD_FAKE_KEY}`,
        },
        body: JSON.stringify({
          query:
            "mutation Deploy($input: PodFindAndDeployOnDemandInput!) { podFindAndDeployOnDemand(input: $input) { id } }",
          variables: { input: { gpuTypeId: "NVIDIA GeForce RTX 4090", imageName: "x", ...input } },
        }),
      });
    const unknownField = await send({ objectMounts: ["a"] });
    expect(unknownField.status).toBe(400);
    expect(JSON.stringify(await unknownField.json())).toContain("objectMounts");
    expect((await send({ env: { A: "b" } })).status).toBe(400);
    expect((await send({ terminateAfter: "1h" })).status).toBe(400);
    expect(fake.model.list()).toHaveLength(0);
    // and the adapter's own input passes the same checks
    expect((await runpod().rent(offer(), spec())).ok).toBe(true);
  });

  it("the fake rejects a selection set on the scalar podTerminate (400)", async () => {
    const res = await fetch(RUNPOD_FAKE_URL, {
      method: "POST",
      headers: {
        "User-Agent": "gpulease/test",
        "Content-Type": "application/json",
        Authorization: `Bearer ${RUNPOD_FAKE_KEY}`,
      },
      body: JSON.stringify({
        query: "mutation T($input: PodTerminateInput!) { podTerminate(input: $input) { id } }",
        variables: { input: { podId: "x" } },
      }),
    });
    expect(res.status).toBe(400);
  });

  it("a 400 on create is a definite rejection with the provider's reason", async () => {
    fake.fault("deploy", {
      kind: "status",
      status: 400,
      body: JSON.stringify({
        errors: [
          {
            message: 'Field "objectMounts" is not defined by type "PodFindAndDeployOnDemandInput".',
            extensions: { code: "BAD_USER_INPUT" },
          },
        ],
      }),
    });
    const result = await runpod().rent(offer(), spec());
    expect(result).toMatchObject({ ok: false, kind: "rejected" });
    expect(!result.ok && result.error).toContain("objectMounts");
  });
});

describe("listOffers", () => {
  it("offers only types in stock, with the best stock status, secure and community prices", async () => {
    const offers = await runpod().listOffers({});
    const ids = offers.map((o) => o.offer_id);
    expect(ids).toEqual([
      "runpod:SECURE:NVIDIA GeForce RTX 4090",
      "runpod:COMMUNITY:NVIDIA GeForce RTX 4090",
      "runpod:SECURE:NVIDIA A40",
      "runpod:COMMUNITY:NVIDIA A40",
      "runpod:SECURE:NVIDIA RTX PRO 4500 Blackwell",
    ]);
    const rtx4090 = offers[0]!;
    expect(rtx4090).toEqual({
      offer_id: "runpod:SECURE:NVIDIA GeForce RTX 4090",
      provider: "runpod",
      gpu: "RTX 4090",
      gpu_key: "rtx-4090",
      gpu_count: 1,
      vram_gb: 24,
      price_per_hour: 0.69,
      currency: "USD",
      cloud: "SECURE",
      availability: "high", // "Low" in EU-RO-1, "High" in US-TX-3
      location: null,
      bandwidth_gbs: null,
      download_mbs: null,
      download_cost_per_gb: 0,
      min_billed_minutes: 0,
      templates: ["ollama", "custom"],
    });
    expect(offers[1]).toMatchObject({ cloud: "COMMUNITY", price_per_hour: 0.34 });
    expect(offers[2]).toMatchObject({ gpu: "A40", availability: "low" });
  });

  it('a catalogue type out of stock (null, "None", available false) is not offered', async () => {
    const offers = await runpod().listOffers({});
    expect(offers.some((o) => o.offer_id.includes("H100"))).toBe(false); // stockStatus null
    expect(offers.some((o) => o.offer_id.includes("L40S"))).toBe(false); // stockStatus "None"
    fake.setStock("NVIDIA L40S", "EU-RO-1", "Medium");
    const restocked = await runpod().listOffers({ gpu: "l40s" });
    expect(restocked.map((o) => [o.offer_id, o.availability])).toEqual([
      ["runpod:SECURE:NVIDIA L40S", "medium"],
      ["runpod:COMMUNITY:NVIDIA L40S", "medium"],
    ]);
  });

  it("skips AMD cards, which cannot run the CUDA images", async () => {
    const offers = await runpod().listOffers({ vram_gb: 100 });
    expect(offers).toEqual([]);
    expect(
      fake.dataCenters.some((dc) =>
        dc.gpuAvailability?.some((a) => a.gpuTypeId.startsWith("AMD") && a.stockStatus === "High"),
      ),
    ).toBe(true);
  });

  it("matches display names and ids, which differ (docs/providers.md#gpu-names), and keys the spec table by id", async () => {
    const byDisplay = await runpod().listOffers({ gpu: "pro 4500" });
    const byId = await runpod().listOffers({ gpu: "BLACKWELL" });
    expect(byDisplay).toEqual(byId);
    expect(byDisplay).toHaveLength(1);
    expect(byDisplay[0]).toMatchObject({
      gpu: "RTX PRO 4500",
      offer_id: "runpod:SECURE:NVIDIA RTX PRO 4500 Blackwell",
      gpu_key: gpuSpecFor("runpod", "NVIDIA RTX PRO 4500 Blackwell")?.key ?? null,
    });
  });

  it("honours gpu_count (price and memory × count, count in the id), vram_gb and max_price_usd", async () => {
    const pairs = await runpod().listOffers({ gpu: "4090", gpu_count: 2 });
    expect(pairs.map((o) => [o.offer_id, o.price_per_hour, o.vram_gb, o.gpu_count])).toEqual([
      ["runpod:SECURE:NVIDIA GeForce RTX 4090:2", 1.38, 48, 2],
      ["runpod:COMMUNITY:NVIDIA GeForce RTX 4090:2", 0.68, 48, 2],
    ]);
    const big = await runpod().listOffers({ vram_gb: 40 });
    expect(big.every((o) => o.vram_gb >= 40)).toBe(true);
    expect(big.map((o) => o.gpu)).toEqual(["A40", "A40"]);
    const cheap = await runpod().listOffers({ max_price_usd: 0.36 });
    expect(cheap.map((o) => o.offer_id)).toEqual([
      "runpod:COMMUNITY:NVIDIA GeForce RTX 4090",
      "runpod:COMMUNITY:NVIDIA A40",
    ]);
  });

  it("throws on a failed or unparseable listing instead of returning no offers", async () => {
    fake.fault("gpuTypes", { kind: "malformed" });
    expect((await thrown(runpod().listOffers({}))).kind).toBe("parse");
    fake.fault("gpuTypes", { kind: "empty" });
    expect((await thrown(runpod().listOffers({}))).kind).toBe("parse");
  });

  it("takes stock per cloud and GPU count from lowestPrice, with the CUDA floor (docs/providers.md#runpod-graphql)", async () => {
    fake.outOfStock.add("COMMUNITY:NVIDIA GeForce RTX 4090");
    fake.outOfStock.add("SECURE:NVIDIA A40:2");
    const one = (await runpod({ minCudaVersion: "12.4" }).listOffers({})).map((o) => o.offer_id);
    expect(one).toContain("runpod:SECURE:NVIDIA GeForce RTX 4090");
    expect(one).not.toContain("runpod:COMMUNITY:NVIDIA GeForce RTX 4090");
    expect(one).toContain("runpod:SECURE:NVIDIA A40");
    const two = (await runpod({ minCudaVersion: "12.4" }).listOffers({ gpu_count: 2 })).map((o) => o.offer_id);
    expect(two).not.toContain("runpod:SECURE:NVIDIA A40:2");
    expect(two).toContain("runpod:COMMUNITY:NVIDIA A40:2");
    const sent = fake.calls("gpuTypes").at(-1)!;
    expect(sent.variables).toEqual({ count: 2, minCuda: "12.4" });
    expect(sent.query).not.toContain("dataCenters");
  });
});

describe("rent", () => {
  it("deploys with the label, sized host, Ollama env, proxy port and a courtesy terminateAfter", async () => {
    const result = await runpod().rent(offer(), spec());
    expect(result).toMatchObject({ ok: true, price_per_hour: 0.69 });
    const [input] = deployInputs();
    expect(input).toEqual({
      name: "gl-ollama-0001",
      cloudType: "SECURE",
      gpuTypeId: "NVIDIA GeForce RTX 4090",
      gpuCount: 1,
      imageName: "ollama/ollama:0.11.4",
      ports: "11434/http",
      env: [
        { key: "OLLAMA_KEEP_ALIVE", value: "-1" },
        { key: "OLLAMA_HOST", value: "0.0.0.0" },
        { key: "OLLAMA_CONTEXT_LENGTH", value: "8192" },
      ],
      dockerArgs: "",
      containerDiskInGb: 42, // 1.5 × 18 + 15
      minVcpuCount: 4,
      minMemoryInGb: 26,
      volumeInGb: 0,
      terminateAfter: new Date(T0 + (120 + 60) * 60_000).toISOString(),
    });
    // docs/providers.md#runpod-graphql-env-ports: env comes back as "KEY=value" strings
    const ref = result.ok ? result.ref : "";
    expect(fake.podView(ref)?.env).toEqual([
      "OLLAMA_KEEP_ALIVE=-1",
      "OLLAMA_HOST=0.0.0.0",
      "OLLAMA_CONTEXT_LENGTH=8192",
    ]);
  });

  it("custom template: the spec's ports over http plus ssh, its env, and the cmd wrapped in bash -c", async () => {
    await runpod().rent(
      offer(),
      spec({
        template: "custom",
        image: "ghcr.io/you/batch:1",
        cmd: "python /app/run.py --name 'x'",
        env: { MODE: "batch" },
        ports: [8080, 22],
        context_length: null,
        disk_gb: 100,
      }),
    );
    const [input] = deployInputs();
    expect(input).toMatchObject({
      ports: "8080/http,22/tcp",
      env: [{ key: "MODE", value: "batch" }],
      dockerArgs: `bash -c 'python /app/run.py --name '\\''x'\\'''`,
      containerDiskInGb: 100, // the spec asked for more than the sizing
    });
  });

  it("passes user data as variables: a hostile label cannot change the document", async () => {
    const label = 'gl-x"}) { id } myself { clientBalance } #';
    const result = await runpod().rent(offer(), spec({ label }));
    expect(result.ok).toBe(true);
    const [call] = fake.calls("deploy");
    expect(call!.query).not.toContain("gl-x");
    expect(call!.operations).toEqual(["deploy"]);
    expect(fake.model.list()[0]!.label).toBe(label);
  });

  it("a multi-GPU offer deploys with its count", async () => {
    const result = await runpod().rent(offer("runpod:COMMUNITY:NVIDIA GeForce RTX 4090:2", 2), spec());
    expect(result).toMatchObject({ ok: true, price_per_hour: 0.68 });
    expect(deployInputs()[0]).toMatchObject({ cloudType: "COMMUNITY", gpuCount: 2 });
  });

  it("an offer id that is not RunPod's is rejected without a call", async () => {
    expect(await runpod().rent(offer("vast:12345"), spec())).toMatchObject({ ok: false, kind: "rejected" });
    expect(fake.requests).toHaveLength(0);
  });

  const variants: { variant: NoCapacityVariant; code?: string }[] = [
    { variant: "requested" },
    { variant: "request" },
    { variant: "disk" },
    { variant: "spot" },
    { variant: "gpus" },
    { variant: "cuda" },
    { variant: "supplyConstraint", code: "SUPPLY_CONSTRAINT" },
  ];
  it.each(variants)(
    "no capacity ($variant) → one lean retry → no_capacity with RunPod's text",
    async ({ variant, code }) => {
      fake.quirks.noCapacity = { variant, code, times: Number.POSITIVE_INFINITY };
      const result = await runpod().rent(offer(), spec());
      expect(result).toEqual({ ok: false, kind: "no_capacity", error: NO_CAPACITY_MESSAGES[variant].trim() });
      const inputs = deployInputs();
      expect(inputs.map((i) => [i.minVcpuCount, i.minMemoryInGb, i.containerDiskInGb])).toEqual([
        [4, 26, 42],
        [2, 15, 42],
      ]);
    },
  );

  it("the lean retry rents where the full size found nothing", async () => {
    fake.quirks.noCapacity = { variant: "requested", times: Number.POSITIVE_INFINITY, acceptLean: true };
    const result = await runpod().rent(offer(), spec());
    expect(result.ok).toBe(true);
    expect(deployInputs()).toHaveLength(2);
    expect(fake.model.list()).toHaveLength(1);
  });

  it("stock that lies: listed as High, refused on create", async () => {
    const offers = await runpod().listOffers({ gpu: "4090" });
    expect(offers[0]!.availability).toBe("high");
    fake.quirks.noCapacity = { variant: "request", times: 2 };
    expect(await runpod().rent(offers[0]!, spec())).toMatchObject({ ok: false, kind: "no_capacity" });
  });

  it("renting a type that is out of stock is no_capacity, not an error", async () => {
    const result = await runpod().rent(offer("runpod:SECURE:NVIDIA H100 80GB HBM3"), spec());
    expect(result).toMatchObject({ ok: false, kind: "no_capacity" });
  });

  it("any other GraphQL create error is ambiguous, since a pod may stand behind it (docs/providers.md#runpod-graphql)", async () => {
    const result = await runpod().rent(offer("runpod:SECURE:NVIDIA Imaginary 1"), spec());
    expect(result).toEqual({
      ok: false,
      kind: "ambiguous",
      error: "Could not find GPU type with id NVIDIA Imaginary 1",
    });
  });

  it("sends minCudaVersion, and supportPublicIp for a community pod that publishes a TCP port", async () => {
    const rp = runpod({ minCudaVersion: "12.4" });
    await rp.rent(
      offer("runpod:COMMUNITY:NVIDIA GeForce RTX 4090"),
      spec({ template: "custom", cmd: "x", ports: [8080] }),
    );
    await rp.rent(
      offer("runpod:SECURE:NVIDIA GeForce RTX 4090"),
      spec({ template: "custom", cmd: "x", ports: [8080] }),
    );
    await rp.rent(offer("runpod:COMMUNITY:NVIDIA GeForce RTX 4090"), spec());
    const [community, secure, ollama] = deployInputs();
    expect(community).toMatchObject({ minCudaVersion: "12.4", supportPublicIp: true, ports: "8080/http,22/tcp" });
    expect(secure).toMatchObject({ minCudaVersion: "12.4" });
    expect(secure).not.toHaveProperty("supportPublicIp");
    expect(ollama).not.toHaveProperty("supportPublicIp");
  });

  it.each([
    ["a timeout", { kind: "hang" } as const],
    ["HTTP 500", { kind: "status", status: 500 } as const],
    ["HTTP 502", { kind: "status", status: 502 } as const],
    ["malformed JSON", { kind: "malformed" } as const],
    ["an empty body", { kind: "empty" } as const],
    [
      "a 200 without an id",
      {
        kind: "status",
        status: 200,
        body: '{"data":{"podFindAndDeployOnDemand":{"id":null,"costPerHr":0.69}}}',
      } as const,
    ],
  ])("%s on create is ambiguous and never retried", async (_name, fault) => {
    fake.fault("deploy", fault);
    const result = await runpod().rent(offer(), spec());
    expect(result).toMatchObject({ ok: false, kind: "ambiguous" });
    expect(fake.calls("deploy")).toHaveLength(1);
  });

  it("a 429 on create is waited out (its Retry-After) and the create sent again: rented, as over REST", async () => {
    fake.fault("deploy", { kind: "status", status: 429, headers: { "Retry-After": "2" } }, 2);
    expect(await runpod().rent(offer(), spec())).toMatchObject({ ok: true });
    expect(fake.calls("deploy")).toHaveLength(3);
    expect(sleeps).toEqual([2000, 2000]);
  });

  it("a 429 that outlasts the create's 12 s is a refusal, never ambiguous", async () => {
    fake.fault("deploy", { kind: "status", status: 429, headers: { "Retry-After": "7" } }, 5);
    expect(await runpod().rent(offer(), spec())).toMatchObject({ ok: false, kind: "rejected" });
    expect(fake.calls("deploy")).toHaveLength(2);
    expect(sleeps).toEqual([7000]);
    expect(fake.model.list()).toHaveLength(0);
  });

  it.each(["graphql_error", "http_500", "hang"] as const)(
    "error but created (%s): ambiguous, and the pod turns up by label once the listing catches up",
    async (mode) => {
      fake.quirks.errorButCreated = mode;
      fake.quirks.listingLagMs = 5_000;
      const provider = runpod();
      const result = await provider.rent(offer(), spec());
      expect(result).toMatchObject({ ok: false, kind: "ambiguous" });
      expect(fake.model.list()).toHaveLength(1);
      // docs/providers.md#runpod-ambiguous-create: the listing lags behind the create; the caller has to look again
      expect(await provider.findByLabel("gl-ollama-0001")).toBeNull();
      advance(6_000);
      expect(await provider.findByLabel("gl-ollama-0001")).toMatchObject({
        label: "gl-ollama-0001",
        state: "running",
        price_per_hour: 0.69,
      });
    },
  );
});

describe("status", () => {
  it("runtime null is booting whatever desiredStatus says; ports or uptime make it running", async () => {
    fake.quirks.bootMs = 60_000;
    const ref = await rentedPod();
    const provider = runpod();
    expect(fake.podView(ref)).toMatchObject({ desiredStatus: "RUNNING", runtime: null });
    expect(await provider.status(ref)).toMatchObject({ state: "booting", cost: null, price_per_hour: 0.69 });
    advance(61_000);
    const running = await provider.status(ref);
    expect(running).toEqual({
      state: "running",
      access: { urls: [`http://${ref}-11434.proxy.runpod.fake`], ssh: null },
      cost: null,
      traffic_cost: null,
      price_per_hour: 0.69,
      error: null,
    });
  });

  it("stuck booting: billed, runtime null forever", async () => {
    fake.quirks.stuckBooting = true;
    const ref = await rentedPod();
    advance(3_600_000);
    expect((await runpod().status(ref)).state).toBe("booting");
  });

  it.each(["null", "empty"] as const)("runtime present with ports %s and uptime 0 is still booting", async (form) => {
    fake.quirks.runtimeWithoutPortsMs = 30_000;
    fake.quirks.runtimePortsMissingAs = form;
    const ref = await rentedPod();
    expect(fake.podView(ref)?.runtime).toMatchObject({ uptimeInSeconds: 0, ports: form === "null" ? null : [] });
    expect((await runpod().status(ref)).state).toBe("booting");
    advance(31_000);
    expect((await runpod().status(ref)).state).toBe("running");
  });

  it("http ports show an internal IP: access goes through the proxy; ssh only from a public tcp 22", async () => {
    const ref = await rentedPod({
      template: "custom",
      image: "x/y:1",
      cmd: "serve",
      ports: [8080],
      context_length: null,
    });
    const runtime = fake.podView(ref)?.runtime as { ports: { ip: string; isIpPublic: boolean; type: string }[] };
    expect(runtime.ports.find((p) => p.type === "http")).toMatchObject({
      isIpPublic: false,
      ip: expect.stringMatching(/^100\.65\./),
    });
    expect((await runpod().status(ref)).access).toEqual({
      urls: [`http://${ref}-8080.proxy.runpod.fake`],
      ssh: { host: "213.173.104.74", port: 35559 },
    });
    fake.quirks.publicIp = false;
    expect((await runpod().status(ref)).access?.ssh).toBeNull();
  });

  it.each(["EXITED", "DEAD"] as const)("desiredStatus %s is exited, with RunPod's reason", async (status) => {
    const ref = await rentedPod();
    fake.exitPod(ref, status);
    const read = await runpod().status(ref);
    expect(read).toMatchObject({ state: "exited", access: null });
    expect(read.error).toContain(status);
  });

  it("pod null is gone", async () => {
    const ref = await rentedPod();
    fake.removePod(ref);
    expect(await runpod().status(ref)).toMatchObject({ state: "gone", access: null, price_per_hour: null });
    expect(await runpod().status("neverexisted00")).toMatchObject({ state: "gone" });
  });

  it("TERMINATED while lingering is gone; a linger that still shows RUNNING is not", async () => {
    fake.quirks.lingerMs = 20_000;
    const provider = runpod();
    const first = await rentedPod();
    await provider.terminate(first);
    expect(fake.podView(first)).toMatchObject({ desiredStatus: "TERMINATED" });
    expect((await provider.status(first)).state).toBe("gone");

    fake.quirks.lingerShowsAs = "RUNNING";
    const second = await rentedPod({ label: "gl-ollama-0002" });
    await provider.terminate(second);
    expect((await provider.status(second)).state).toBe("running");
    advance(21_000);
    expect(fake.podView(second)).toBeNull();
    expect((await provider.status(second)).state).toBe("gone");
  });

  it.each([
    ["HTTP 500", { kind: "status", status: 500 } as const, "http"],
    ["HTTP 502 after retries", { kind: "status", status: 502 } as const, "http"],
    ["a timeout", { kind: "hang" } as const, "timeout"],
    ["malformed JSON", { kind: "malformed" } as const, "parse"],
    ["an empty body", { kind: "empty" } as const, "parse"],
    ["a changed shape", { kind: "status", status: 200, body: '{"data":{"pod":{"name":"no id"}}}' } as const, "parse"],
    [
      "an error inside 200",
      {
        kind: "status",
        status: 200,
        body: '{"errors":[{"message":"Something went wrong.","extensions":{"code":"INTERNAL_SERVER_ERROR"}}],"data":{"pod":null}}',
      } as const,
      "api",
    ],
  ])("a failed read (%s) throws, never gone", async (_name, fault, kind) => {
    const ref = await rentedPod();
    fake.fault("pod", fault, 3);
    const error = await thrown(runpod().status(ref));
    expect(error.kind).toBe(kind);
  });
});

describe("terminate", () => {
  it("terminating twice succeeds both times; only status proves the pod is gone", async () => {
    const ref = await rentedPod();
    const provider = runpod();
    await provider.terminate(ref);
    await provider.terminate(ref);
    const answers = fake.calls("terminate").map((c) => c.status);
    expect(answers).toEqual([200, 200]);
    expect((await provider.status(ref)).state).toBe("gone");
  });

  it("'pod not found to terminate' without a code is still already gone", async () => {
    fake.quirks.notFoundCode = false;
    await runpod().terminate("neverexisted00");
  });

  it("a terminate that is accepted but ignored leaves the pod running, and a repeat gets it", async () => {
    fake.quirks.ignoreTerminates = 2;
    const ref = await rentedPod();
    const provider = runpod();
    await provider.terminate(ref);
    expect((await provider.status(ref)).state).toBe("running");
    await provider.terminate(ref);
    await provider.terminate(ref);
    expect((await provider.status(ref)).state).toBe("gone");
  });

  it("any other error throws", async () => {
    const ref = await rentedPod();
    fake.quirks.auth = "no_permission";
    expect((await thrown(runpod().terminate(ref))).kind).toBe("auth");
    fake.quirks.auth = "ok";
    fake.fault("terminate", { kind: "status", status: 500 });
    expect((await thrown(runpod().terminate(ref))).kind).toBe("http");
    expect((await runpod().status(ref)).state).toBe("running");
  });
});

describe("own machines and balance", () => {
  it("lists pods by name prefix and finds one by exact label", async () => {
    const orphan = fake.plantPod({ name: "gl-orphan-7" });
    fake.plantPod({ name: "my-notebook" });
    fake.plantPod({ name: "glx-other" });
    fake.plantPod({ name: "" });
    const ref = await rentedPod();
    const provider = runpod();
    const own = (await provider.listOwn("gl", [])).machines;
    expect(own.map((m) => m.label).sort()).toEqual(["gl-ollama-0001", "gl-orphan-7"]);
    expect(own.find((m) => m.ref === orphan)).toEqual({
      ref: orphan,
      label: "gl-orphan-7",
      state: "running",
      created_at: new Date(T0).toISOString(),
      price_per_hour: 0.69,
    });
    expect(await provider.findByLabel("gl-ollama-0001")).toMatchObject({ ref, state: "running" });
    expect(await provider.findByLabel("gl-ollama")).toBeNull();
  });

  it("a failed listing throws", async () => {
    fake.fault("myself", { kind: "status", status: 500 });
    expect((await thrown(runpod().listOwn("gl", []))).kind).toBe("http");
  });

  it("balance is clientBalance in USD", async () => {
    expect(await runpod().balance()).toEqual({ amount: 42.17, currency: "USD" });
  });
});

describe("ollamaProbe (an empty Ollama server)", () => {
  it("down while the proxy answers 502, ready once Ollama listens", async () => {
    fake.quirks.ollamaListenDelayMs = 90_000;
    const ref = await rentedPod();
    const provider = runpod();
    const running = await provider.status(ref);
    expect(running.state).toBe("running");
    expect(await provider.ollamaProbe(ref, running, null)).toEqual({ phase: "down" });
    const proxied = await fetch(`http://${ref}-11434.proxy.runpod.fake/api/version`);
    expect(proxied.status).toBe(502);
    advance(91_000);
    expect(await provider.ollamaProbe(ref, running, null)).toEqual({ phase: "ready", digest: "" });
  });

  it("never ready when Ollama never listens", async () => {
    fake.quirks.ollamaNeverListens = true;
    const ref = await rentedPod();
    advance(600_000);
    expect(await runpod().ollamaProbe(ref, await runpod().status(ref), null)).toEqual({ phase: "down" });
  });
});

describe("myself.pods fields as the official clients query them (docs/providers.md#runpod-graphql)", () => {
  it("the fake refuses a field no official client queries with HTTP 400 Cannot query field", async () => {
    const res = await fetch(RUNPOD_FAKE_URL, {
      method: "POST",
      headers: { Authorization: `Bearer ${RUNPOD_FAKE_KEY}`, "User-Agent": "t", "Content-Type": "application/json" },
      body: JSON.stringify({ query: "query { myself { pods { id createdAt } } }" }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { errors: { message: string }[] };
    expect(body.errors[0]?.message).toContain('Cannot query field "createdAt"');
  });

  it("the label lookup and the listing ask only fields RunPod's schema has, so they answer", async () => {
    const ref = await rentedPod();
    expect((await runpod().findByLabel("gl-ollama-0001"))?.ref).toBe(ref);
    const listed = await runpod().listOwn("gl", []);
    expect(listed.machines.map((m) => m.ref)).toEqual([ref]);
    // The rental time comes from lastStatusChange ("Rented by User: <date>"), not createdAt.
    expect(listed.machines[0]?.created_at).toBe(new Date(T0).toISOString());
  });
});
