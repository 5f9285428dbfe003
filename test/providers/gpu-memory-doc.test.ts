import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { GPU_SPECS } from "../../src/providers/gpus";

/**
 * docs/models.md#gpu-memory gives the source of every `memory_mib` in the GPU table. A figure
 * changed on one side only, or a card added without a row, fails here.
 */
const doc = readFileSync(join(__dirname, "..", "..", "docs", "models.md"), "utf8");

/** The table's rows: the card cell and the MiB cell, split where a row holds several cards. */
function memoryRows(): { card: string; mib: number[] }[] {
  const section = doc.slice(doc.indexOf("## GPU memory"));
  const table = section.slice(section.indexOf("| card"), section.indexOf("\n\n", section.indexOf("| card")));
  return table
    .split("\n")
    .slice(2)
    .map((line) => line.split("|").map((cell) => cell.trim()))
    .map(([, card, mib]) => ({ card: card!, mib: mib!.split(", ").map((n) => Number(n.replaceAll(",", ""))) }));
}

/** Which spec keys each row of the doc stands for, in the order of its MiB figures. */
const ROW_KEYS: Record<string, string[]> = {
  "L40S, L40": ["l40s", "l40"],
  A40: ["a40"],
  L4: ["l4"],
  A10: ["a10"],
  T4: ["t4"],
  "RTX 4090": ["rtx-4090"],
  "RTX 3090": ["rtx-3090"],
  "RTX 3090 Ti, RTX A5000": ["rtx-3090-ti", "rtx-a5000"],
  "RTX 5090": ["rtx-5090"],
  "RTX A6000": ["rtx-a6000"],
  "RTX 6000 Ada": ["rtx-6000-ada"],
  "H100 SXM, H100 PCIe": ["h100-sxm", "h100-pcie"],
  "A100 80GB (SXM, PCIe)": ["a100-sxm-80gb", "a100-pcie-80gb"],
  "A100 PCIe 40GB": ["a100-pcie-40gb"],
  "H100 NVL": ["h100-nvl"],
  "H200 (SXM, NVL)": ["h200", "h200-nvl"],
  B200: ["B200"],
  MI300X: ["mi300x"],
  "RTX PRO 6000 Blackwell": ["rtx-pro-6000"],
  "RTX PRO 5000, 4500, 4000": ["rtx-pro-5000", "rtx-pro-4500", "rtx-pro-4000"],
  "RTX 5080": ["rtx-5080"],
  "RTX 4080 SUPER": ["rtx-4080-super"],
  "RTX 4080": ["rtx-4080"],
  "RTX A4000": ["rtx-a4000"],
  "RTX 2000 Ada": ["rtx-2000-ada"],
  "RTX A4500": ["rtx-a4500"],
  "RTX 4000 Ada": ["rtx-4000-ada"],
  A30: ["a30"],
  "RTX 3080": ["rtx-3080"],
  "RTX 3080 Ti": ["rtx-3080-ti"],
  "V100 16GB": ["v100"],
  "V100 32GB": ["v100-32gb"],
};

describe("docs/models.md#gpu-memory and the GPU table", () => {
  const rows = memoryRows();
  const specs = new Map(GPU_SPECS.map((s) => [s.key, s]));

  it("every row names known cards and gives each one the table's figure", () => {
    expect(rows.length).toBeGreaterThan(20);
    for (const { card, mib } of rows) {
      const keys = ROW_KEYS[card];
      expect(keys, `a row the test does not know: ${card}`).toBeDefined();
      // one figure for the row, or one per card
      const figures = mib.length === 1 ? keys!.map(() => mib[0]) : mib;
      expect(figures, card).toEqual(keys!.map((key) => specs.get(key)?.memory_mib));
    }
  });

  it("every card of the table has a row", () => {
    const documented = new Set(rows.flatMap(({ card }) => ROW_KEYS[card] ?? []));
    expect(GPU_SPECS.map((s) => s.key).filter((key) => !documented.has(key))).toEqual([]);
  });
});
