import { execFile, spawn } from "node:child_process";
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

async function ok(args: string[]): Promise<Run> {
  const run = await gpulease(args);
  if (run.code !== 0) throw new Error(`gpulease ${args.join(" ")} exited ${run.code}: ${run.stderr}`);
  return run;
}

beforeAll(async () => {
  await fetch(`${base}/v1/sim/config`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${adminToken}`, "Content-Type": "application/json" },
    // Ollama answers a few seconds after the machine runs, so each phase is seen by a 1 s poll.
    body: JSON.stringify({ boot_seconds: 2, ready_seconds: 4, linger_seconds: 1 }),
  });
});

describe("gpulease", () => {
  test("npx gpulease resolves the package's bin", async () => {
    const { stdout } = await promisify(execFile)("npx", ["--no-install", "gpulease", "--help"], { cwd: root });
    expect(stdout).toMatch(/Usage: gpulease/);
    expect(stdout).toMatch(/rent/);
  });

  test("offers: an aligned table, and the API's JSON with --json", async () => {
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

  test("rent --follow shows booting → waiting for Ollama → running, then the access URLs; ls, show, events, stop", async () => {
    const rent = await ok(["rent", "--provider", "sim", "--gpu", "4090", "--max-minutes", "2", "--follow"]);
    expect(rent.stderr).toMatch(/booting · \d+:\d\d · [\d.]+ USD so far/);
    expect(rent.stderr).toMatch(/waiting for Ollama/);
    expect(rent.stderr).toMatch(/running · \d+:\d\d to start/);
    const url = rent.stdout.trim().split("\n")[0] as string;
    // The sim serves each machine's Ollama through the worker.
    expect(url).toMatch(/\/sim\/ollama\/sim-[0-9a-f]+$/);
    expect(rent.stdout).toContain(`openai: ${url}/v1`);

    const ls = JSON.parse((await ok(["ls", "--json"])).stdout) as {
      leases: { id: string; access: { urls: string[] } }[];
    };
    const lease = ls.leases.find((l) => l.access?.urls.includes(url));
    expect(lease).toBeDefined();
    const id = (lease as { id: string }).id;
    expect((await ok(["ls"])).stdout).toMatch(new RegExp(`${id}\\s.*running`));
    expect((await ok(["show", id])).stdout).toMatch(/status\s+running/);
    expect(JSON.parse((await ok(["show", id, "--json"])).stdout)).toMatchObject({ id, status: "running" });
    expect((await ok(["events", id])).stdout).toMatch(/running/);

    const follow = gpulease(["events", id, "--follow", "--json"]);
    expect((await ok(["stop", id])).stdout).toMatch(/is stopping/);
    const streamed = await follow;
    expect(streamed.code).toBe(0);
    const kinds = streamed.stdout
      .trim()
      .split("\n")
      .map((line) => (JSON.parse(line) as { kind: string }).kind);
    expect(kinds).toContain("running");
    expect(kinds).toContain("stop_requested");
    expect(kinds[kinds.length - 1]).toBe("stopped");
    expect(JSON.parse((await ok(["stop", id, "--json"])).stdout)).toEqual({ ok: true, already: true });
    expect((await ok(["ls", "--all"])).stdout).toMatch(new RegExp(`${id}\\s.*stopped`));
  }, 120_000);

  test("schedules add, ls, run, rm and account", async () => {
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
  });

  test("stop-all needs --yes (exit 2), then stops everything", async () => {
    const refused = await gpulease(["stop-all"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/--yes/);
    expect(JSON.parse((await ok(["stop-all", "--yes", "--json"])).stdout)).toMatchObject({ ok: true });
  });

  test("exit codes: 1 with the API's code and sentence on one line, 2 for usage errors", async () => {
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
});
