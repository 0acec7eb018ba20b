/**
 * How the command prints rows: `table` (aligned plain columns, no boxes or quotes, so it reads
 * on a terminal and pipes as lines), `csv`, or `json` (the whole answer).
 * @module
 */

export const FORMATS = ["table", "csv", "json"] as const;
export type Format = (typeof FORMATS)[number];

type Row = Readonly<Record<string, unknown>>;

/** `rows` as lines: a header of their columns, then one line per row. */
export function formatRows(rows: readonly Row[], format: Exclude<Format, "json">): string {
  const columns = [...new Set(rows.flatMap((row) => Object.keys(row)))];
  const cells = rows.map((row) => columns.map((column) => text(row[column])));
  if (format === "csv") {
    return [columns, ...cells].map((line) => line.map(csvField).join(",")).join("\n");
  }
  const widths = columns.map((column, i) =>
    Math.max(column.length, ...cells.map((line) => (line[i] as string).length)),
  );
  return [columns, ...cells]
    .map((line) =>
      line
        .map((cell, i) => cell.padEnd(widths[i] as number))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

function text(value: unknown): string {
  if (value === null || value === undefined) return "";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

function csvField(value: string): string {
  return /[",\n\r]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value;
}
