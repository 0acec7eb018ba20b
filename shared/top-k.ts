/**
 * The global top-k per query over every task's candidates, ordered by (distance, row id) as
 * Lance orders its own results. Pure.
 * @module
 */
import type { QueryCandidates } from "./codec.js";

export interface Hit {
  readonly queryId: number;
  readonly distance: number;
  readonly rowId: bigint;
}

/**
 * `tasks[t][q]` holds task t's candidates for query q of the range. Keeps ranks offset+1 ..
 * offset+k of each query; query ids start at `queryOffset`. Sorted by query, distance, row id.
 */
export function mergeCandidates(
  tasks: readonly (readonly QueryCandidates[])[],
  range: {
    readonly k: number;
    readonly offset: number;
    readonly queryOffset: number;
    readonly queryCount: number;
  },
): Hit[] {
  const { k, offset, queryOffset, queryCount } = range;
  const hits: Hit[] = [];
  for (let queryId = 0; queryId < queryCount; queryId++) {
    const pool: Hit[] = [];
    for (const task of tasks) {
      const list = task[queryId];
      if (!list) throw new TypeError(`A task returned no candidate list for query ${queryId}`);
      list.rowIds.forEach((rowId, i) => {
        pool.push({
          queryId: queryOffset + queryId,
          distance: list.distances[i] ?? Number.NaN,
          rowId,
        });
      });
    }
    hits.push(...pool.sort(compareHits).slice(offset, offset + k));
  }
  return hits;
}

export function compareHits(a: Hit, b: Hit): number {
  return a.distance - b.distance || (a.rowId < b.rowId ? -1 : a.rowId > b.rowId ? 1 : 0);
}
