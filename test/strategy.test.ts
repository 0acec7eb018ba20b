/**
 * Coverage modes, strategies, explain, offset and merging in a tree, against native lancedb.
 */
import { readdir } from "node:fs/promises";
import * as lancedb from "@lancedb/lancedb";
import { beforeAll, describe, expect, test } from "vitest";
import { DEMO_STACK } from "../local/demo-stack.js";
import { groupSegments } from "../shared/grouping.js";
import { inProcessInvoker } from "../shared/invoker.js";
import type { Runtime } from "../shared/runtime.js";
import { type SearchResponse, vectorSearch } from "../shared/search.js";
import { COST_MODEL, cachedPerFileByte, chunkRanges, splitWork } from "../shared/strategy.js";
import {
  type Dataset,
  DIMENSION,
  makeDataset,
  nativeSearch,
  queries,
  testRuntime,
} from "./support/fixtures.js";

const QUERIES = queries(12, 21);
const strip = (r: SearchResponse) =>
  r.results.map(({ _query_id, _distance, _rowid }) => ({ _query_id, _distance, _rowid }));
const uuid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`;

const MB = 1024 * 1024;

/** `count` segments of `rows` rows each, of unknown index size; uuids from `first`. */
const equalSegments = (count: number, rows: number, first: number) =>
  Array.from({ length: count }, (_, i) => ({
    uuid: uuid(first + i),
    created: i,
    fragments: [i],
    rows,
    physicalRows: rows,
    indexBytes: null,
  }));

describe("splitWork", () => {
  const segments = Array.from({ length: 8 }, (_, i) => ({
    uuid: uuid(i),
    created: i,
    fragments: [i],
    rows: 50_000 * (i + 1),
    physicalRows: 50_000 * (i + 1),
    indexBytes: null,
  }));
  const lambda = {
    parallelism: 256,
    invokeMs: 15,
    maxPayloadBytes: 6 * 1024 * 1024,
    indexCacheBytes: 1024 * MB,
    slots: 16,
  };
  const base = {
    units: segments.length,
    group: (g: number) => groupSegments(segments, g),
    queries: 100,
    dimension: 64,
    limit: 10,
    nprobes: 20,
    maxTasks: 16,
    mergeInvoked: false,
    refines: false,
    storage: "local" as const,
    profile: lambda,
  };

  test("fixed strategies give their shapes", () => {
    const at = (strategy: "single" | "segments" | "queries" | "hybrid") => {
      const split = splitWork({ ...base, strategy });
      return [split.groups.length, split.chunks.length];
    };
    expect(at("single")).toEqual([1, 1]);
    expect(at("segments")).toEqual([8, 1]);
    expect(at("queries")).toEqual([1, 16]);
    const [g = 0, c = 0] = at("hybrid");
    expect(g).toBeGreaterThan(1);
    expect(c).toBeGreaterThan(1);
    expect(g * c).toBeLessThanOrEqual(16);
  });

  test("auto fans out wide where tasks run in parallel, and stays narrow on two shared cores", () => {
    const wide = splitWork({ ...base, strategy: "auto" });
    expect(wide.groups.length * wide.chunks.length).toBeGreaterThan(4);
    const narrow = splitWork({
      ...base,
      queries: 1,
      strategy: "auto",
      profile: { ...lambda, parallelism: 2, invokeMs: 0 },
    });
    expect(narrow.groups.length * narrow.chunks.length).toBeLessThanOrEqual(2);
    const estimates = (["single", "segments", "queries", "hybrid"] as const).map(
      (strategy) => splitWork({ ...base, strategy }).estimatedMs,
    );
    expect(wide.estimatedMs).toBeLessThanOrEqual(Math.min(...estimates) + 1e-9);
  });

  test("one group saves the merge invoke in the estimate unless the merge runs anyway", () => {
    const single = { ...base, queries: 1, strategy: "single" as const };
    const segmentsSplit = { ...base, queries: 1, strategy: "segments" as const };
    const withSelect = splitWork({ ...single, mergeInvoked: true }).estimatedMs;
    expect(withSelect - splitWork(single).estimatedMs).toBeCloseTo(lambda.invokeMs);
    const fanned = splitWork({ ...segmentsSplit, mergeInvoked: true }).estimatedMs;
    expect(fanned - splitWork(segmentsSplit).estimatedMs).toBeCloseTo(0);
  });

  test("a refining search pays its refine in the task of one group, in the merge of several", () => {
    const one = { ...base, queries: 1, profile: { ...lambda, parallelism: 2, invokeMs: 0 } };
    const refined = { ...one, refines: true };
    const at = (input: typeof one, strategy: "single" | "segments") =>
      splitWork({ ...input, strategy }).estimatedMs;
    expect(at(refined, "single") - at(one, "single")).toBeCloseTo(
      segments.length * base.limit * COST_MODEL.taskRefinePerCandidateMs,
    );
    const scale = base.dimension / COST_MODEL.referenceDimension;
    expect(at(refined, "segments") - at(one, "segments")).toBeCloseTo(
      COST_MODEL.refineFixedMs +
        COST_MODEL.storageRoundTripMs +
        COST_MODEL.refinePerQueryMs +
        COST_MODEL.refineScorePerQueryMs * scale,
    );
    // Two shared cores gain a few ms from two groups, less than the refine they move.
    const auto = splitWork({ ...refined, strategy: "auto" });
    expect(auto.groups.length).toBe(1);
  });

  describe("batches on one process's cores (tasks overlap little: parallelism 1)", () => {
    /** 68 small segments and 40 candidates per query, as synth-many with k 10, refineFactor 4. */
    const many = equalSegments(68, 3765, 100);
    const inProcess = { ...lambda, parallelism: 1, invokeMs: 0, slots: 1 };
    const batch = {
      ...base,
      units: many.length,
      group: (g: number) => groupSegments(many, g),
      dimension: 128,
      limit: 40,
      nprobes: 8,
      refines: true,
      strategy: "auto" as const,
      profile: inProcess,
    };

    test("a refined batch over many segments goes to unrefined groups and one refine in the merge", () => {
      const split = splitWork(batch);
      expect(split.strategy).toBe("segments");
      expect(split.groups.length).toBeGreaterThan(1);
      expect(split.refineInMerge).toBe(true);
      const single = splitWork({ ...batch, strategy: "single" });
      expect(single.refineInMerge).toBe(false);
      expect(split.estimatedMs).toBeLessThan(single.estimatedMs);
      // Query chunks each refine every segment's candidates again: no better than one task here.
      const queries = splitWork({ ...batch, strategy: "queries" }).estimatedMs;
      expect(queries).toBeGreaterThanOrEqual(single.estimatedMs);
    });

    test("one query of the same search, or a batch without a refine, keeps one task", () => {
      const one = splitWork({ ...batch, queries: 1 });
      expect([one.groups.length, one.refineInMerge]).toEqual([1, false]);
      const unrefined = splitWork({ ...batch, refines: false });
      expect(unrefined.groups.length * unrefined.chunks.length).toBe(1);
    });
  });

  describe("a refined batch read from S3 (fashion-mnist's shape through the local stack)", () => {
    /** 9 segments of 784-d, 40 candidates per query (k 10, refineFactor 4), tasks in turn. */
    const nine = equalSegments(9, 7667, 200);
    const stack = { ...lambda, parallelism: 1, invokeMs: 3, slots: 1 };
    const batch = {
      ...base,
      units: nine.length,
      group: (g: number) => groupSegments(nine, g),
      dimension: 784,
      limit: 40,
      nprobes: 8,
      refines: true,
      storage: "s3" as const,
      strategy: "auto" as const,
      profile: stack,
    };

    test("auto leaves the refine to the merge: one read of the batch's candidates, not one per query", () => {
      // Measured at 30d0047: one task refining its batch of 100 took 3.89 s, two unrefined
      // groups and the merge's refine 2.44 s (bench/README.md, fashion-mnist, stack, batch 100).
      const split = splitWork(batch);
      expect(split.groups.length).toBeGreaterThan(1);
      expect(split.refineInMerge).toBe(true);
      // Read from local files the task's refine costs no round trips: one task, as at 30d0047.
      const local = splitWork({ ...batch, storage: "local" });
      expect([local.groups.length, local.refineInMerge]).toEqual([1, false]);
    });

    test("one group that can have no other (maxTasks 1, or one segment) refines in the merge", () => {
      expect(splitWork({ ...batch, maxTasks: 1 }).refineInMerge).toBe(true);
      const oneSegment = {
        ...batch,
        units: 1,
        group: (g: number) => groupSegments(nine.slice(0, 1), g),
      };
      expect(splitWork(oneSegment).refineInMerge).toBe(true);
      // `single` with several segments refines in its task, as one native search does.
      expect(splitWork({ ...batch, strategy: "single" }).refineInMerge).toBe(false);
    });

    test("one query keeps its refine in its task; nothing to place without a refine", () => {
      const one = splitWork({ ...batch, queries: 1 });
      expect([one.groups.length, one.refineInMerge]).toEqual([1, false]);
      expect(splitWork({ ...batch, queries: 1, maxTasks: 1 }).refineInMerge).toBe(false);
      expect(splitWork({ ...batch, refines: false }).refineInMerge).toBe(false);
    });
  });

  test("payload limits split the queries into more chunks than asked", () => {
    const split = splitWork({ ...base, queries: 1000, limit: 10_000, strategy: "single" });
    expect(split.chunks.length).toBeGreaterThan(20);
    expect(split.chunks.at(-1)?.[1]).toBe(1000);
  });

  describe("memory: what a group's index costs to hold", () => {
    /** 8 segments of 200 MB each: 1.6 GB of index, as the manifest records it. */
    const big = segments.map((s) => ({
      ...s,
      rows: 100_000,
      physicalRows: 100_000,
      indexBytes: 200 * MB,
    }));
    const one = {
      ...base,
      queries: 1,
      strategy: "auto" as const,
      group: (g: number) => groupSegments(big, g),
    };
    /** A cache of `bytes` per environment; `perTask`: a slot per group, else one slot for all. */
    const cache = (bytes: number, perTask: boolean) => ({
      ...lambda,
      indexCacheBytes: bytes,
      slots: perTask ? 16 : 1,
    });

    test("auto fans out when one function's cache holds a fraction of the index, as far as the groups fit", () => {
      const split = splitWork({ ...one, profile: cache(400 * MB, true) });
      // Two segments (400 MB) fit one task's cache: four groups hold the whole index hot.
      expect(split.groups.length).toBeGreaterThanOrEqual(4);
      for (const g of split.groups) expect(g.indexBytes).toBeLessThanOrEqual(400 * MB);
      const single = splitWork({ ...one, strategy: "single", profile: cache(400 * MB, true) });
      expect(single.estimatedMs).toBeGreaterThan(2 * split.estimatedMs);
    });

    test("auto keeps one task when the whole index fits one cache", () => {
      const split = splitWork({ ...one, profile: cache(2048 * MB, true) });
      expect(split.groups.length).toBe(1);
    });

    test("in one process the groups share one cache: fanning out holds no more of the index", () => {
      const shared = splitWork({
        ...one,
        profile: { ...cache(400 * MB, false), parallelism: 2, invokeMs: 0 },
      });
      const bounded = splitWork({
        ...one,
        profile: { ...cache(400 * MB, true), parallelism: 2, invokeMs: 0 },
      });
      expect(shared.groups.length).toBeLessThanOrEqual(2);
      expect(bounded.groups.length).toBeGreaterThanOrEqual(4);
    });

    test("one slot holds every group in each environment: eight groups there read what one reads", () => {
      const eight = { ...one, strategy: "segments" as const, maxTasks: 8 };
      const slotted = splitWork({ ...eight, profile: cache(400 * MB, true) });
      const oneSlot = splitWork({ ...eight, profile: cache(400 * MB, false) });
      expect(slotted.groups.length).toBe(8);
      expect(oneSlot.estimatedMs).toBeGreaterThan(2 * slotted.estimatedMs);
    });

    test("a PQ index takes more than its files in a cache: auto fans out before the files fill it", () => {
      // 1.6 GB of files against 2 GB caches: as files they fit, as a PQ index in a cache not.
      const files = splitWork({ ...one, profile: cache(2048 * MB, true) });
      const pq = splitWork({
        ...one,
        cachedPerFileByte: cachedPerFileByte("IvfPq"),
        profile: cache(2048 * MB, true),
      });
      expect(files.groups.length).toBe(1);
      expect(pq.groups.length).toBeGreaterThan(1);
      expect([cachedPerFileByte("IvfHnswPq"), cachedPerFileByte("IvfFlat")]).toEqual([
        cachedPerFileByte("IvfPq"),
        1,
      ]);
      expect(cachedPerFileByte(null)).toBe(1);
    });

    test("npm start's demo deployment fans its IVF_PQ index out over the slots; one slot would not", () => {
      // The demo: 2.8 MiB of IVF_PQ files in 8 uneven segments, with the demo deployment's caches.
      const demo = segments.map((s, i) => ({ ...s, indexBytes: (2.8 * MB * (i + 1)) / 36 }));
      const deployed = {
        ...one,
        group: (g: number) => groupSegments(demo, g),
        cachedPerFileByte: cachedPerFileByte("IvfPq"),
        storage: "s3" as const,
      };
      const local = { parallelism: 1, invokeMs: 3, indexCacheBytes: DEMO_STACK.indexCacheMb * MB };
      const slots = (n: number) => ({ ...lambda, ...local, slots: n });
      const split = splitWork({ ...deployed, profile: slots(DEMO_STACK.segmentSearchSlots) });
      expect(split.groups.length).toBeGreaterThan(1);
      expect(splitWork({ ...deployed, profile: slots(1) }).groups.length).toBe(1);
    });

    test("sizes the manifest does not record count as fitting", () => {
      const unknown = segments.map((s) => ({
        ...s,
        rows: 100_000,
        physicalRows: 100_000,
        indexBytes: null,
      }));
      const split = splitWork({
        ...one,
        group: (g) => groupSegments(unknown, g),
        profile: cache(1, true),
      });
      expect(split.groups.length).toBe(1);
    });
  });

  test("chunkRanges covers every query once", () => {
    expect(chunkRanges(10, 3)).toEqual([
      [0, 3],
      [3, 6],
      [6, 10],
    ]);
    expect(chunkRanges(2, 5)).toEqual([
      [0, 1],
      [1, 2],
    ]);
  });
});

describe("strategies on a real dataset", () => {
  let ds: Dataset;
  let runtime: Runtime;
  beforeAll(async () => {
    ds = await makeDataset({ rounds: [4000, 1500, 6000, 2500], deleteWhere: "id % 13 = 2" });
    runtime = await testRuntime();
  });

  test("every strategy gives the same answer", async () => {
    const request = { dataset: ds.uri, query: QUERIES, k: 10, nprobes: 2 };
    const answers = await Promise.all(
      (["single", "segments", "queries", "hybrid", "auto"] as const).map((strategy) =>
        vectorSearch({ ...request, strategy, maxTasks: 8 }, { runtime }),
      ),
    );
    expect(answers.map((a) => a.plan.strategy).slice(0, 4)).toEqual([
      "single",
      "segments",
      "queries",
      "hybrid",
    ]);
    for (const answer of answers)
      expect(strip(answer)).toEqual(strip(answers[0] as SearchResponse));
  });

  test("auto reads the groups' index sizes from the manifest: it fans out when one task's cache holds a fraction", async () => {
    const lambdaLike = (cacheBytes: number) => ({
      ...inProcessInvoker(runtime),
      profile: {
        parallelism: 256,
        invokeMs: 15,
        maxPayloadBytes: 6 * 1024 * 1024,
        indexCacheBytes: cacheBytes,
        slots: 256,
      },
    });
    const request = {
      dataset: ds.uri,
      query: QUERIES[0] ?? [],
      k: 10,
      nprobes: 4,
      explain: true as const,
    };
    const roomy = await vectorSearch(request, { runtime, invoker: lambdaLike(1024 * 1024 * 1024) });
    expect(roomy.plan.tasks).toBe(1);
    // A cache of a few KiB holds under one segment of this index: every task reads from storage,
    // and the more groups, the fewer segments each reads.
    const tight = await vectorSearch(request, { runtime, invoker: lambdaLike(4096) });
    expect(tight.plan.tasks).toBe(ds.segments);
    expect(tight.plan.estimatedMs).toBeGreaterThan(roomy.plan.estimatedMs);
  });

  test("with refineFactor the answer does not depend on the plan and equals native's", async () => {
    const request = { dataset: ds.uri, query: QUERIES, k: 10, nprobes: 4, refineFactor: 5 };
    const native = await Promise.all(
      QUERIES.map((q) => nativeSearch(ds, q, 10, { nprobes: 4, refineFactor: 5 })),
    );
    const widths = [1, 2, 4, ds.segments];
    const answers = await Promise.all(
      widths.map((maxTasks) =>
        vectorSearch({ ...request, strategy: "segments", maxTasks }, { runtime }),
      ),
    );
    expect(answers.map((a) => a.plan.tasks)).toEqual(widths);
    for (const answer of answers) {
      expect(strip(answer)).toEqual(strip(answers[0] as SearchResponse));
      for (const [i, hits] of native.entries()) {
        const rows = answer.results.filter((r) => r._query_id === i);
        expect(rows.map((r) => [r._rowid, r._distance])).toEqual(
          hits.map((h) => [h.rowid, h.distance]),
        );
      }
    }
  });

  test("offset pages through the ranking", async () => {
    const request = { dataset: ds.uri, query: QUERIES.slice(0, 3), nprobes: 2 };
    const all = await vectorSearch({ ...request, k: 20 }, { runtime });
    const page = await vectorSearch({ ...request, k: 10, offset: 10 }, { runtime });
    const second = [0, 1, 2].flatMap((q) =>
      strip(all)
        .filter((r) => r._query_id === q)
        .slice(10, 20),
    );
    expect(strip(page)).toEqual(second);
  });

  test("the planner merges one group without select itself; otherwise the merge function runs", async () => {
    const base = inProcessInvoker(runtime);
    const merged: number[] = [];
    const counting = {
      ...base,
      merge: (input: Parameters<typeof base.merge>[0]) => {
        merged.push(input.candidates.length);
        return base.merge(input);
      },
    };
    const request = { dataset: ds.uri, query: QUERIES.slice(0, 4), k: 10, nprobes: 2 };
    const run = async (extra: object) => {
      merged.length = 0;
      const response = await vectorSearch({ ...request, ...extra }, { runtime, invoker: counting });
      return { response, merged: [...merged] };
    };
    const single = await run({ strategy: "single" });
    expect(single.merged).toEqual([]);
    for (const [i, q] of request.query.entries()) {
      const native = await nativeSearch({ ...ds, version: single.response.version }, q, 10, {
        nprobes: 2,
      });
      expect(single.response.results.filter((r) => r._query_id === i)).toEqual(
        native.map((h) => ({ _query_id: i, _distance: h.distance, _rowid: h.rowid })),
      );
    }
    // Query chunks of one group each merge one list: still no merge function.
    expect((await run({ strategy: "queries", maxTasks: 2 })).merged).toEqual([]);
    const fanned = await run({ strategy: "segments" });
    expect(fanned.merged).toEqual([fanned.response.plan.tasks]);
    expect(strip(fanned.response)).toEqual(strip(single.response));
    const selected = await run({ strategy: "single", select: ["id"] });
    expect(selected.merged).toEqual([1]);
    expect(strip(selected.response)).toEqual(strip(single.response));
  });

  test("explain answers the plan without searching or creating views", async () => {
    const fresh = await testRuntime();
    const plan = await vectorSearch(
      { dataset: ds.uri, query: QUERIES, k: 10, explain: true },
      { runtime: fresh },
    );
    expect(plan).not.toHaveProperty("results");
    expect(plan.plan.tasks).toBeGreaterThan(0);
    expect(plan.plan.estimatedMs).toBeGreaterThan(0);
    expect(await readdir(fresh.config.localViewRoot)).toEqual([]);
  });

  test("a plan says where its refine runs: nowhere, in its one task, or in the merge", async () => {
    const explain = async (extra: object) =>
      (
        await vectorSearch(
          { dataset: ds.uri, query: QUERIES, k: 10, explain: true, ...extra },
          { runtime },
        )
      ).plan;
    expect((await explain({ strategy: "segments" })).refine).toBe("none");
    const fanned = await explain({ strategy: "segments", refineFactor: 2 });
    expect([fanned.groups.length, fanned.refine]).toEqual([ds.segments, "merge"]);
    // Several groups were allowed, so one group refines as one native search does.
    const one = await explain({
      strategy: "auto",
      maxTasks: ds.segments,
      refineFactor: 2,
      query: [QUERIES[0]],
    });
    expect([one.groups.length, one.refine]).toEqual([1, "task"]);
  });

  test.each([
    ["", undefined],
    [" (refined in the merges)", 2],
  ])(
    "a large query matrix is merged in a tree of merges, never refused%s",
    async (_, refineFactor) => {
      const many = queries(300, 5);
      const request = {
        dataset: ds.uri,
        query: many,
        k: 50,
        strategy: "segments",
        refineFactor,
      } as const;
      const unlimited = await vectorSearch(request, { runtime });
      const merges: number[] = [];
      const base = inProcessInvoker(runtime);
      const small = {
        ...base,
        profile: { ...base.profile, maxPayloadBytes: 200_000 },
        merge: (input: Parameters<typeof base.merge>[0]) => {
          merges.push(input.queryCount);
          expect(Buffer.byteLength(JSON.stringify(input))).toBeLessThan(200_000);
          return base.merge(input);
        },
      };
      const tree = await vectorSearch(request, { runtime, invoker: small });
      expect(merges.length).toBeGreaterThan(1);
      expect(merges.reduce((a, b) => a + b, 0)).toBe(300);
      expect(strip(tree)).toEqual(strip(unlimited));
      expect(tree.results).toHaveLength(300 * 50);
    },
  );
});

describe("coverage of unindexed fragments", () => {
  test.each([
    ["one unindexed fragment", [1200]],
    ["several unindexed fragments", [700, 900, 300]],
  ])("fallback with %s equals native lancedb's default search", async (_, tails) => {
    const ds = await makeDataset({ rounds: [4000, 3000] });
    for (const rows of tails) {
      await ds.table.add(
        Array.from({ length: rows }, (_, i) => ({
          id: 900_000 + i,
          category: 1,
          "Cat Name": "t",
          vector: Array.from({ length: DIMENSION }, (_, d) => ((i * 31 + d * 7) % 97) / 97),
        })),
      );
    }
    const version = await ds.table.version();
    const runtime = await testRuntime();
    const request = {
      dataset: ds.uri,
      query: QUERIES.slice(0, 4),
      k: 10,
      nprobes: 4,
      refineFactor: 5,
    };
    await expect(
      vectorSearch({ ...request, coverage: "require" }, { runtime }),
    ).rejects.toMatchObject({ code: "INCOMPLETE_INDEX_COVERAGE" });
    const response = await vectorSearch({ ...request, coverage: "fallback" }, { runtime });
    expect(response.plan.groups.filter((g) => g.kind === "flat")).toHaveLength(1);
    // One index group beside the tail refines in its task, as native refines the index's
    // candidates only: the merge just merges, with no second read of the candidates' vectors.
    const base = inProcessInvoker(runtime);
    const refines: unknown[] = [];
    const single = await vectorSearch(
      { ...request, coverage: "fallback", strategy: "single" },
      {
        runtime,
        invoker: {
          ...base,
          merge: (input: Parameters<typeof base.merge>[0]) => {
            refines.push(input.refine);
            return base.merge(input);
          },
        },
      },
    );
    expect(refines).toEqual([undefined]);
    expect(strip(single)).toEqual(strip(response));
    for (const [i, q] of QUERIES.slice(0, 4).entries()) {
      const native = await nativeSearch({ ...ds, version }, q, 10, { nprobes: 4, refineFactor: 5 });
      expect(response.results.filter((r) => r._query_id === i).map((r) => r._rowid)).toEqual(
        native.map((h) => h.rowid),
      );
    }
    // Rows of the unindexed tail can win: they are really searched.
    const tail = Array.from({ length: DIMENSION }, (_, d) => ((5 * 31 + d * 7) % 97) / 97);
    const hit = await vectorSearch(
      { ...request, query: tail, coverage: "fallback", select: ["id"] },
      { runtime },
    );
    expect(hit.results[0]).toMatchObject({ id: 900_005, _distance: 0 });
  });

  test("fallback on a dataset with only unindexed fragments is an exact search", async () => {
    const ds = await makeDataset({ rounds: [] });
    await ds.table.dropIndex("vector_idx");
    const runtime = await testRuntime();
    const q = QUERIES[0] ?? [];
    await expect(
      vectorSearch({ dataset: ds.uri, query: q, k: 5, coverage: "require" }, { runtime }),
    ).rejects.toMatchObject({
      code: "INDEX_NOT_FOUND",
    });
    const response = await vectorSearch(
      { dataset: ds.uri, query: q, k: 5, coverage: "fallback" },
      { runtime },
    );
    expect(response.index.segmentCount).toBe(0);
    const exact = await nativeSearch({ ...ds, version: await ds.table.version() }, q, 5, {
      exact: true,
    });
    expect(response.results.map((r) => r._rowid)).toEqual(exact.map((h) => h.rowid));
  });

  test("without an index every strategy gives native's exact answer; segments fans out over fragments", async () => {
    const ds = await makeDataset({ rounds: [], unindexedRows: 1500 });
    await ds.table.add(
      Array.from({ length: 900 }, (_, i) => ({
        id: 800_000 + i,
        category: i % 10,
        "Cat Name": "n",
        vector: Array.from({ length: DIMENSION }, (_, d) => ((i * 17 + d * 3) % 89) / 89),
      })),
    );
    await ds.table.dropIndex("vector_idx");
    const version = await ds.table.version();
    const runtime = await testRuntime();
    const request = { dataset: ds.uri, query: QUERIES.slice(0, 3), k: 15, coverage: "fallback" };
    const native = await Promise.all(
      QUERIES.slice(0, 3).map((q) => nativeSearch({ ...ds, version }, q, 15)),
    );
    for (const strategy of ["single", "segments", "queries", "hybrid", "auto"] as const) {
      const response = await vectorSearch(
        { ...request, coverage: "fallback", strategy, maxTasks: 8 },
        { runtime },
      );
      for (const [i, hits] of native.entries()) {
        expect(response.results.filter((r) => r._query_id === i).map((r) => r._rowid)).toEqual(
          hits.map((h) => h.rowid),
        );
      }
      if (strategy === "segments") {
        expect(response.plan.groups.map((g) => g.kind)).toEqual(["flat", "flat", "flat"]);
        expect(response.plan.groups.reduce((sum, g) => sum + g.rows, 0)).toBe(
          await ds.table.countRows(),
        );
      }
    }
  });

  test("indexed-only skips unindexed fragments like fastSearch and says so", async () => {
    const ds = await makeDataset({ rounds: [4000], unindexedRows: 800 });
    const runtime = await testRuntime();
    const q = QUERIES[1] ?? [];
    const response = await vectorSearch(
      { dataset: ds.uri, query: q, k: 10, nprobes: 2, coverage: "indexed-only" },
      { runtime },
    );
    expect(response.partial).toBe(true);
    expect(response.unsearchedRows).toBe(800);
    const table = await (await lancedb.connect(ds.dir)).openTable("items");
    const fast = await table
      .vectorSearch(q)
      .nprobes(2)
      .fastSearch()
      .limit(10)
      .withRowId()
      .select(["_distance"])
      .toArray();
    expect(response.results.map((r) => r._rowid)).toEqual(fast.map((r) => String(r._rowid)));
  });
});
