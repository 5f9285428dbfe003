import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { expect, inject, test } from "vitest";

// The README's "Try it" block, run as written by bash against a local worker with the simulated
// cloud at its default settings: only the address is the suite's own (localhost:8787 → its port)
// and `open` prints instead of starting a browser. If the README's commands rot, this fails.

const root = join(import.meta.dirname, "..", "..");
const { baseUrl: base, adminToken } = inject("workers").readme;

function tryItBlock(): string {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Try it"));
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1];
  if (!block) throw new Error("README has no Try it block");
  return block;
}

function bash(script: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn("bash", ["-e", "-o", "pipefail", "-c", script], { cwd: root });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("close", (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

test("the README's Try it block runs as written: health, offers, a lease to verified teardown, a schedule, the reaper, stop-all", async () => {
  const block = tryItBlock();
  // The README's admin token is the one `npm start` sets; this worker has its own.
  expect(block).toMatch(/^TOKEN=local-admin-token$/m);
  const host = new URL(base).host;
  const prelude = [
    `curl() { command curl --max-time 300 "\${@//localhost:8787/${host}}"; }`,
    'open() { echo "open $*"; }',
  ].join("\n");
  const script = `${prelude}\n${block.replace(/^TOKEN=local-admin-token$/m, `TOKEN=${adminToken}`)}`;
  const started = Date.now();
  const run = await bash(script);
  const seconds = Math.round((Date.now() - started) / 1000);
  console.log(`README Try it block: exit ${run.code} after ${seconds} s`);
  expect(run.stderr).toBe("");
  expect(run.code).toBe(0);
  const out = run.stdout;
  expect(out).toContain('{"ok":true');
  expect(out).toMatch(/"offers":\[\{/);
  expect(out).toContain("open http://localhost:8787/docs");
  // The lease's live stream ran from booting to a verified stop, and the lease then says so.
  for (const kind of ["booting", "running", "stop_requested", "stopped"]) expect(out).toContain(`"kind":"${kind}"`);
  expect(out).toMatch(/"status":"stopped".*"teardown_verified_at":"20/s);
  // The schedule, the reaper run that found the untracked machine, and the big red button.
  expect(out).toMatch(/"name":"nightly".*"next_run_at"/s);
  expect(out).toContain("gpulease-lse_01jb3k8x0m4q7r2s5t6v9w");
  expect(out).toMatch(/"runs":\[\{/);
  expect(out).toMatch(/\{"ok":true,"leases":\d+,"machines":\d+,"errors":\[\]\}/);
  // No command was refused along the way (a 4xx/5xx answers in the error envelope).
  expect(out).not.toMatch(/"error":"[^"]*","code":"/);
}, 360_000);

test("the README's model listing answers from the sim's own library, as after `npm start` with no network", async () => {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Rent a model"));
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? "";
  const listing = block.split("\n").find((line) => line.includes("/v1/offers?model="));
  if (!listing) throw new Error("README's Rent a model block lists no offers for a model");
  const host = new URL(base).host;
  const script = [
    `curl() { command curl --max-time 60 "\${@//localhost:8787/${host}}"; }`,
    `H="Authorization: Bearer ${adminToken}"`,
    listing,
  ].join("\n");
  const run = await bash(script);
  expect(run.stderr).toBe("");
  expect(run.code).toBe(0);
  // Sized from the library (SIM_MODELS=library, the default): the real registry is not asked.
  const body = JSON.parse(run.stdout) as { offers: { provider: string; fits?: { vram_need_gb: number } }[] };
  expect(body.offers.length).toBeGreaterThan(0);
  for (const offer of body.offers)
    expect(offer).toMatchObject({ provider: "sim", fits: { vram_need_gb: expect.any(Number) } });
}, 60_000);
