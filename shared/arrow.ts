/**
 * Results as an Arrow table / IPC stream: `_query_id` int32, `_distance` float32, `_rowid`
 * uint64 (exact, unlike JSON), then the `select` columns.
 * @module
 */
import {
  Float32,
  Int32,
  makeVector,
  Table,
  tableToIPC,
  Uint64,
  type Vector,
  vectorFromArray,
} from "apache-arrow";
import type { ResultRow } from "./tasks.js";

/** The media type of an Arrow IPC stream, for `Accept` and `Content-Type`. */
export const ARROW_STREAM = "application/vnd.apache.arrow.stream";

/** The rows of a search response as an Arrow table. */
export function resultsToArrow(
  results: readonly ResultRow[],
  select: readonly string[] = [],
): Table {
  const columns: Record<string, Vector> = {
    _query_id: vectorFromArray(
      results.map((r) => r._query_id),
      new Int32(),
    ),
    _distance: vectorFromArray(
      results.map((r) => r._distance),
      new Float32(),
    ),
    _rowid: makeVector({
      type: new Uint64(),
      data: BigUint64Array.from(results, (r) => BigInt(r._rowid)),
    }),
  };
  for (const column of select) {
    // JSON values back to Arrow by inference: numbers, strings, booleans, lists.
    columns[column] = vectorFromArray(results.map((r) => r[column] ?? null));
  }
  return new Table(columns);
}

/** An Arrow IPC stream of the results. */
export function resultsToIpc(
  results: readonly ResultRow[],
  select: readonly string[] = [],
): Uint8Array {
  return tableToIPC(resultsToArrow(results, select), "stream");
}
