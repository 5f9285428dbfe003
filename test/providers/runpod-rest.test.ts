import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { CursorRefusedError, ProviderError } from "../../src/providers/http";
import { createRunpodRestProvider, POD_PAGES_PER_CALL, type RunpodRestOptions } from "../../src/providers/runpod-rest";
import type { MachineSpec } from "../../src/providers/types";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { checkRunpodSchema } from "../fakes/openapi-check";
import { RUNPOD_FAKE_KEY, RunpodFake } from "../fakes/runpod";
import { ollamaSpec, runpodOffer } from "../support/provider-fixtures";

// RunPod over REST v2 at the adapter level: docs/providers.md#runpod-rest-v2.

const PROXY_TEMPLATE = "http://{id}-{port}.proxy.runpod.fake";
const T0 = Date.parse("2026-11-29T02:00:00Z");

let fake: RunpodFake;
let installed: InstalledFakes;
let balanceCalls: number;

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(T0);
  fake = new RunpodFake();
  installed = installFakes(fake);
  balanceCalls = 0;
});

afterEach(() => {
  installed.restore();
  vi.useRealTimers();
});

function runpod(overrides: Partial<RunpodRestOptions> = {}) {
  return createRunpodRestProvider({
    apiKey: RUNPOD_FAKE_KEY,
    baseUrl: "http://runpod.fake",
    proxyTemplate: PROXY_TEMPLATE,
    minCudaVersion: "12.4",
    balance: async () => {
      balanceCalls++;
      return { amount: 1, currency: "USD" };
    },
    timeoutMs: 200,
    sleep: async () => {},
    ...overrides,
  });
}

const spec = (overrides: Partial<MachineSpec> = {}) =>
  ollamaSpec({
    label: "gl-ollama-0001",
    image: "ollama/ollama:0.11.4",
    env: { A: "b" },
    disk_gb: 20,
    max_minutes: 120,
    ...overrides,
  });

const offer = (offerId?: string) => runpodOffer(offerId);

async function rentOne(s = spec()): Promise<string> {
  const result = await runpod().rent(offer(), s);
  if (!result.ok) throw new Error(`rent failed: ${result.error}`);
  return result.ref;
}

describe("RunPod REST v2: offers (docs/providers.md#runpod-rest-v2)", () => {
  it("asks the catalogue per cloud and GPU count with the CUDA floor, and offers only stocked types", async () => {
    const offers = await runpod().listOffers({ gpu_count: 2 });
    const catalogCalls = fake.calls("gpuTypes").map((r) => new URL(r.url).searchParams);
    expect(catalogCalls.map((q) => q.get("cloud")).sort()).toEqual(["COMMUNITY", "SECURE"]);
    for (const q of catalogCalls) {
      expect(q.get("include")).toBe("AVAILABILITY");
      expect(q.get("product")).toBe("POD");
      expect(q.get("count")).toBe("2");
      expect(q.get("minCudaVersion")).toBe("12.4");
    }
    // RTX 4090 is stocked in both clouds; the price is per GPU times the count.
    expect(offers.find((o) => o.offer_id === "runpod:SECURE:NVIDIA GeForce RTX 4090:2")?.price_per_hour).toBe(1.38);
    // H100 has no stock, L40S shows "None", MI300X is AMD: none offered.
    expect(offers.some((o) => /H100|L40S|MI300X/.test(o.offer_id))).toBe(false);
    expect(fake.requests.every((r) => r.transport === "rest")).toBe(true);
  });

  it("stock depends on the cloud: a type out of stock in community cloud is offered in secure only", async () => {
    fake.outOfStock.add("COMMUNITY:NVIDIA GeForce RTX 4090");
    const ids = (await runpod().listOffers({})).map((o) => o.offer_id);
    expect(ids).toContain("runpod:SECURE:NVIDIA GeForce RTX 4090");
    expect(ids).not.toContain("runpod:COMMUNITY:NVIDIA GeForce RTX 4090");
  });

  it("stock depends on the GPU count: a type stocked for one GPU but not for four is not offered for four", async () => {
    fake.outOfStock.add("SECURE:NVIDIA A40:4");
    fake.outOfStock.add("COMMUNITY:NVIDIA A40:4");
    expect((await runpod().listOffers({ gpu_count: 1 })).some((o) => o.offer_id.includes("A40"))).toBe(true);
    expect((await runpod().listOffers({ gpu_count: 4 })).some((o) => o.offer_id.includes("A40"))).toBe(false);
  });
});

describe("RunPod REST v2: create (docs/providers.md#runpod-rest-v2)", () => {
  it("sends only CreatePodRequest fields, env as an object, ports as a list, the CUDA floor on gpu", async () => {
    const ref = await rentOne();
    const sent = fake.model.get(ref)!;
    expect(sent.meta.minCudaVersion).toBe("12.4");
    expect(sent.meta.ports).toBe("11434/http");
    expect(sent.meta.env).toEqual(
      expect.arrayContaining(["A=b", "OLLAMA_HOST=0.0.0.0", "OLLAMA_KEEP_ALIVE=-1", "OLLAMA_CONTEXT_LENGTH=8192"]),
    );
  });

  it("a field the document does not name is a 422 from RunPod: the fake refuses it as RunPod would", async () => {
    const res = await fetch("http://runpod.fake/v2/pods", {
      method: "POST",
      headers: { Authorization: `Bearer ${RUNPOD_FAKE_KEY}`, "User-Agent": "t", "Content-Type": "application/json" },
      body: JSON.stringify({
        name: "x",
        image: "y",
        gpu: { id: "NVIDIA A40" },
        terminateAfter: "2027-01-01T00:00:00Z",
      }),
    });
    expect(res.status).toBe(422);
    expect(res.headers.get("content-type")).toContain("application/problem+json");
    expect(JSON.stringify(await res.json())).toContain("terminateAfter");
  });

  it("no capacity is a 400 problem+json with RunPod's detail text: no_capacity, so the next offer is tried", async () => {
    fake.quirks.noCapacity = { variant: "requested", times: 1 };
    const result = await runpod().rent(offer(), spec());
    expect(result).toMatchObject({ ok: false, kind: "no_capacity" });
    expect(!result.ok && result.error).toContain("no longer any instances available");
    // No leaner retry: v2 has no host RAM/vCPU minimum to relax.
    expect(fake.calls("deploy")).toHaveLength(1);
  });

  it("a 400 for another reason is a refusal, not no capacity", async () => {
    const result = await runpod().rent(offer("runpod:SECURE:NVIDIA GeForce RTX 4090"), spec({ label: "" }));
    expect(result).toMatchObject({ ok: false, kind: "rejected" });
  });

  it("a 500 after the pod was made is ambiguous (look it up by label), never a refusal", async () => {
    fake.quirks.errorButCreated = "http_500";
    const result = await runpod().rent(offer(), spec());
    expect(result).toMatchObject({ ok: false, kind: "ambiguous" });
    expect(fake.model.list()).toHaveLength(1);
    fake.quirks.errorButCreated = null;
    expect((await runpod().findByLabel("gl-ollama-0001"))?.ref).toBe(fake.model.list()[0]!.id);
  });

  it("a create that times out is ambiguous", async () => {
    fake.quirks.errorButCreated = "hang";
    expect(await runpod().rent(offer(), spec())).toMatchObject({ ok: false, kind: "ambiguous" });
  });

  it("a 429 on create is refused at the door", async () => {
    fake.fault("deploy", { kind: "status", status: 429, headers: { "Retry-After": "30" } });
    expect(await runpod().rent(offer(), spec())).toMatchObject({ ok: false, kind: "rejected" });
  });
});

describe("RunPod REST v2: status (docs/providers.md#runpod-rest-v2)", () => {
  it("status RUNNING with runtime null is booting: readiness comes from runtime, not status", async () => {
    fake.quirks.bootMs = 60_000;
    fake.quirks.restRunningBeforeRuntime = true;
    const ref = await rentOne();
    expect(fake.podView(ref)).not.toBeNull();
    const pod = (await (
      await fetch(`http://runpod.fake/v2/pods/${ref}`, {
        headers: { Authorization: `Bearer ${RUNPOD_FAKE_KEY}`, "User-Agent": "t" },
      })
    ).json()) as { status: string; runtime: unknown };
    expect(pod).toMatchObject({ status: "RUNNING", runtime: null });
    const booting = await runpod().status(ref);
    expect(booting.state).toBe("booting");
    vi.setSystemTime(T0 + 61_000);
    expect((await runpod().status(ref)).state).toBe("running");
  });

  it("an empty runtime object ({} as in RunPod's own create example) is not running", async () => {
    fake.quirks.bootMs = 60_000;
    fake.quirks.restEmptyRuntime = true;
    const ref = await rentOne();
    expect((await runpod().status(ref)).state).toBe("booting");
  });

  it("runtime with uptime 0 and no ports yet is still booting", async () => {
    fake.quirks.runtimeWithoutPortsMs = 30_000;
    const ref = await rentOne();
    expect((await runpod().status(ref)).state).toBe("booting");
    vi.setSystemTime(T0 + 31_000);
    const running = await runpod().status(ref);
    expect(running.state).toBe("running");
    expect(running.access?.urls).toEqual([`http://${ref}-11434.proxy.runpod.fake`]);
  });

  it("cost is the running price; a 0.0 from a stopped pod is not a price", async () => {
    const ref = await rentOne();
    expect((await runpod().status(ref)).price_per_hour).toBe(0.69);
    fake.exitPod(ref);
    const exited = await runpod().status(ref);
    expect(exited.state).toBe("exited");
    expect(exited.price_per_hour).toBeNull();
  });

  it("a terminating pod shown as TERMINATED with cost 0.0 is gone and reports no price", async () => {
    fake.quirks.lingerMs = 10_000;
    fake.quirks.lingerShowsAs = "TERMINATED";
    const ref = await rentOne();
    await runpod().terminate(ref);
    expect(fake.podView(ref)).not.toBeNull();
    expect(await runpod().status(ref)).toMatchObject({ state: "gone", price_per_hour: null });
  });

  it("ssh comes from ssh.direct once 22/tcp is published", async () => {
    const ref = await rentOne(spec({ template: "custom", ports: [8080], cmd: "python serve.py" }));
    const status = await runpod().status(ref);
    expect(status.access?.ssh).toEqual({ host: "213.173.104.74", port: expect.any(Number) });
    expect(status.access?.urls).toEqual([`http://${ref}-8080.proxy.runpod.fake`]);
    expect(fake.model.get(ref)?.meta.cmd).toEqual(["bash", "-c", "python serve.py"]);
  });
});

describe("RunPod REST v2: gone only on RunPod's own word (docs/providers.md#teardown-evidence)", () => {
  it("a 404 with RunPod's problem+json body is gone", async () => {
    const ref = await rentOne();
    fake.removePod(ref);
    expect((await runpod().status(ref)).state).toBe("gone");
  });

  it("an HTML 404 (a proxy, a wrong base URL) proves nothing: the read fails", async () => {
    const ref = await rentOne();
    fake.removePod(ref);
    fake.fault("pod", { kind: "status", status: 404, body: "<html><body>404 Not Found</body></html>" });
    await expect(runpod().status(ref)).rejects.toBeInstanceOf(ProviderError);
  });

  it("a JSON 404 that is not problem+json proves nothing either", async () => {
    const ref = await rentOne();
    fake.fault("pod", {
      kind: "status",
      status: 404,
      body: JSON.stringify({ message: "no route" }),
      headers: { "Content-Type": "application/json" },
    });
    await expect(runpod().status(ref)).rejects.toBeInstanceOf(ProviderError);
  });

  it("a wrong base URL's 404 is a failed read, not gone", async () => {
    const ref = await rentOne();
    installed.restore();
    installed = installFakes(fake, {
      handles: (url) => url.host === "wrong.fake",
      handle: async () => new Response("Not Found", { status: 404, headers: { "Content-Type": "text/html" } }),
    });
    await expect(runpod({ baseUrl: "http://wrong.fake" }).status(ref)).rejects.toBeInstanceOf(ProviderError);
  });

  it("delete of a gone pod (404 problem+json) resolves; an HTML 404 on delete throws", async () => {
    const ref = await rentOne();
    fake.removePod(ref);
    await expect(runpod().terminate(ref)).resolves.toBeUndefined();
    fake.fault("terminate", { kind: "status", status: 404, body: "<html>Not Found</html>" });
    await expect(runpod().terminate(ref)).rejects.toBeInstanceOf(ProviderError);
  });

  it("409 on a locked pod is not gone: delete throws and the pod still reads as there", async () => {
    const ref = await rentOne();
    fake.lockedPods.add(ref);
    await expect(runpod().terminate(ref)).rejects.toThrow(/409/);
    expect((await runpod().status(ref)).state).toBe("running");
  });
});

describe("RunPod REST v2: listing, balance, billing", () => {
  it("lists every pod and keeps those whose name starts with the label prefix", async () => {
    await rentOne(spec({ label: "gl-a" }));
    fake.plantPod({ name: "my-jupyter" });
    fake.plantPod({ name: "glx-other" });
    const own = (await runpod().listOwn("gl", [])).machines;
    expect(own.map((m) => m.label)).toEqual(["gl-a"]);
  });

  it("a listing that does not parse throws, never an empty list", async () => {
    fake.fault("myself", {
      kind: "status",
      status: 200,
      body: '{"items": []}',
      headers: { "Content-Type": "application/json" },
    });
    await expect(runpod().listOwn("gl", [])).rejects.toBeInstanceOf(ProviderError);
  });

  it("the balance comes from the injected reader (GraphQL while it lives)", async () => {
    expect(await runpod().balance()).toEqual({ amount: 1, currency: "USD" });
    expect(balanceCalls).toBe(1);
  });

  it("reads what RunPod billed per pod and UTC day from /v2/billing/pods", async () => {
    const ref = await rentOne();
    vi.setSystemTime(T0 + 2 * 3_600_000);
    const days = await runpod().billedDays!(
      ref,
      new Date(T0).toISOString(),
      new Date(T0 + 2 * 3_600_000).toISOString(),
    );
    expect(days).toEqual([{ day: "2026-11-29", amount: 1.38 }]);
    const query = new URL(fake.calls("billing")[0]!.url).searchParams;
    expect(query.get("podId")).toBe(ref);
    expect(query.get("bucketSize")).toBe("day");
    expect(query.get("startTime")).toBe("2026-11-29T00:00:00Z");
  });
});

describe("RunPod REST v2: paged listings (docs/providers.md#runpod-rest-pages)", () => {
  /** `count` pods that are not ours, planted before anything the test rents: they fill the first pages. */
  const strangers = (count: number) => {
    for (let i = 0; i < count; i++) fake.plantPod({ name: `someone-else-${i}` });
  };

  const listQueries = () => fake.calls("myself").map((r) => new URL(r.url).searchParams);
  const page = (body: unknown) => ({
    kind: "status" as const,
    status: 200,
    body: JSON.stringify(body),
    headers: { "Content-Type": "application/json" },
  });

  it("findByLabel finds a pod that is listed only on a later page", async () => {
    strangers(4);
    const ref = await rentOne();
    expect(await runpod().findByLabel("gl-ollama-0001")).toMatchObject({ ref, label: "gl-ollama-0001" });
  });

  it("asks as runpodctl does: limit=1000, then cursor=<nextCursor> while hasNextPage", async () => {
    fake.quirks.podsPageSize = 2;
    strangers(4);
    await rentOne();
    await runpod().findByLabel("gl-ollama-0001");
    const queries = listQueries();
    // 5 pods, 2 a page: three pages, each asked for with the cursor the one before gave.
    expect(queries).toHaveLength(3);
    expect(queries.every((q) => q.get("limit") === "1000")).toBe(true);
    expect(queries[0]!.has("cursor")).toBe(false);
    const cursors = queries.slice(1).map((q) => q.get("cursor"));
    expect(cursors.every((c) => c?.startsWith("pc_"))).toBe(true);
    expect(new Set(cursors).size).toBe(2);
  });

  it("listOwn stops at the page bound with the cursor to go on from, and goes on from it to the end", async () => {
    fake.quirks.podsPageSize = 1;
    const first = await rentOne(spec({ label: "gl-first" }));
    strangers(POD_PAGES_PER_CALL);
    const last = await rentOne(spec({ label: "gl-last" }));

    const cut = await runpod().listOwn("gl", []);
    expect(cut.machines.map((m) => m.ref)).toEqual([first]);
    expect(cut.next).toMatch(/^pc_/);
    expect(listQueries()).toHaveLength(POD_PAGES_PER_CALL);

    const rest = await runpod().listOwn("gl", [], cut.next);
    expect(rest).toEqual({ machines: [expect.objectContaining({ ref: last, label: "gl-last" })], next: null });
    expect(listQueries()[POD_PAGES_PER_CALL]!.get("cursor")).toBe(cut.next);
  });

  it("findByLabel past the page bound throws: a lookup that saw part of the account is no answer", async () => {
    fake.quirks.podsPageSize = 1;
    strangers(POD_PAGES_PER_CALL);
    await rentOne();
    const error = await runpod()
      .findByLabel("gl-ollama-0001")
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).message).toContain(`more than ${POD_PAGES_PER_CALL} pages`);
    // Even with the pod on page 1, what was not read may hold a second pod of that label.
    expect(listQueries()).toHaveLength(POD_PAGES_PER_CALL);
  });

  it("a cursor RunPod refuses (expired or unknown) throws CursorRefusedError, a refused first page a plain error", async () => {
    fake.quirks.podsPageSize = 1;
    fake.quirks.podsCursorTtlMs = 60_000;
    strangers(POD_PAGES_PER_CALL + 1);
    const { next } = await runpod().listOwn("gl", []);
    expect(next).not.toBeNull();
    vi.setSystemTime(T0 + 61_000);
    const expired = await runpod()
      .listOwn("gl", [], next)
      .catch((e: unknown) => e);
    expect(expired).toBeInstanceOf(CursorRefusedError);
    expect(expired).toMatchObject({ status: 400, message: expect.stringContaining("cursor was refused") });
    await expect(runpod().listOwn("gl", [], "pc_nosuchcursor")).rejects.toBeInstanceOf(CursorRefusedError);
    fake.fault("myself", { kind: "status", status: 400 });
    const plain = await runpod()
      .listOwn("gl", [])
      .catch((e: unknown) => e);
    expect(plain).toBeInstanceOf(ProviderError);
    expect(plain).not.toBeInstanceOf(CursorRefusedError);
  });

  it("a page without pagination is the last (the kept document's shape)", async () => {
    fake.fault("myself", page({ pods: [] }));
    expect(await runpod().listOwn("gl", [])).toEqual({ machines: [], next: null });
    expect(listQueries()).toHaveLength(1);
  });

  it("hasNextPage without a nextCursor, or a cursor that repeats, throws: never a short list read as all", async () => {
    fake.fault("myself", page({ pods: [], pagination: { hasNextPage: true, nextCursor: null } }));
    await expect(runpod().listOwn("gl", [])).rejects.toThrow(/hasNextPage without a nextCursor/);
    const again = page({ pods: [], pagination: { hasNextPage: true, nextCursor: "pc_same" } });
    fake.fault("myself", again, 2);
    await expect(runpod().findByLabel("gl-x")).rejects.toThrow(/nextCursor repeats/);
  });
});

describe("the fake speaks REST v2 as RunPod's OpenAPI document describes it", () => {
  const get = async (path: string) =>
    fetch(`http://runpod.fake${path}`, { headers: { Authorization: `Bearer ${RUNPOD_FAKE_KEY}`, "User-Agent": "t" } });

  it("catalogue, pod, pod list, billing and errors conform to the document's schemas", async () => {
    fake.quirks.bootMs = 60_000;
    const booting = await rentOne(spec({ label: "gl-boot" }));
    vi.setSystemTime(T0 + 120_000);
    const running = await rentOne(spec({ label: "gl-run", template: "custom", ports: [8080], cmd: "x" }));
    vi.setSystemTime(T0 + 240_000);
    const exited = fake.plantPod({ name: "gl-exited" });
    fake.exitPod(exited);

    const catalog = await (await get("/v2/catalog/gpus?include=AVAILABILITY&product=POD&count=1&cloud=SECURE")).json();
    expect(checkRunpodSchema("ListGpuTypesResponse", catalog)).toEqual([]);
    expect(checkRunpodSchema("ListGpuTypesResponse", await (await get("/v2/catalog/gpus")).json())).toEqual([]);
    for (const id of [booting, running, exited])
      expect(checkRunpodSchema("Pod", await (await get(`/v2/pods/${id}`)).json())).toEqual([]);
    expect(checkRunpodSchema("ListPodsResponse", await (await get("/v2/pods")).json())).toEqual([]);
    const billing = await (await get(`/v2/billing/pods?podId=${running}&bucketSize=day`)).json();
    expect(checkRunpodSchema("ListPodBillingResponse", billing)).toEqual([]);
    const notFound = await get("/v2/pods/nosuchpod0000");
    expect(notFound.headers.get("content-type")).toBe("application/problem+json");
    expect(checkRunpodSchema("ErrorResponse", await notFound.json())).toEqual([]);
  });

  it("pages GET /v2/pods: limit up to its page size, a keyset cursor, 422 for a bad limit, 400 for an unknown cursor", async () => {
    fake.quirks.podsPageSize = 3;
    for (let i = 0; i < 4; i++) fake.plantPod({ name: `p-${i}` });
    const first = (await (await get("/v2/pods?limit=1000")).json()) as {
      pods: { name: string }[];
      pagination: { nextCursor: string | null; hasNextPage: boolean };
    };
    expect(checkRunpodSchema("ListPodsResponse", first)).toEqual([]);
    expect(first.pods.map((p) => p.name)).toEqual(["p-0", "p-1", "p-2"]);
    expect(first.pagination.hasNextPage).toBe(true);
    // A pod made while a client pages shows on a later page; page 2 is not shifted by it.
    fake.plantPod({ name: "p-new" });
    const second = await (await get(`/v2/pods?limit=1000&cursor=${first.pagination.nextCursor}`)).json();
    expect(second).toMatchObject({
      pods: [{ name: "p-3" }, { name: "p-new" }],
      pagination: { nextCursor: null, hasNextPage: false },
    });
    expect(((await (await get("/v2/pods?limit=1")).json()) as { pods: unknown[] }).pods).toHaveLength(1);
    expect((await get("/v2/pods?limit=0")).status).toBe(422);
    const unknown = await get("/v2/pods?cursor=pc_0000");
    expect(unknown.status).toBe(400);
    expect(unknown.headers.get("content-type")).toBe("application/problem+json");
    expect(checkRunpodSchema("ErrorResponse", await unknown.json())).toEqual([]);
  });

  it("the check itself fails on a pod that breaks the document", () => {
    expect(checkRunpodSchema("Pod", { id: "x", status: "BOOTING" }).length).toBeGreaterThan(0);
    expect(checkRunpodSchema("CreatePodRequest", { name: "x", image: "y", supportPublicIp: true })).toEqual([
      expect.stringContaining("supportPublicIp"),
    ]);
  });
});
