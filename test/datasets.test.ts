/**
 * Dataset variants: stable row ids, mixed-case names, other metrics, several indices, concurrent
 * writers and unindexed data.
 */
import * as lancedb from "@lancedb/lancedb";
import { describe, expect, test } from "vitest";
import { FanoutError } from "../shared/errors.js";
import { vectorSearch } from "../shared/search.js";
import {
  INDEX_TYPES,
  makeDataset,
  nativeSearch,
  queries,
  testRuntime,
} from "./support/fixtures.js";

const [q0 = [], q1 = [], q2 = []] = queries(3, 7);

function pairs(rows: readonly { _rowid: string; _distance: number }[]) {
  return rows.map((r) => ({ rowid: r._rowid, distance: expect.closeTo(r._distance, 5) }));
}

async function expectCode(promise: Promise<unknown>, code: string): Promise<FanoutError> {
  const error = await promise.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(error).toBeInstanceOf(FanoutError);
  expect((error as FanoutError).code).toBe(code);
  return error as FanoutError;
}

describe("every vector index type lancedb builds", () => {
  test.each(INDEX_TYPES)("%s: several segments, every strategy equals native", async (index) => {
    const ds = await makeDataset({ index, deleteWhere: "id % 11 = 3" });
    expect(ds.segments).toBeGreaterThanOrEqual(3);
    const runtime = await testRuntime();
    const native = await Promise.all(
      [q0, q1].map((q) => nativeSearch(ds, q, 10, { nprobes: 2, filter: "category < 7" })),
    );
    for (const strategy of ["single", "segments", "auto"] as const) {
      const response = await vectorSearch(
        { dataset: ds.uri, query: [q0, q1], k: 10, nprobes: 2, filter: "category < 7", strategy },
        { runtime },
      );
      if (strategy === "segments") expect(response.plan.tasks).toBe(ds.segments);
      for (const [i, hits] of native.entries()) {
        expect(pairs(response.results.filter((r) => r._query_id === i))).toEqual(
          hits.map((h) => ({ ...h, distance: expect.closeTo(h.distance, 5) })),
        );
      }
    }
  });
});

describe("dataset variants", () => {
  test("stable row ids: row ids are Lance's stable ids and results equal native", async () => {
    const ds = await makeDataset({ stableRowIds: true, deleteWhere: "id % 5 = 1" });
    const runtime = await testRuntime();
    const response = await vectorSearch(
      { dataset: ds.uri, query: q0, k: 10, nprobes: 2 },
      { runtime },
    );
    expect(ds.segments).toBe(5);
    expect(pairs(response.results)).toEqual(
      (await nativeSearch(ds, q0, 10, { nprobes: 2 })).map((h) => ({
        ...h,
        distance: expect.closeTo(h.distance, 5),
      })),
    );
    // Stable ids are insert counters, not fragment addresses.
    for (const row of response.results) expect(BigInt(row._rowid)).toBeLessThan(1n << 32n);
  });

  test("mixed-case and spaced column names in column, filter and select", async () => {
    const ds = await makeDataset({ vectorColumn: "Embedding Vec" });
    const runtime = await testRuntime();
    const filter = "`Cat Name` = 'c1'";
    const response = await vectorSearch(
      {
        dataset: ds.uri,
        query: q1,
        k: 10,
        column: "Embedding Vec",
        filter,
        select: ["Cat Name"],
        nprobes: 4,
      },
      { runtime },
    );
    expect(response.index.column).toBe("Embedding Vec");
    expect(response.results).toHaveLength(10);
    for (const row of response.results) expect(row["Cat Name"]).toBe("c1");
    const native = await nativeSearch(ds, q1, 10, { filter, nprobes: 4 });
    expect(response.results.map((r) => r._rowid)).toEqual(native.map((h) => h.rowid));
  });

  test("cosine indices search with cosine distance and match native", async () => {
    const ds = await makeDataset({ metric: "cosine" });
    const runtime = await testRuntime();
    const response = await vectorSearch(
      { dataset: ds.uri, query: q2, k: 10, nprobes: 2 },
      { runtime },
    );
    expect(response.index.metric).toBe("cosine");
    expect(response.results.map((r) => r._rowid)).toEqual(
      (await nativeSearch(ds, q2, 10, { nprobes: 2 })).map((h) => h.rowid),
    );
    await expectCode(
      vectorSearch({ dataset: ds.uri, query: q2, k: 10, distanceType: "l2" }, { runtime }),
      "METRIC_MISMATCH",
    );
  });

  test("several indices on a column: ambiguity, explicit name, unknown name", async () => {
    const ds = await makeDataset({ rounds: [4000, 2000] });
    await ds.table.createIndex("vector", {
      config: lancedb.Index.ivfFlat({ numPartitions: 2, distanceType: "cosine" }),
      name: "flat_cosine",
    });
    const runtime = await testRuntime();
    const base = { dataset: ds.uri, query: q0, k: 10 };
    await expectCode(vectorSearch(base, { runtime }), "AMBIGUOUS_INDEX");
    await expectCode(vectorSearch({ ...base, indexName: "nope" }, { runtime }), "INDEX_NOT_FOUND");
    await expectCode(
      vectorSearch({ ...base, indexName: "flat_cosine", distanceType: "dot" }, { runtime }),
      "METRIC_MISMATCH",
    );
    // A flat index probed everywhere is exact: the answer is the exact cosine top-k.
    const response = await vectorSearch(
      { ...base, indexName: "flat_cosine", nprobes: 2 },
      { runtime },
    );
    expect(response.index).toMatchObject({
      name: "flat_cosine",
      metric: "cosine",
      segmentCount: 1,
    });
    const table = await (await lancedb.connect(ds.dir)).openTable("items");
    const exact = await table
      .vectorSearch(q0)
      .distanceType("cosine")
      .bypassVectorIndex()
      .limit(10)
      .withRowId()
      .select(["_distance"])
      .toArray();
    expect(response.results.map((r) => r._rowid)).toEqual(exact.map((r) => String(r._rowid)));
  });

  test("a pinned version answers as of that version while a writer appends and compacts", async () => {
    const ds = await makeDataset({ rounds: [4000, 2000] });
    const runtime = await testRuntime();
    const pinned = ds.version;
    const expected = await nativeSearch(ds, q1, 10, { version: pinned, nprobes: 2 });
    const writer = (async () => {
      for (let i = 0; i < 3; i++) {
        await ds.table.add(
          Array.from({ length: 3000 }, (_, j) => ({
            id: 100_000 + i * 3000 + j,
            category: 0,
            "Cat Name": "w",
            vector: q1.map((x) => x + 1e-4 * (j + 1)),
          })),
        );
        await ds.table.optimize();
      }
    })();
    const answers = [];
    for (let i = 0; i < 4; i++) {
      answers.push(
        await vectorSearch(
          { dataset: ds.uri, query: q1, k: 10, version: pinned, nprobes: 2, select: ["id"] },
          { runtime },
        ),
      );
    }
    await writer;
    answers.push(
      await vectorSearch(
        { dataset: ds.uri, query: q1, k: 10, version: pinned, nprobes: 2, select: ["id"] },
        { runtime },
      ),
    );
    for (const answer of answers) {
      expect(answer.version).toBe(pinned);
      expect(answer.results.map((r) => r._rowid)).toEqual(expected.map((h) => h.rowid));
      for (const row of answer.results) expect(Number(row.id)).toBeLessThan(100_000);
    }
    // Without a version the newest one is searched, and the writer's near-duplicates win.
    const latest = await vectorSearch(
      { dataset: ds.uri, query: q1, k: 10, select: ["id"] },
      { runtime },
    );
    expect(latest.version).toBeGreaterThan(pinned);
    expect(Number(latest.results[0]?.id)).toBeGreaterThanOrEqual(100_000);
  });

  test("a search without a version sees a commit made after the previous search", async () => {
    const ds = await makeDataset({ rounds: [4000] });
    const runtime = await testRuntime();
    const before = await vectorSearch({ dataset: ds.uri, query: q0, k: 1 }, { runtime });
    await ds.table.delete("id = -1");
    await ds.table.add([{ id: -1, category: 0, "Cat Name": "n", vector: q0 }]);
    const after = await vectorSearch(
      { dataset: ds.uri, query: q0, k: 1, coverage: "fallback", select: ["id"] },
      { runtime },
    );
    expect(after.version).toBeGreaterThan(before.version);
    expect(after.results[0]?.id).toBe(-1);
  });

  test("coverage require refuses live fragments outside the index, naming them and their rows", async () => {
    const ds = await makeDataset({ rounds: [4000], unindexedRows: 700 });
    const runtime = await testRuntime();
    const error = await expectCode(
      vectorSearch({ dataset: ds.uri, query: q0, k: 5, coverage: "require" }, { runtime }),
      "INCOMPLETE_INDEX_COVERAGE",
    );
    expect(error.status).toBe(409);
    expect(error.details).toEqual({ fragments: [{ id: expect.any(Number), rows: 700 }] });
    expect(error.message).toContain("700 rows");
    // The deployment's default decides when the request says nothing.
    const strict = await testRuntime({ LANCE_FANOUT_COVERAGE: "require" });
    await expectCode(
      vectorSearch({ dataset: ds.uri, query: q0, k: 5 }, { runtime: strict }),
      "INCOMPLETE_INDEX_COVERAGE",
    );
    const answer = await vectorSearch({ dataset: ds.uri, query: q0, k: 5 }, { runtime });
    expect(answer.plan.groups.map((g) => g.kind)).toContain("flat");
  });
});
