/**
 * A dataset written by lancedb 0.31.0, the release this project pinned before 0.39 (a fixture
 * made by test/fixtures/lancedb-0.31/write.mjs): three IVF_PQ index segments, deletions and an
 * unindexed fragment. Fan-out on the pinned lancedb answers like native lancedb on the same
 * data, and like 0.31 answered when it wrote it.
 */
import { cp, mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as lancedb from "@lancedb/lancedb";
import { beforeAll, describe, expect, test } from "vitest";
import { STRATEGIES } from "../shared/request.js";
import type { Runtime } from "../shared/runtime.js";
import { vectorSearch } from "../shared/search.js";
import { type Dataset, nativeSearch, testRuntime } from "./support/fixtures.js";

const FIXTURE = join(import.meta.dirname, "fixtures", "lancedb-0.31");

interface Expected {
  readonly version: number;
  readonly k: number;
  readonly nprobes: number;
  readonly queries: number[][];
  readonly answers: string[][];
}

let expected: Expected;
let ds: Dataset;
let runtime: Runtime;

beforeAll(async () => {
  expected = JSON.parse(await readFile(join(FIXTURE, "expected.json"), "utf8"));
  // A copy, so that nothing a test does can change the fixture.
  const dir = await mkdtemp(join(tmpdir(), "fanout-031-"));
  await cp(join(FIXTURE, "items.lance"), join(dir, "items.lance"), { recursive: true });
  const table = await (await lancedb.connect(dir)).openTable("items");
  ds = {
    uri: join(dir, "items.lance"),
    dir,
    table,
    version: expected.version,
    segments: 3,
    vectorColumn: "vector",
    storageOptions: {},
  };
  runtime = await testRuntime();
});

describe("a dataset written by lancedb 0.31", () => {
  test("native lancedb reads it as 0.31 answered", async () => {
    expect((await ds.table.listIndices())[0]?.numSegments).toBe(3);
    for (const [i, query] of expected.queries.entries()) {
      const hits = await nativeSearch(ds, query, expected.k, { nprobes: expected.nprobes });
      expect(hits.map((h) => h.rowid)).toEqual(expected.answers[i]);
    }
  });

  test.each(STRATEGIES)("a %s search answers like native", async (strategy) => {
    const { k, nprobes, queries } = expected;
    const response = await vectorSearch(
      { dataset: ds.uri, query: queries, k, nprobes, strategy, version: ds.version },
      { runtime },
    );
    for (const [i, query] of queries.entries()) {
      const native = await nativeSearch(ds, query, k, { nprobes });
      const rows = response.results.filter((r) => r._query_id === i);
      expect(rows.map((r) => r._rowid)).toEqual(native.map((h) => h.rowid));
      expect(rows.map((r) => r._distance)).toEqual(native.map((h) => h.distance));
    }
  });

  test("the segments strategy searches each index segment and the unindexed fragment", async () => {
    const { k, nprobes, queries } = expected;
    const response = await vectorSearch(
      { dataset: ds.uri, query: queries, k, nprobes, strategy: "segments" },
      { runtime },
    );
    expect(response.version).toBe(expected.version);
    expect(response.index.segmentCount).toBe(3);
    const groups = response.plan.groups;
    expect(groups.filter((g) => g.kind === "index").flatMap((g) => g.segments)).toHaveLength(3);
    expect(groups.filter((g) => g.kind === "flat")).toHaveLength(1);
    for (const group of groups) expect(group.searchedSegments).toBe(group.segments.length);
  });
});
