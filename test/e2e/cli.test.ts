import { execFile, spawn } from "node:child_process";
import { createServer, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { promisify } from "node:util";
import { beforeAll, describe, expect, inject, test } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const bin = join(root, "bin", "gpulease.mjs");
const { baseUrl: base, adminToken } = inject("workers").cli;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the command as a user would (node bin/gpulease.mjs, what `npx gpulease` starts). */
function gpulease(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bin, ...args], {
      cwd: root,
      env: { ...process.env, GPULEASE_URL: base, GPULEASE_TOKEN: adminToken, NO_COLOR: "1", ...env },
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("close", (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

async function ok(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const run = await gpulease(args, env);
  if (run.code !== 0) throw new Error(`gpulease ${args.join(" ")} exited ${run.code}: ${run.stderr}`);
  return run;
}

/**
 * The sim's boot in this suite: a real provider's takes minutes, and the CLI must live through it.
 * Longer than the API's rate window (a minute): the follow spans a whole window at the default
 * limits, meets a 429 inside it, and its request count does not grow with the boot (one event
 * stream, read again only on a status change), so a longer boot would prove nothing more.
 */
const BOOT_SECONDS = 75;

async function simConfig(config: Record<string, number>): Promise<void> {
  const res = await fetch(`${base}/v1/sim/config`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${adminToken}`, "Content-Type": "application/json" },
    body: JSON.stringify(config),
  });
  expect(res.status).toBe(200);
}

/**
 * A pass-through proxy in front of the worker that notes when each request of the CLI's arrived
 * (event streams pass through as they come), so the suite can count them per minute.
 */
async function countingProxy(): Promise<{ url: string; requests: { at: number; path: string }[]; close(): void }> {
  const requests: { at: number; path: string }[] = [];
  const target = new URL(base);
  const server = createServer((req, res) => {
    requests.push({ at: Date.now(), path: `${req.method} ${req.url}` });
    const upstream = httpRequest(
      { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
    res.on("close", () => upstream.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, requests, close: () => server.close() };
}

/** The most requests in any 60 s window. */
function busiestMinute(times: number[]): number {
  return Math.max(0, ...times.map((start) => times.filter((t) => t >= start && t < start + 60_000).length));
}

/**
 * The follow's own token (read, rent, stop): it spends its minute's budget while the other
 * commands run beside it on the admin's, as two people would.
 */
let follower: Record<string, string>;

beforeAll(async () => {
  // Ollama answers a few seconds after the machine runs.
  await simConfig({ boot_seconds: BOOT_SECONDS, ready_seconds: 4, linger_seconds: 1 });
  const res = await fetch(`${base}/v1/tokens`, {
    method: "POST",
    headers: { Authorization: `Bearer ${adminToken}`, "Content-Type": "application/json" },
    body: JSON.stringify({ name: "cli-follow", scopes: ["read", "rent", "stop"] }),
  });
  expect(res.status).toBe(201);
  follower = { GPULEASE_TOKEN: ((await res.json()) as { token: string }).token };
});

/** A test that runs beside the follow shares the machine with it: slower, so a longer timeout. */
const BESIDE_FOLLOW_MS = 180_000;

/**
 * The commands run beside the long follow (`test.concurrent`): the suite waits on the sim's boot
 * once, not once per command. stop-all, which would stop the follow's lease, runs after them.
 */
describe("gpulease", () => {
  test.concurrent("npx gpulease resolves the package's bin", { timeout: BESIDE_FOLLOW_MS }, async ({ expect }) => {
    const { stdout } = await promisify(execFile)("npx", ["--no-install", "gpulease", "--help"], { cwd: root });
    expect(stdout).toMatch(/Usage: gpulease/);
    expect(stdout).toMatch(/rent/);
  });

  test.concurrent("offers: an aligned table, and the API's JSON with --json", { timeout: BESIDE_FOLLOW_MS }, async ({
    expect,
  }) => {
    const table = await ok(["offers", "--gpu", "4090", "--provider", "sim"]);
    const lines = table.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^OFFER\s+GPU\s+VRAM_GB\s+PER_HOUR/);
    expect(lines.length).toBeGreaterThan(1);
    // Aligned: every row puts PROVIDER at the same column as the header.
    const column = (lines[0] as string).indexOf("PROVIDER");
    for (const line of lines.slice(1)) expect(line.slice(column, column + 3)).toBe("sim");
    const json = JSON.parse((await ok(["offers", "--gpu", "4090", "--provider", "sim", "--json"])).stdout);
    expect(json.offers[0]).toMatchObject({ provider: "sim", gpu: expect.stringContaining("4090") });
  });

  test.concurrent("rent --follow lives through a boot longer than the rate window at the default limits, waits out a 429, then ls, show, events, stop", async ({
    expect,
  }) => {
    const proxy = await countingProxy();
    const started = Date.now();
    const renting = gpulease(["rent", "--provider", "sim", "--gpu", "4090", "--max-minutes", "5", "--follow"], {
      ...follower,
      GPULEASE_URL: proxy.url,
    });
    // Meanwhile the same token spends its minute's 60 requests elsewhere: the CLI meets 429s.
    await new Promise((resolve) => setTimeout(resolve, 20_000));
    const spent = [];
    for (let i = 0; i < 120; i++) {
      const res = await fetch(`${base}/v1/offers?provider=sim`, {
        headers: { Authorization: `Bearer ${follower.GPULEASE_TOKEN}` },
      });
      spent.push(res.status);
      await res.body?.cancel();
      if (res.status === 429) break;
    }
    console.log(`the token's own requests: ${spent.filter((c) => c === 200).length} admitted before the first 429`);
    expect(spent).toContain(429);
    const waited = await gpulease(["ls", "--json"], follower);
    expect(waited.code).toBe(0);
    expect(waited.stderr).toMatch(/rate limited by the worker: waiting \d+ s \(Retry-After\), then going on/);
    expect(JSON.parse(waited.stdout)).toHaveProperty("leases");

    const rent = await renting;
    proxy.close();
    if (rent.code !== 0) throw new Error(`rent --follow exited ${rent.code}: ${rent.stderr}`);
    const minutes = (Date.now() - started) / 60_000;
    const times = proxy.requests.map((r) => r.at);
    const busiest = busiestMinute(times);
    console.log(
      `rent --follow over a ${BOOT_SECONDS} s sim boot: ${times.length} requests in ${minutes.toFixed(1)} min, ` +
        `at most ${busiest} in any minute (${proxy.requests.map((r) => r.path.split("?")[0]).join(", ")})`,
    );
    expect(minutes).toBeGreaterThan(BOOT_SECONDS / 60);
    expect(busiest).toBeLessThanOrEqual(10);
    expect(rent.stderr).toMatch(/booting · \d+:\d\d · [\d.]+ USD so far/);
    expect(rent.stderr).toMatch(/waiting for Ollama/);
    expect(rent.stderr).toMatch(/running · \d+:\d\d to start/);
    const url = rent.stdout.trim().split("\n")[0] as string;
    // The sim serves each machine's Ollama through the worker.
    expect(url).toMatch(/\/sim\/ollama\/sim-[0-9a-f]+$/);
    expect(rent.stdout).toContain(`openai: ${url}/v1`);

    const ls = JSON.parse((await ok(["ls", "--json"], follower)).stdout) as {
      leases: { id: string; access: { urls: string[] } }[];
    };
    const lease = ls.leases.find((l) => l.access?.urls.includes(url));
    expect(lease).toBeDefined();
    const id = (lease as { id: string }).id;
    expect((await ok(["ls"], follower)).stdout).toMatch(new RegExp(`${id}\\s.*running`));
    expect((await ok(["show", id], follower)).stdout).toMatch(/status\s+running/);
    expect(JSON.parse((await ok(["show", id, "--json"], follower)).stdout)).toMatchObject({ id, status: "running" });
    expect((await ok(["events", id], follower)).stdout).toMatch(/running/);

    const follow = gpulease(["events", id, "--follow", "--json"], follower);
    expect((await ok(["stop", id], follower)).stdout).toMatch(/is stopping/);
    const streamed = await follow;
    expect(streamed.code).toBe(0);
    const kinds = streamed.stdout
      .trim()
      .split("\n")
      .map((line) => (JSON.parse(line) as { kind: string }).kind);
    expect(kinds).toContain("running");
    expect(kinds).toContain("stop_requested");
    expect(kinds[kinds.length - 1]).toBe("stopped");
    expect(JSON.parse((await ok(["stop", id, "--json"], follower)).stdout)).toEqual({ ok: true, already: true });
    const all = (await ok(["ls", "--all"], follower)).stdout;
    expect(all.split("\n")[0]).toMatch(/\sENDED$/);
    expect(all).toMatch(new RegExp(`${id}\\s.*stopped\\s.*requested · verified`));
  }, 360_000);

  test.concurrent("schedules add, ls, run, rm and account", { timeout: BESIDE_FOLLOW_MS }, async ({ expect }) => {
    const added = JSON.parse(
      (
        await ok([
          "schedules",
          "add",
          "--name",
          "cli-nightly",
          "--cron",
          "0 2 * * *",
          "--provider",
          "sim",
          "--gpu",
          "4090",
          "--max-minutes",
          "1",
          "--json",
        ])
      ).stdout,
    ) as { id: string };
    expect((await ok(["schedules", "ls"])).stdout).toMatch(new RegExp(`${added.id}\\s+cli-nightly\\s+0 2 \\* \\* \\*`));
    const started = JSON.parse((await ok(["schedules", "run", added.id, "--json"])).stdout) as { id: string };
    expect(started.id).toMatch(/^lse_/);
    await ok(["stop", started.id]);
    expect((await ok(["schedules", "rm", added.id])).stdout).toMatch(/deleted/);
    expect((await ok(["account"])).stdout).toMatch(/^PROVIDER\s+CONFIGURED/);
    expect(JSON.parse((await ok(["account", "--json"])).stdout)).toHaveProperty("spend");
    // Spend per day: 30 rows, oldest first, today's the last with what this suite spent.
    const days = (await ok(["account", "--days", "30"])).stdout.trim().split("\n");
    expect(days[0]).toMatch(/^DAY\s+SIM\s+TOTAL\s+BILLED/);
    const rows = days.filter((line) => /^\d{4}-\d\d-\d\d\s/.test(line));
    expect(rows).toHaveLength(30);
    expect(rows.at(-1)?.startsWith(new Date().toISOString().slice(0, 10))).toBe(true);
    expect(days.at(-1)).toMatch(/^30 days: [\d.]+ USD \(no daily budget\)$/);
    const spend = JSON.parse((await ok(["account", "--days", "7", "--json"])).stdout) as { days: unknown[] };
    expect(spend.days).toHaveLength(7);
    expect((await gpulease(["account", "--days", "0"])).code).toBe(2);
    const tooMany = await gpulease(["account", "--days", "400"]);
    expect(tooMany.code).toBe(1);
    expect(tooMany.stderr).toMatch(/^error: invalid_request: /);
  });

  test.concurrent("endpoint create, ls, show and rm", { timeout: BESIDE_FOLLOW_MS }, async ({ expect }) => {
    const created = await ok([
      "endpoint",
      "create",
      "cli-ep",
      "--model",
      "llama3.2:1b",
      "--provider",
      "sim",
      "--idle",
      "5",
    ]);
    expect(created.stdout).toMatch(/^cli-ep idle {2}base URL http:\/\/.+\/llm\/v1$/m);
    expect(created.stdout).toMatch(/^key \(shown once\): gle_\S+$/m);
    const ls = (await ok(["endpoint", "ls"])).stdout.trim().split("\n");
    expect(ls[0]).toMatch(/^NAME\s+MODEL\s+STATE\s+RUNNING\s+REPLICAS\s+IDLE_MIN\s+TODAY$/);
    expect(ls.find((line) => line.startsWith("cli-ep"))).toMatch(/^cli-ep\s+llama3\.2:1b\s+idle\s+0\s+0-2\s+5\s/);
    expect((await ok(["endpoint", "show", "cli-ep"])).stdout).toMatch(/^cli-ep {2}llama3\.2:1b {2}idle {2}http/);
    const shown = JSON.parse((await ok(["endpoint", "show", "cli-ep", "--json"])).stdout);
    expect(shown).toMatchObject({ name: "cli-ep", min_replicas: 0, idle_minutes: 5, replicas: [] });
    expect(JSON.stringify(shown)).not.toContain("gle_");
    expect((await ok(["endpoint", "rm", "cli-ep"])).stdout).toMatch(/^cli-ep deleted; 0 replica\(s\) stopping$/m);
    const gone = await gpulease(["endpoint", "show", "cli-ep"]);
    expect(gone.code).toBe(1);
    expect(gone.stderr.trim()).toMatch(/^error: not_found: /);
  });

  test.concurrent("exit codes: 1 with the API's code and sentence on one line, 2 for usage errors", {
    timeout: BESIDE_FOLLOW_MS,
  }, async ({ expect }) => {
    const wrongToken = await gpulease(["ls"], { GPULEASE_TOKEN: "gl_not_a_real_token_0000000000" });
    expect(wrongToken.code).toBe(1);
    expect(wrongToken.stderr.trim()).toMatch(/^error: unauthorized: .+$/);
    expect(wrongToken.stdout).toBe("");

    const missing = await gpulease(["show", "lse_00000000000000000000zz"]);
    expect(missing).toMatchObject({ code: 1, stdout: "" });
    expect(missing.stderr.trim()).toMatch(/^error: not_found: /);

    const badInput = await gpulease([
      "rent",
      "--provider",
      "sim",
      "--gpu",
      "4090",
      "--max-minutes",
      "2",
      "--max-cost",
      "0",
    ]);
    expect(badInput.code).toBe(2);

    const refused = await gpulease(["rent", "--template", "custom", "--provider", "sim", "--max-minutes", "1"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr.trim()).toMatch(/^error: invalid_request: .*image/);

    for (const args of [["ls", "--bogus"], ["rent", "--gpu", "4090"], ["frobnicate"], ["show"]]) {
      const run = await gpulease(args);
      expect(run.code, args.join(" ")).toBe(2);
    }
    expect((await gpulease(["ls"], { GPULEASE_TOKEN: "" })).code).toBe(2);
    expect((await gpulease(["--help"])).code).toBe(0);

    const unreachable = await gpulease(["ls"], { GPULEASE_URL: "http://127.0.0.1:9" });
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr.trim()).toMatch(/^error: unreachable: cannot reach http:\/\/127\.0\.0\.1:9/);
  });

  test("stop-all needs --yes (exit 2), then stops everything", async () => {
    const refused = await gpulease(["stop-all"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/--yes/);
    expect(JSON.parse((await ok(["stop-all", "--yes", "--json"])).stdout)).toMatchObject({ ok: true });
  });
});
