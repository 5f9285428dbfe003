// How long the unit run (`vitest run`, every Node and workerd suite) takes, as CI sees
// it: a fresh clone of HEAD, `npm ci`, no vite cache. Prints vitest's own duration and the wall
// time of each run, and the test counts.
//   node bench/unit-run.mjs [runs=3]
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runVitest } from "./lib/vitest-run.mjs";

const runs = Number(process.argv[2] ?? 3);
const clone = mkdtempSync(join(tmpdir(), "gpulease-unit-run-"));
const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim();
execFileSync("git", ["clone", "--quiet", process.cwd(), clone]);
execFileSync("npm", ["ci", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: clone, stdio: "inherit" });

console.log(`unit run at ${head}, fresh clone, ${runs} run(s):`);
const durations = [];
for (let i = 1; i <= runs; i++) {
  rmSync(join(clone, "node_modules/.vite"), { recursive: true, force: true });
  const started = performance.now();
  const { status, out } = runVitest(["--reporter=dot"], { cwd: clone });
  const wall = (performance.now() - started) / 1000;
  const duration = Number(out.match(/Duration\s+([\d.]+)s/)?.[1]);
  const tests = out.match(/Tests\s+(.*)/)?.[1]?.trim();
  if (status !== 0 || Number.isNaN(duration)) {
    console.error(out);
    process.exit(1);
  }
  durations.push(duration);
  console.log(`  run ${i}: vitest ${duration.toFixed(1)} s, wall ${wall.toFixed(1)} s (${tests})`);
}
if (durations.length === 0) throw new Error("measured nothing: zero unit runs");
const sorted = [...durations].sort((a, b) => a - b);
console.log(
  `  vitest: median ${sorted[Math.floor(sorted.length / 2)].toFixed(1)} s, max ${sorted.at(-1).toFixed(1)} s`,
);
rmSync(clone, { recursive: true, force: true });
