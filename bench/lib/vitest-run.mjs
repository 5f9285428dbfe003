// Runs vitest to its end for a bench: its exit status and its output (stdout, then stderr)
// without ANSI colour codes, so figures and summary lines can be read with plain patterns.
import { spawnSync } from "node:child_process";

export function runVitest(args, { cwd } = {}) {
  const run = spawnSync("node_modules/.bin/vitest", ["run", ...args], { cwd, encoding: "utf8" });
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips ANSI colour codes from vitest output
  const out = `${run.stdout}\n${run.stderr}`.replace(/\x1b\[[0-9;]*m/g, "");
  return { status: run.status, out };
}
