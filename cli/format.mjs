// @ts-check
// Terminal output: aligned tables, money and durations. Colour comes from picocolors, which
// turns itself off when stdout is not a terminal or NO_COLOR is set.
import pc from "picocolors";

/**
 * An aligned table: one header row, then the rows; numbers are right-aligned.
 * @param {string[]} header @param {(string | number | null | undefined)[][]} rows
 */
export function table(header, rows) {
  const cells = rows.map((row) => row.map((cell) => (cell === null || cell === undefined ? "-" : String(cell))));
  const widths = header.map((title, i) => Math.max(title.length, ...cells.map((row) => (row[i] ?? "").length)));
  const numeric = header.map(
    (_, i) =>
      rows.some((row) => typeof row[i] === "number") &&
      rows.every((row) => typeof row[i] === "number" || row[i] === null || row[i] === undefined),
  );
  /** @param {string[]} row */
  const line = (row) =>
    row
      .map((cell, i) => (numeric[i] ? cell.padStart(widths[i] ?? 0) : cell.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd();
  return [pc.bold(line(header)), ...cells.map(line)].join("\n");
}

/** @param {number | null | undefined} amount @param {string | null | undefined} currency */
export function money(amount, currency) {
  if (amount === null || amount === undefined) return "-";
  return `${amount.toFixed(amount < 1 ? 4 : 2)} ${currency ?? "USD"}`;
}

/** @param {number} ms */
export function elapsed(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  const m = Math.floor(s / 60);
  return `${m}:${String(s % 60).padStart(2, "0")}`;
}

/** @param {string} status */
export function statusColour(status) {
  if (status === "running") return pc.green(status);
  if (status === "provisioning") return pc.yellow(status);
  if (status === "stopping") return pc.magenta(status);
  return pc.dim(status);
}

export { pc };
