/**
 * The fan-out search against native lancedb on a real multi-segment dataset.
 */
import { createHash } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { beforeAll, describe, expect, test } from "vitest";
import type { Runtime } from "../shared/runtime.js";
import { type SearchResponse, vectorSearch } from "../shared/search.js";
import {
  type Dataset,
  makeDataset,
  type NativeHit,
  nativeSearch,
  queries,
  testRuntime,
} from "./support/fixtures.js";

let ds: Dataset;
let runtime: Runtime;
const K = 10;
const QUERIES = queries(30);

beforeAll(async () => {
  // Uneven rounds and a delete that touches every fragment.
  ds = await makeDataset({ rounds: [4000, 1500, 6000, 2500], deleteWhere: "id % 9 = 4" });
  runtime = await testRuntime();
});

function rowsOf(response: SearchResponse, queryId: number) {
  return response.results.filter((r) => r._query_id === queryId);
}

function recall(got: readonly { _rowid: string }[], exact: readonly NativeHit[]): number {
  const truth = new Set(exact.map((h) => h.rowid));
  return got.filter((r) => truth.has(r._rowid)).length / exact.length;
}

/** Same rows in the same order, except that rows at equal distance may swap. */
function expectSameUpToTies(
  got: readonly { _rowid: string; _distance: number }[],
  want: readonly NativeHit[],
) {
  expect(got.map((r) => r._distance)).toEqual(want.map((h) => expect.closeTo(h.distance, 4)));
  const byDistance = (rows: { rowid: string; distance: number }[]) =>
    rows.map((r) => `${r.distance.toFixed(4)}:${r.rowid}`).sort();
  expect(byDistance(got.map((r) => ({ rowid: r._rowid, distance: r._distance })))).toEqual(
    byDistance([...want]),
  );
}

describe("a dataset with several uneven index segments", () => {
  test("has at least 4 segments of uneven sizes, and each task searched only its group", async () => {
    const response = await vectorSearch(
      { dataset: ds.uri, query: QUERIES[0] ?? [], k: K, strategy: "segments" },
      { runtime },
    );
    expect(ds.segments).toBe(5);
    expect(response.index.segmentCount).toBe(ds.segments);
    expect(response.version).toBe(ds.version);
    const rows = response.plan.groups.map((g) => g.rows);
    expect(Math.max(...rows)).toBeGreaterThan(2 * Math.min(...rows));
    expect(rows.reduce((a, b) => a + b, 0)).toBe(await ds.table.countRows());
    for (const group of response.plan.groups) {
      expect(group.searchedSegments).toBe(group.segments.length);
    }
    expect(response.plan.groups.flatMap((g) => g.segments).sort()).toHaveLength(ds.segments);
  });

  test("recall@10 against exact search is at least native ANN recall minus 0.02", async () => {
    const nprobes = 1;
    const response = await vectorSearch(
      { dataset: ds.uri, query: QUERIES, k: K, nprobes },
      { runtime },
    );
    let ours = 0;
    let native = 0;
    for (const [i, q] of QUERIES.entries()) {
      const exact = await nativeSearch(ds, q, K, { exact: true });
      ours += recall(rowsOf(response, i), exact);
      const ann = await nativeSearch(ds, q, K, { nprobes });
      native += recall(
        ann.map((h) => ({ _rowid: h.rowid })),
        exact,
      );
    }
    expect(ours / QUERIES.length).toBeGreaterThanOrEqual(native / QUERIES.length - 0.02);
    expect(ours / QUERIES.length).toBeGreaterThan(0.2);
  });

  test("with every partition probed and a refine factor, results equal exact search up to ties", async () => {
    const request = {
      dataset: ds.uri,
      query: QUERIES.slice(0, 10),
      k: K,
      nprobes: 4,
      refineFactor: 50,
    };
    const response = await vectorSearch(request, { runtime });
    for (const [i, q] of QUERIES.slice(0, 10).entries()) {
      expectSameUpToTies(rowsOf(response, i), await nativeSearch(ds, q, K, { exact: true }));
    }
  });

  test("equals native lancedb at the same nprobes, one query at a time", async () => {
    for (const q of QUERIES.slice(0, 5)) {
      const response = await vectorSearch(
        { dataset: ds.uri, query: q, k: K, nprobes: 2 },
        { runtime },
      );
      const native = await nativeSearch(ds, q, K, { nprobes: 2 });
      expectSameUpToTies(rowsOf(response, 0), native);
    }
  });

  test("a query matrix gives the same results as one call per query", async () => {
    const matrix = QUERIES.slice(0, 8);
    const batch = await vectorSearch({ dataset: ds.uri, query: matrix, k: K }, { runtime });
    for (const [i, q] of matrix.entries()) {
      const single = await vectorSearch({ dataset: ds.uri, query: q, k: K }, { runtime });
      expect(rowsOf(batch, i).map(({ _distance, _rowid }) => ({ _distance, _rowid }))).toEqual(
        rowsOf(single, 0).map(({ _distance, _rowid }) => ({ _distance, _rowid })),
      );
    }
  });

  test("results are sorted by query id, distance and numeric row id", async () => {
    const { results } = await vectorSearch(
      { dataset: ds.uri, query: QUERIES.slice(0, 5), k: K },
      { runtime },
    );
    const sorted = [...results].sort(
      (a, b) =>
        a._query_id - b._query_id ||
        a._distance - b._distance ||
        (BigInt(a._rowid) < BigInt(b._rowid) ? -1 : 1),
    );
    expect(results).toEqual(sorted);
    expect(results).toHaveLength(5 * K);
  });

  test("a selective filter is applied before nearest-neighbour selection and still gives k rows", async () => {
    // 1 row in 50 matches: a filter applied after each task's top-k would return far fewer.
    const filter = "id % 50 = 0";
    const q = QUERIES[3] ?? [];
    const response = await vectorSearch(
      { dataset: ds.uri, query: q, k: K, filter, select: ["id"], nprobes: 4, refineFactor: 20 },
      { runtime },
    );
    expect(response.results).toHaveLength(K);
    for (const row of response.results) expect(Number(row.id) % 50).toBe(0);
    expectSameUpToTies(response.results, await nativeSearch(ds, q, K, { filter, exact: true }));
  });

  test("a filter that matches fewer than k rows gives every match and no more", async () => {
    const response = await vectorSearch(
      { dataset: ds.uri, query: QUERIES[0] ?? [], k: 50, filter: "id < 8" },
      { runtime },
    );
    const live = await ds.table.countRows("id < 8");
    expect(response.results).toHaveLength(live);
  });

  test("select returns the requested columns of the winners from the pinned version", async () => {
    const q = QUERIES[5] ?? [];
    const response = await vectorSearch(
      { dataset: ds.uri, query: q, k: 5, select: ["id", "category", "Cat Name"] },
      { runtime },
    );
    const ids = response.results.map((r) => BigInt(r._rowid));
    const native = await ds.table
      .takeRowIds(ids)
      .withRowId()
      .select(["id", "category", "Cat Name"])
      .toArray();
    const byRowId = new Map(native.map((r) => [String(r._rowid), r]));
    for (const row of response.results) {
      const want = byRowId.get(row._rowid);
      expect(row.id).toBe(want?.id);
      expect(row.category).toBe(want?.category);
      expect(row["Cat Name"]).toBe(want?.["Cat Name"]);
    }
  });

  test("mutating the query after submitting changes nothing", async () => {
    const q = [...(QUERIES[7] ?? [])];
    const expected = await vectorSearch({ dataset: ds.uri, query: [...q], k: K }, { runtime });
    const pending = vectorSearch({ dataset: ds.uri, query: q, k: K }, { runtime });
    q.fill(1000);
    expect((await pending).results).toEqual(expected.results);
  });

  test("maxTasks bounds the fan-out width", async () => {
    const response = await vectorSearch(
      { dataset: ds.uri, query: QUERIES[0] ?? [], k: K, maxTasks: 2, strategy: "segments" },
      { runtime },
    );
    expect(response.plan.tasks).toBe(2);
    expect(response.plan.groups.flatMap((g) => g.segments)).toHaveLength(ds.segments);
    const full = await vectorSearch(
      { dataset: ds.uri, query: QUERIES[0] ?? [], k: K },
      { runtime },
    );
    expect(response.results).toEqual(full.results);
  });

  test("the dataset's files are byte-identical after searching it", async () => {
    const before = await snapshot(ds.dir);
    const fresh = await testRuntime();
    await vectorSearch(
      { dataset: ds.uri, query: QUERIES.slice(0, 3), k: K, select: ["id"] },
      { runtime: fresh },
    );
    expect(await snapshot(ds.dir)).toEqual(before);
  });
});

describe("many identical vectors", () => {
  test("ties still give exactly k rows, and every task returns at most k × refineFactor per query", async () => {
    const tied = await makeDataset({ tiedVector: Array(16).fill(0.5), tiedEvery: 3 });
    const tasks: number[] = [];
    const base = await testRuntime();
    const counting = {
      ...(await import("../shared/invoker.js")).inProcessInvoker(base),
    };
    const search = counting.searchSegments;
    counting.searchSegments = async (task) => {
      const result = await search(task);
      tasks.push(...result.candidates.counts);
      return result;
    };
    const response = await vectorSearch(
      {
        dataset: tied.uri,
        query: [Array(16).fill(0.5), Array(16).fill(0.1)],
        k: 7,
        refineFactor: 2,
        strategy: "segments",
      },
      { runtime: base, invoker: counting },
    );
    expect(tied.segments).toBe(5);
    expect(response.results.filter((r) => r._query_id === 0)).toHaveLength(7);
    expect(response.results.filter((r) => r._query_id === 1)).toHaveLength(7);
    expect(tasks.length).toBe(2 * response.plan.tasks);
    // Several tasks: the merge refines the global top 7 × 2, each task answers its share of it.
    for (const n of tasks) expect(n).toBeLessThanOrEqual(7 * 2);
    // Equal distances are ordered by row id: the 7 smallest row ids of the whole dataset.
    // Which of the tied rows a segment returns is Lance's choice; the distances are not.
    const first = response.results.filter((r) => r._query_id === 0);
    const exact = await nativeSearch(tied, Array(16).fill(0.5), 7, { exact: true });
    expect(first.map((r) => r._distance)).toEqual(exact.map((h) => h.distance));
    expect(first.every((r) => r._distance === 0)).toBe(true);
    const ids = first.map((r) => BigInt(r._rowid));
    expect(ids).toEqual([...ids].sort((a, b) => (a < b ? -1 : 1)));
  });
});

async function snapshot(dir: string): Promise<Record<string, string>> {
  const files = await readdir(dir, { recursive: true, withFileTypes: true });
  const entries = await Promise.all(
    files
      .filter((f) => f.isFile())
      .map(async (f) => {
        const path = join(f.parentPath, f.name);
        return [
          path,
          createHash("sha256")
            .update(await readFile(path))
            .digest("hex"),
        ] as const;
      }),
  );
  return Object.fromEntries(entries.sort());
}
