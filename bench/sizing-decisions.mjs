// How many (model, context, card) fit decisions the pinned runner's rule changed against the old
// estimate, over every card type in the GPU table, the sizing table's models, and its contexts
// with the steps between them:
//
//   node bench/sizing-decisions.mjs [--cases]
//
// `--cases` also prints every changed case: the old answer, the new one and the oracle's (the
// rule as written step by step from the sources, test/support/runner-oracle.ts). Exits non-zero
// when it decided nothing, or when the rule and the oracle disagree anywhere.
import { importBundled } from "./lib/esbuild-entry.mjs";

const m = await importBundled("sizing-entry.ts", "sizing");

const showCases = process.argv.includes("--cases");
// The table test's four contexts and the steps between them, where the margin decides.
const CONTEXTS = [...new Set([...m.SIZING_CONTEXTS, 2048, 12_288, 16_384, 24_576, 65_536])].sort((a, b) => a - b);
let decided = 0;
let nowFits = 0;
let nowSpills = 0;
let disagreements = 0;
const changed = [];
for (const card of m.GPU_SPECS) {
  for (const model of m.SIZING_MODELS) {
    for (const asked of CONTEXTS) {
      const context = m.contextFor(model, asked);
      // gpulease never read a params num_ctx: it sized the context asked
      const before = m.legacyFits(model, asked, 1, card.vram_gb);
      const after = m.fitOnCards(model, context, 1, card.memory_mib).fits;
      const oracle = m.oracleFitsOneCard(model, asked, card.memory_mib).fits;
      decided++;
      if (after !== oracle) disagreements++;
      if (before === after) continue;
      if (after) nowFits++;
      else nowSpills++;
      changed.push({
        model: model.name,
        context,
        card: card.name,
        before,
        after,
        oracle,
        oldNeed: m.legacyNeedGb(model, asked, 1),
      });
    }
  }
}
if (decided === 0) throw new Error("measured nothing: zero decisions");
const yn = (b) => (b ? "fits" : "spills");
if (showCases) {
  console.log("| model | context | card | old (need GB vs sold GB) | new | rule (oracle) |");
  console.log("|---|---|---|---|---|---|");
  for (const c of changed) {
    console.log(
      `| ${c.model} | ${c.context} | ${c.card} | ${yn(c.before)} (${c.oldNeed}) | ${yn(c.after)} | ${yn(c.oracle)} |`,
    );
  }
}
console.log(
  `cards ${m.GPU_SPECS.length} × models ${m.SIZING_MODELS.length} × contexts ${CONTEXTS.length}: ${decided} decisions, ` +
    `${changed.length} changed (${nowFits} spills -> fits, ${nowSpills} fits -> spills); rule vs oracle disagreements: ${disagreements}`,
);
if (disagreements > 0) process.exit(1);
