// Reaper cost at scale: provider calls and D1 round trips per reaper run with 10, 100 and 1,000 lease rows.
// The counting happens in workerd (test/reaper/scale.test.ts counts every request at the fakes,
// every D1 statement and batch, and every keeper call); this prints its figures.
//   node bench/reaper-scale.mjs
import { runVitest } from "./lib/vitest-run.mjs";

const { status, out } = runVitest(["test/reaper/scale.test.ts"]);
const figures = out.split("\n").filter((line) => line.startsWith('{"rows"'));
if (status !== 0 || figures.length === 0) {
  console.error(out);
  process.exit(1);
}
console.log("reaper run by lease rows in the ledger (3 providers, 2 orphans planted per run):");
for (const line of figures) {
  const f = JSON.parse(line);
  console.log(
    `  ${String(f.rows).padStart(5)} rows: ${f.providerCalls} provider calls, ${f.d1Trips} D1 round trips, ${f.keeperCalls} keeper calls -> ${f.subrequests} subrequests (free plan: 50)`,
  );
}
