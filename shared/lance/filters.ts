/**
 * A filter as Lance reads it. The service's own parser (shared/filter.ts) has checked its
 * grammar and cost; Lance must also read all of it (its parser ignores what follows the first
 * token it cannot use) and find its columns and types, which planning a search checks without
 * reading data.
 * @module
 */
import { LRUCache } from "lru-cache";
import { FanoutError } from "../errors.js";
import type { Table } from "./connect.js";
import { lanceMessage } from "./errors.js";

/** A column no dataset has: Lance names it as unknown only if its parser reached it. */
const END_OF_FILTER = "__lance_fanout_end_of_filter__";

/**
 * Filters found good, by pinned table (one version) and column: a version's schema never
 * changes, so a repeated filter is not planned twice (two plans cost ~1.3 ms of planner CPU).
 */
const checked = new WeakMap<Table, LRUCache<string, true>>();

/**
 * @throws FanoutError `INVALID_REQUEST` where Lance stops before the end of the filter, or
 *   finds a column or type it cannot use.
 */
export async function checkFilterWithLance(
  table: Table,
  column: string,
  dimension: number,
  filter: string,
): Promise<void> {
  const key = `${column}\n${filter}`;
  let known = checked.get(table);
  if (known?.has(key)) return;
  const plan = (where: string) =>
    table.vectorSearch(new Float32Array(dimension)).column(column).where(where).explainPlan();
  const reachedEnd = await plan(`${filter} AND ${END_OF_FILTER} = 1`).then(
    () => false,
    (err: unknown) => lanceMessage(err).includes(END_OF_FILTER),
  );
  const problem = await plan(filter).then(
    () => undefined,
    (err: unknown) => err,
  );
  if (problem !== undefined) {
    throw new FanoutError("INVALID_REQUEST", `filter: ${lanceMessage(problem)}`, {
      cause: problem,
    });
  }
  if (!reachedEnd) {
    throw new FanoutError(
      "INVALID_REQUEST",
      "filter: Lance does not read it to its end (it would apply only a part of it)",
    );
  }
  if (!known) {
    known = new LRUCache<string, true>({ max: 256 });
    checked.set(table, known);
  }
  known.set(key, true);
}
