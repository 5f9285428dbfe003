import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import worker from "../../src/index";
import { RENT_DEADLINE_MS } from "../../src/leases/rent";
import { ProviderError } from "../../src/providers/http";
import { CREATE_RATE_LIMIT_WAIT_MS } from "../../src/providers/runpod";
import { createRunpodRestProvider, type RunpodRestOptions } from "../../src/providers/runpod-rest";
import type { MachineSpec } from "../../src/providers/types";
import { type InstalledFakes, installFakes } from "../fakes/install";
import { RUNPOD_FAKE_KEY, RunpodFake } from "../fakes/runpod";
import { tooManyRequests } from "../fakes/runpod-rest";
import { ADMIN_TOKEN } from "../helpers";
import { ollamaSpec, runpodOffer } from "../support/provider-fixtures";

// RunPod REST v2 as the live service and runpodctl behave: docs/providers.md#runpod-rest-v2.

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

function runpod(overrides: Partial<RunpodRestOptions> = {}) {
  return createRunpodRestProvider({
    apiKey: RUNPOD_FAKE_KEY,
    baseUrl: "http://runpod.fake",
    proxyTemplate: "http://{id}-{port}.proxy.runpod.fake",
    minCudaVersion: "12.4",
    balance: async () => ({ amount: 1, currency: "USD" }),
    timeoutMs: 200,
    sleep: async (ms) => {
      sleeps.push(ms);
    },
    ...overrides,
  });
}

const spec = (overrides: Partial<MachineSpec> = {}) =>
  ollamaSpec({ label: "gl-ollama-0001", image: "ollama/ollama:0.11.4", env: {}, disk_gb: 20, ...overrides });

async function rentOne(s = spec()): Promise<string> {
  const result = await runpod().rent(runpodOffer(), s);
  if (!result.ok) throw new Error(`rent failed: ${result.error}`);
  return result.ref;
}

describe("429 is back off and resume (docs/providers.md#runpod-rate-limits)", () => {
  it("a create answered 429 with Retry-After: 12 waits it out and rents the same offer", async () => {
    fake.fault("deploy", tooManyRequests(12));
    const result = await runpod().rent(runpodOffer(), spec());
    expect(result).toMatchObject({ ok: true });
    expect(sleeps).toEqual([12_000]);
    expect(fake.calls("deploy").map((r) => r.status)).toEqual([429, 201]);
    expect(fake.model.list()).toHaveLength(1);
  });

  it("two 429s of 2 s each: the third create rents", async () => {
    fake.fault("deploy", tooManyRequests(2), 2);
    expect(await runpod().rent(runpodOffer(), spec())).toMatchObject({ ok: true });
    expect(sleeps).toEqual([2_000, 2_000]);
  });

  it("a Retry-After past the create's budget is refused at once: no wait, no pod, not ambiguous", async () => {
    fake.fault("deploy", tooManyRequests(30));
    const result = await runpod().rent(runpodOffer(), spec());
    expect(result).toMatchObject({ ok: false, kind: "rejected" });
    expect(sleeps).toEqual([]);
    expect(fake.model.list()).toHaveLength(0);
  });

  it("the create's wait budget fits inside the rent's deadline", () => {
    expect(CREATE_RATE_LIMIT_WAIT_MS).toBeLessThan(RENT_DEADLINE_MS);
  });

  it("a keeper's status read waits out a short Retry-After", async () => {
    const ref = await rentOne();
    fake.fault("pod", tooManyRequests(1));
    expect((await runpod().status(ref)).state).toBe("running");
    expect(sleeps).toEqual([1_000]);
  });

  it("a keeper's read under a long Retry-After ends as rate_limited without sleeping (the next alarm retries)", async () => {
    const ref = await rentOne();
    fake.fault("pod", tooManyRequests(12));
    fake.fault("terminate", tooManyRequests(60));
    const read = await runpod()
      .status(ref)
      .catch((e: unknown) => e);
    expect(read).toBeInstanceOf(ProviderError);
    expect((read as ProviderError).kind).toBe("rate_limited");
    await expect(runpod().terminate(ref)).rejects.toMatchObject({ kind: "rate_limited" });
    expect(sleeps).toEqual([]);
    expect(fake.model.list()).toHaveLength(1);
  });
});

describe("gone only on RunPod's own not found (docs/providers.md#teardown-evidence)", () => {
  it("the fake answers an unknown route with a 404 problem body, as RunPod does", async () => {
    const res = await fetch("http://runpod.fake/v2/v2/pods/abc", {
      headers: { Authorization: `Bearer ${RUNPOD_FAKE_KEY}`, "User-Agent": "t" },
    });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ status: 404, title: "Not Found" });
  });

  it("a base URL ending in /v2 meets unknown routes: a live pod is a failed read, never gone", async () => {
    const ref = await rentOne();
    const doubled = runpod({ baseUrl: "http://runpod.fake/v2" });
    await expect(doubled.status(ref)).rejects.toBeInstanceOf(ProviderError);
    await expect(doubled.terminate(ref)).rejects.toBeInstanceOf(ProviderError);
    expect(fake.model.list().map((m) => m.id)).toEqual([ref]);
  });

  it("RunPod's pod-not-found body is gone even without the problem+json content type", async () => {
    const ref = await rentOne();
    fake.removePod(ref);
    const notFound = JSON.stringify({ detail: "pod not found", status: 404, title: "Not Found" });
    fake.fault("pod", { kind: "status", status: 404, body: notFound, headers: { "Content-Type": "application/json" } });
    expect((await runpod().status(ref)).state).toBe("gone");
    fake.fault("terminate", { kind: "status", status: 404, body: notFound, headers: { "Content-Type": "text/plain" } });
    await expect(runpod().terminate(ref)).resolves.toBeUndefined();
  });

  it("RUNPOD_API_URL ending in /v2 is config_invalid, named on /health", async () => {
    const ctx = createExecutionContext();
    const res = await worker.fetch(
      new Request("http://gpulease.test/health", {
        headers: { Authorization: `Bearer ${ADMIN_TOKEN}` },
      }) as Request<unknown, IncomingRequestCfProperties>,
      { ...env, RUNPOD_API_URL: "https://api.runpod.io/v2" } as Env,
      ctx,
    );
    await waitOnExecutionContext(ctx);
    expect(res.status).toBe(503);
    const body = (await res.json()) as { code: string; error: string };
    expect(body.code).toBe("config_invalid");
    expect(body.error).toContain("RUNPOD_API_URL");
  });
});

describe("the create's command fields (docs/providers.md#runpod-rest-command)", () => {
  const custom = () =>
    spec({ template: "custom", image: "ghcr.io/acme/job:1", cmd: "python train.py --epochs 3", ports: [] });
  const created = (ref: string) => fake.model.get(ref)!.meta;

  it("a custom command goes as the newest runpodctl's cmd array, never args (which RunPod refuses with a 422)", async () => {
    const ref = await rentOne(custom());
    expect(created(ref).cmd).toEqual(["bash", "-c", "python train.py --epochs 3"]);
    expect(created(ref).dockerArgs).toBe("");
    const pod = (await (
      await fetch(`http://runpod.fake/v2/pods/${ref}`, {
        headers: { Authorization: `Bearer ${RUNPOD_FAKE_KEY}`, "User-Agent": "t" },
      })
    ).json()) as { cmd: string[] };
    expect(pod.cmd).toEqual(["bash", "-c", "python train.py --epochs 3"]);
  });

  it("a model lease runs its start script as entrypoint and cmd", async () => {
    const ref = await rentOne(spec({ env: { GPULEASE_MODEL: "qwen3:8b" } }));
    expect(created(ref).entrypoint).toEqual(["/bin/sh", "-c"]);
    expect((created(ref).cmd as string[])[0]).toContain("ollama pull");
  });

  it("RUNPOD_REST_COMMAND_FIELDS=args sends one args string where RunPod takes that form", async () => {
    fake.quirks.restCommandFields = "args";
    const args = runpod({ commandFields: "args" });
    const job = await args.rent(runpodOffer(), custom());
    expect(job.ok).toBe(true);
    expect(created(job.ok ? job.ref : "").dockerArgs).toBe("bash -c 'python train.py --epochs 3'");
    const model = await args.rent(
      runpodOffer(),
      spec({ label: "gl-ollama-0002", env: { GPULEASE_MODEL: "qwen3:8b" } }),
    );
    const sent = JSON.parse(created(model.ok ? model.ref : "").dockerArgs as string);
    expect(sent.entrypoint).toEqual(["/bin/sh", "-c"]);
    // ...and the arrays form is what that RunPod refuses.
    const refused = await runpod().rent(runpodOffer(), custom());
    expect(refused).toMatchObject({ ok: false, kind: "rejected" });
    expect(!refused.ok && refused.error).toContain("422");
  });

  it("the fake refuses an unknown field with a 422 problem body", async () => {
    const res = await fetch("http://runpod.fake/v2/pods", {
      method: "POST",
      headers: { Authorization: `Bearer ${RUNPOD_FAKE_KEY}`, "User-Agent": "t", "Content-Type": "application/json" },
      body: JSON.stringify({ name: "x", image: "y", gpu: { id: "NVIDIA A40" }, supportPublicIp: true }),
    });
    expect(res.status).toBe(422);
    expect(JSON.stringify(await res.json())).toContain("supportPublicIp");
  });
});

describe("catalogue entries and the pod lifecycle (docs/providers.md#runpod-rest-v2)", () => {
  it("one odd GPU type entry is skipped; the rest of the catalogue is still offered in both clouds", async () => {
    const before = await runpod().listOffers({});
    fake.quirks.restCatalogExtras = [
      { id: "NVIDIA B300", name: "B300", manufacturer: null, memory: null, secure: true, community: true },
    ];
    const offers = await runpod().listOffers({});
    expect(offers.map((o) => o.offer_id).sort()).toEqual(before.map((o) => o.offer_id).sort());
    expect(new Set(offers.map((o) => o.cloud))).toEqual(new Set(["SECURE", "COMMUNITY"]));
  });

  it("the fake answers the create PROVISIONING, then STARTING, then RUNNING with a runtime", async () => {
    fake.quirks.bootMs = 60_000;
    const created = await runpod().rent(runpodOffer(), spec());
    expect(created.ok).toBe(true);
    const ref = created.ok ? created.ref : "";
    const read = async () =>
      (await (
        await fetch(`http://runpod.fake/v2/pods/${ref}`, {
          headers: { Authorization: `Bearer ${RUNPOD_FAKE_KEY}`, "User-Agent": "t" },
        })
      ).json()) as { status: string; runtime: unknown };
    const answer = fake.calls("deploy")[0]!;
    expect(answer.status).toBe(201);
    expect(await read()).toMatchObject({ status: "PROVISIONING", runtime: null });
    expect((await runpod().status(ref)).state).toBe("booting");
    vi.setSystemTime(T0 + 40_000);
    expect(await read()).toMatchObject({ status: "STARTING", runtime: null });
    expect((await runpod().status(ref)).state).toBe("booting");
    vi.setSystemTime(T0 + 61_000);
    expect(await read()).toMatchObject({ status: "RUNNING", runtime: { uptime: expect.any(Number) } });
    expect((await runpod().status(ref)).state).toBe("running");
  });
});

describe("community hosts without a public IP (docs/providers.md#runpod-rest-public-ip)", () => {
  const custom = (ports: number[]) =>
    spec({ template: "custom", image: "ghcr.io/acme/job:1", cmd: "sleep infinity", ports });
  const community = () => runpodOffer("runpod:COMMUNITY:NVIDIA GeForce RTX 4090");

  it("the fake's community pod runs with ssh.direct null: no public port, ever", async () => {
    const rented = await runpod().rent(community(), custom([]));
    const ref = rented.ok ? rented.ref : "";
    const status = await runpod().status(ref);
    expect(status.state).toBe("running");
    expect(status.access?.ssh).toBeNull();
  });

  it("a lease that asks for ssh (port 22) handed a COMMUNITY offer is refused before any create", async () => {
    const result = await runpod().rent(community(), custom([22, 8080]));
    expect(result).toMatchObject({ ok: false, kind: "rejected" });
    expect(!result.ok && result.error).toContain("SECURE only");
    expect(fake.calls("deploy")).toHaveLength(0);
    expect(fake.model.list()).toHaveLength(0);
  });

  it("on SECURE the same lease rents and gets its ssh endpoint", async () => {
    const result = await runpod().rent(runpodOffer("runpod:SECURE:NVIDIA GeForce RTX 4090"), custom([22, 8080]));
    const ref = result.ok ? result.ref : "";
    expect((await runpod().status(ref)).access?.ssh).toEqual({ host: "213.173.104.74", port: expect.any(Number) });
  });
});
