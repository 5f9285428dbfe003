/** One cell of the fault matrix. */
export interface Cell {
  state: "held" | "not held" | "n/a";
  /** what went wrong, or what was observed on the way */
  note: string;
}

/**
 * The matrix as a Markdown table (rows: faults; columns: provider/call), followed by the notes
 * of every cell that has one, so the whole thing can be pasted into a report.
 */
export function formatMatrix<C extends { provider: string; call: string }>(
  rows: readonly string[],
  columns: readonly C[],
  cell: (row: string, column: C) => Cell,
): string {
  const header = `| fault | ${columns.map((c) => `${c.provider} ${c.call}`).join(" | ")} |`;
  const rule = `|---|${columns.map(() => "---").join("|")}|`;
  const notes: string[] = [];
  const lines = rows.map((row) => {
    const cells = columns.map((column) => {
      const { state, note } = cell(row, column);
      if (note) notes.push(`- ${column.provider} ${column.call} × ${row} (${state}): ${note}`);
      return state === "not held" ? "**NOT HELD**" : state;
    });
    return `| ${row} | ${cells.join(" | ")} |`;
  });
  const counts = { held: 0, "not held": 0, "n/a": 0 };
  for (const row of rows) for (const column of columns) counts[cell(row, column).state] += 1;
  const summary = `held ${counts.held}, not held ${counts["not held"]}, n/a ${counts["n/a"]}`;
  return [header, rule, ...lines, "", summary, ...(notes.length ? ["", "Notes:", ...notes] : [])].join("\n");
}
