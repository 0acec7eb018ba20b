/**
 * A dataset that changes under the views: every commit kind, each answer against native lancedb
 * at that version, and how many views each commit makes the next query build.
 */
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { beforeAll, describe, expect, test } from "vitest";
import { connectDatabase } from "../shared/lance/connect.js";
import { prepare } from "../shared/prepare.js";
import type { Runtime } from "../shared/runtime.js";
import { type SearchResponse, vectorSearch } from "../shared/search.js";
import { viewFolder } from "../shared/views/identity.js";
import {
  type Dataset,
  DIMENSION,
  makeDataset,
  nativeSearch,
  queries,
  testRuntime,
} from "./support/fixtures.js";

const QUERIES = queries(4, 41);
let ds: Dataset;
let runtime: Runtime;
let seen: Set<string>;
let nextId = 100_000;

beforeAll(async () => {
  ds = await makeDataset({ rounds: [4000, 1500, 6000, 2500] });
  runtime = await testRuntime();
  seen = new Set();
  await search(); // the views of the first version
  seen = await views();
});

async function views(): Promise<Set<string>> {
  const folder = join(runtime.config.localViewRoot, viewFolder(runtime.resolveDataset(ds.uri)));
  return new Set(await readdir(folder).catch(() => []));
}

/** The views built since the last call: those holding index segments, and flat ones. */
async function built(): Promise<{ index: number; flat: number }> {
  const now = await views();
  const created = [...now].filter((v) => !seen.has(v));
  seen = now;
  const folder = join(runtime.config.localViewRoot, viewFolder(runtime.resolveDataset(ds.uri)));
  const db = await connectDatabase(folder, "local", runtime.config.s3);
  let index = 0;
  for (const name of created) {
    const view = await db.openTable(name.replace(/\.lance$/, ""));
    if (((await view.listIndices())[0]?.numSegments ?? 0) > 0) index++;
    view.close();
  }
  return { index, flat: created.length - index };
}

function search(filter?: string): Promise<SearchResponse> {
  return vectorSearch(
    {
      dataset: ds.uri,
      query: QUERIES,
      k: 10,
      nprobes: 2,
      filter,
      strategy: "segments",
      maxTasks: 4,
      coverage: "fallback",
    },
    { runtime },
  );
}

async function expectNative(response: SearchResponse, filter?: string): Promise<void> {
  const version = await ds.table.version();
  expect(response.version).toBe(version);
  for (const [i, q] of QUERIES.entries()) {
    const native = await nativeSearch({ ...ds, version }, q, 10, { nprobes: 2, filter });
    expect(response.results.filter((r) => r._query_id === i).map((r) => r._rowid)).toEqual(
      native.map((h) => h.rowid),
    );
  }
}

function rows(n: number) {
  return Array.from({ length: n }, () => {
    const id = nextId++;
    return {
      id,
      category: id % 10,
      "Cat Name": "new",
      vector: Array.from({ length: DIMENSION }, (_, d) => ((id * 7 + d * 13) % 101) / 101),
    };
  });
}

describe("a dataset that changes", () => {
  test("an append without index change builds no index view", async () => {
    await ds.table.add(rows(700));
    const response = await search();
    await expectNative(response);
    expect(await built()).toEqual({ index: 0, flat: 1 });
  });

  test("an optimize that adds a delta segment rebuilds at most two index views", async () => {
    const segments = async () => (await ds.table.listIndices())[0]?.numSegments ?? 0;
    const before = await segments();
    await ds.table.optimize();
    expect(await segments()).toBe(before + 1);
    const response = await search();
    await expectNative(response);
    const { index, flat } = await built();
    expect(index).toBeGreaterThanOrEqual(1);
    expect(index).toBeLessThanOrEqual(2);
    expect(flat).toBe(0);
  });

  test("a delete in one fragment rebuilds only the view that holds it", async () => {
    await ds.table.delete("id = 7");
    const response = await search();
    await expectNative(response);
    expect(await built()).toEqual({ index: 1, flat: 0 });
  });

  test("an update (a rewrite) rebuilds one index view and the tail's", async () => {
    await ds.table.update({ where: "id = 5", valuesSql: { category: "42" } });
    const response = await search("category = 42");
    await expectNative(response, "category = 42");
    expect(response.results.length).toBeGreaterThan(0);
    expect(await built()).toEqual({ index: 1, flat: 1 });
  });

  test("an added column is searched and filtered through new views", async () => {
    await ds.table.addColumns([{ name: "twice", valueSql: "id * 2" }]);
    const response = await search("twice % 4 = 0");
    await expectNative(response, "twice % 4 = 0");
  });

  test("compaction and a restore to an old version answer as native at each version", async () => {
    const old = await ds.table.version();
    await ds.table.delete("id % 3 = 1");
    await ds.table.optimize();
    await expectNative(await search());
    seen = await views();
    await ds.table.checkout(old);
    await ds.table.restore();
    const restored = await search();
    await expectNative(restored);
    // The old content's views are still there: nothing to build.
    expect(await built()).toEqual({ index: 0, flat: 0 });
  });
});

describe("prepare", () => {
  test("builds the views of a version's plans, so searches build none; after a commit only what changed", async () => {
    const own = await makeDataset({ rounds: [4000, 1500, 6000] });
    const rt = await testRuntime();
    const folder = join(rt.config.localViewRoot, viewFolder(rt.resolveDataset(own.uri)));
    const count = async () => (await readdir(folder).catch(() => [])).length;
    const first = await prepare({ dataset: own.uri }, { runtime: rt });
    expect(first.version).toBe(await own.table.version());
    expect(first.created).toBe(first.views);
    expect(first.environments).toBe(1); // tasks run in this process
    expect(await count()).toBe(first.views);
    for (const strategy of ["auto", "segments", "single"] as const) {
      const response = await vectorSearch(
        { dataset: own.uri, query: QUERIES, k: 5, strategy },
        { runtime: rt },
      );
      expect(response.results).toHaveLength(QUERIES.length * 5);
    }
    expect(await count()).toBe(first.views);
    expect((await prepare({ dataset: own.uri }, { runtime: rt })).created).toBe(0);
    await own.table.add(rows(300));
    const appended = await prepare({ dataset: own.uri }, { runtime: rt });
    expect(appended.created).toBe(1); // the unindexed tail's view
    await expect(
      prepare({ dataset: own.uri, version: 999 }, { runtime: rt }),
    ).rejects.toMatchObject({ code: "VERSION_NOT_FOUND" });
  });

  test("renews lancedb's caches version after version instead of keeping every replaced view", async () => {
    const own = await makeDataset({ rounds: [4000, 1500, 6000] });
    // Renewed past their fresh size plus 1/64 of the index cache's bound: 1 MiB here.
    const rt = await testRuntime({ LANCE_FANOUT_INDEX_CACHE_MB: "64" });
    const held: number[] = [];
    for (let commit = 0; commit < 18; commit++) {
      // One row of one fragment: that fragment's views are replaced, under new URIs.
      await own.table.delete(`id = ${(commit * 1_237) % 23_500}`);
      await prepare({ dataset: own.uri }, { runtime: rt });
      held.push(rt.views.cachedBytes);
    }
    // Without renewal they grow by each replaced view (~2 MB a commit here) towards lancedb's
    // own bound (64 MiB); renewed, within their fresh size, the slack and one commit's views.
    const bound = (held[0] ?? 0) + 2 * 1024 * 1024;
    expect(Math.max(...held), `cached bytes per commit: ${held.join(", ")}`).toBeLessThan(bound);
    const version = await own.table.version();
    const response = await vectorSearch(
      { dataset: own.uri, query: QUERIES, k: 10, nprobes: 2, strategy: "segments", maxTasks: 4 },
      { runtime: rt },
    );
    for (const [i, q] of QUERIES.entries()) {
      const native = await nativeSearch({ ...own, version }, q, 10, { nprobes: 2 });
      expect(response.results.filter((r) => r._query_id === i).map((r) => r._rowid)).toEqual(
        native.map((h) => h.rowid),
      );
    }
  });
});
