// Keeper churn: 50 leases against the RunPod fake (a few at a time), each keeper alarm with one D1
// write in 50 failing, strays of their labels that ignore terminates and are claimed at random
// moments (between alarms, or inside one at a random await), a hostile machine's usage answers,
// stops at random; then the keepers' alarms and the reaper to the end. The scenario runs in
// workerd (test/keeper/churn.test.ts); this prints its figures and checks the goals:
// machines alive at the end = 0, ledger cost ÷ billed within 1 %, provider calls per alarm.
//   node bench/keeper-churn.mjs [leases=50]
import { runVitest } from "./lib/vitest-run.mjs";

process.env.CHURN_LEASES = String(Number(process.argv[2] ?? 50));
const { status, out } = runVitest(["test/keeper/churn.test.ts"]);
const line = out.split("\n").find((l) => l.startsWith("CHURN "));
if (!line) {
  console.error(out);
  console.error("keeper-churn: measured nothing");
  process.exit(1);
}
const f = JSON.parse(line.slice("CHURN ".length));
console.log(`keeper churn, ${f.leases} leases (${f.claims} strays claimed, ${f.d1Failures} D1 writes failed):`);
console.log(`  machines alive at the end: ${f.alive} (goal 0)`);
console.log(`  ledger cost ÷ billed: ${f.ledger} / ${f.billed} = ${f.ratio} (goal within 1 %)`);
console.log(`  provider calls per alarm: max ${f.callsMax}, median ${f.callsMedian} over ${f.alarms} alarms`);
const failed = [];
if (f.alarms === 0) failed.push("no alarm ran");
if (f.alive !== 0) failed.push(`${f.alive} machine(s) alive`);
if (!(Math.abs(f.ratio - 1) <= 0.01)) failed.push(`ledger ÷ billed ${f.ratio}`);
if (status !== 0) failed.push("the churn test failed");
if (failed.length) {
  console.error(out);
  console.error(`keeper-churn: ${failed.join("; ")}`);
  process.exit(1);
}
