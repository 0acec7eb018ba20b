/**
 * The result rows of a search: the winning hits with the `select` columns read from the pinned
 * version (late materialisation), as JSON-safe values.
 * @module
 */
import { FanoutError } from "./errors.js";
import type { Table } from "./lance/connect.js";
import { takeRows } from "./lance/tables.js";
import type { ResultRow } from "./tasks.js";
import type { Hit } from "./top-k.js";

/** Result rows for the hits, with the `select` columns read from `table` (the pinned version). */
export async function resultRows(
  hits: readonly Hit[],
  select: readonly string[] | undefined,
  table: Table | undefined,
): Promise<ResultRow[]> {
  const base = hits.map((h) => ({
    _query_id: h.queryId,
    _distance: h.distance,
    _rowid: h.rowId.toString(),
  }));
  if (!select?.length || !table || hits.length === 0) return base;
  const ids = [...new Set(hits.map((h) => h.rowId))];
  const rows = (await takeRows(table, ids, select)).toArray();
  // Rows come in Lance's order: key them by row id.
  const byId = new Map(rows.map((row) => [BigInt(row._rowid), row as Record<string, unknown>]));
  return base.map((row, i) => {
    const values = byId.get(hits[i]?.rowId ?? -1n);
    if (!values)
      throw new FanoutError("INTERNAL", `row ${row._rowid} vanished from the pinned version`);
    return Object.fromEntries([
      ...Object.entries(row),
      ...select.map((col) => [col, toJsonValue(values?.[col])]),
    ]) as ResultRow;
  });
}

/** Arrow values as JSON-safe values: 64-bit integers as decimal strings, vectors as arrays. */
export function toJsonValue(value: unknown): unknown {
  if (typeof value === "bigint") return value.toString();
  if (value === null || value === undefined) return null;
  if (value instanceof Date) return value.toISOString();
  if (ArrayBuffer.isView(value) && !(value instanceof DataView)) {
    return Array.from(value as unknown as ArrayLike<number | bigint>, toJsonValue);
  }
  if (typeof value === "object") {
    const iterable = value as { toArray?: () => unknown; toJSON?: () => unknown };
    if (typeof iterable.toArray === "function") return toJsonValue(iterable.toArray());
    if (Array.isArray(value)) return value.map(toJsonValue);
    const plain = typeof iterable.toJSON === "function" ? iterable.toJSON() : value;
    return Object.fromEntries(
      Object.entries(plain as Record<string, unknown>).map(([k, v]) => [k, toJsonValue(v)]),
    );
  }
  return value;
}
