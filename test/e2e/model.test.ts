import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { join } from "node:path";
import OpenAI from "openai";
import { beforeAll, describe, expect, inject, test } from "vitest";
import { type LeaseBase, leaseApi } from "./lease-api";
import { openaiCalls } from "./openai-calls";

/*
 * A model lease as the README shows it: rented with plain HTTP and the admin token, followed on
 * its event stream until `running`, then called with the official `openai` npm client at
 * `access.openai_base_url`. The worker keeps its default rate limits (60 requests a minute), so
 * the lease is followed on one event stream, not by polling.
 */

const root = join(import.meta.dirname, "..", "..");
const bin = join(root, "bin", "gpulease.mjs");
const { baseUrl: base, adminToken } = inject("workers").model;
const registryUrl = inject("modelRegistryUrl");
const MODEL = "llama3.2:1b";

interface Lease extends LeaseBase {
  stop_reason: string | null;
  error: string | null;
  access: { urls: string[]; openai_base_url?: string | null } | null;
  model: {
    name: string;
    digest: string | null;
    weights_gb: number;
    vram_need_gb: number | null;
    context_length: number | null;
    loaded_at: string | null;
  } | null;
}

const lease = leaseApi<Lease>(base, adminToken);
const { api, getLease, eventsUntil, quickModelBoots, rentModel } = lease;

/** Stops the lease, follows it to `stopped` with its teardown verified, and finds no sim machine left. */
async function stopAndVerify(id: string, after: number): Promise<Lease> {
  const stopped = await lease.stopAndVerify(id, after);
  const sim = await api<{ machines: { ref: string; state: string }[] }>("/v1/sim");
  expect(sim.body.machines.filter((m) => m.ref === stopped.provider_ref && m.state !== "gone")).toEqual([]);
  return stopped;
}

/** The registry's digest of the model: sha256 of its manifest's bytes, as Ollama computes it. */
async function registryDigest(): Promise<string> {
  const res = await fetch(`${registryUrl}/v2/library/llama3.2/manifests/1b`, {
    headers: { Accept: "application/vnd.docker.distribution.manifest.v2+json" },
  });
  expect(res.status).toBe(200);
  return `sha256:${createHash("sha256")
    .update(Buffer.from(await res.arrayBuffer()))
    .digest("hex")}`;
}

/** Follows the rented lease to running, chats with it through the openai client, stops it. */
async function chatThenStop(id: string, digest: string): Promise<boolean> {
  const events = await eventsUntil(id, "running");
  const kinds = events.map((e) => e.kind);
  expect(kinds.at(-1), JSON.stringify(events)).toBe("running");
  expect(kinds).toContain("pulling");
  expect(kinds.indexOf("pulling")).toBeLessThan(kinds.indexOf("running"));
  expect(events.find((e) => e.kind === "pulling" && /of 1\.3 GB/.test(e.detail ?? ""))).toBeDefined();

  const lease = await getLease(id);
  expect(lease.status).toBe("running");
  expect(lease.model).toMatchObject({ name: MODEL, digest, loaded_at: expect.any(String) });
  const baseURL = lease.access?.openai_base_url as string;
  expect(baseURL).toBe(`${base}/sim/ollama/${lease.provider_ref}/v1`);

  // What the README shows.
  await openaiCalls(new OpenAI({ baseURL, apiKey: "unused" }), MODEL);

  await stopAndVerify(id, events.at(-1)?.seq ?? 0);
  // The endpoint went with the machine.
  const gone = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
  await expect(gone.models.list()).rejects.toThrow();
  return true;
}

beforeAll(() => quickModelBoots());

describe("a model lease", () => {
  test("rent llama3.2:1b, follow it to running, chat with the openai client, stop it", async () => {
    const rented = await rentModel(MODEL);
    const digest = await registryDigest();
    // Sized from the registry's manifest before anything answers on the machine.
    expect(rented.model).toEqual({
      name: MODEL,
      digest,
      weights_gb: 1.32, // 1,321,082,688 bytes, to two decimals
      vram_need_gb: expect.any(Number),
      context_length: 4096,
      loaded_at: null,
    });
    const id = rented.id;
    let verified = false;
    try {
      verified = await chatThenStop(id, digest);
    } finally {
      // A failed expectation above must not leave the machine to max_minutes.
      if (!verified) await api(`/v1/leases/${id}/stop`, { method: "POST" });
    }
  }, 150_000);

  test("gpulease rent --model … --follow prints the OpenAI base URL", async () => {
    // A faster download here: the CLI polls its lease twice a second, against the same 60/min.
    const config = await api("/v1/sim/config", { method: "PUT", body: JSON.stringify({ download_mbs: 1000 }) });
    expect(config.status).toBe(200);
    const run = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(
        process.execPath,
        [bin, "rent", "--model", MODEL, "--provider", "sim", "--max-minutes", "5", "--follow"],
        { cwd: root, env: { ...process.env, GPULEASE_URL: base, GPULEASE_TOKEN: adminToken, NO_COLOR: "1" } },
      );
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d) => (stdout += d));
      child.stderr.on("data", (d) => (stderr += d));
      child.on("close", (code) => resolve({ code: code ?? -1, stdout, stderr }));
    });
    const { body } = await api<{ leases: Lease[] }>("/v1/leases?limit=10");
    const lease = body.leases.find((l) => l.model?.name === MODEL && l.status !== "stopped");
    expect(lease, `${run.stderr}\n${run.stdout}`).toBeDefined();
    const id = (lease as Lease).id;
    try {
      expect(run.code, run.stderr).toBe(0);
      expect(run.stderr).toMatch(/running · \d+:\d\d to start/);
      const running = await getLease(id);
      expect(running.access?.openai_base_url).toBe(`${base}/sim/ollama/${running.provider_ref}/v1`);
      expect(run.stdout).toContain(running.access?.openai_base_url);
    } finally {
      await stopAndVerify(id, 0);
    }
  }, 150_000);
});
