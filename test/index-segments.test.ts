/**
 * When lancedb's optimize() adds a delta segment and when it merges them all (Lance 8.0.0), and
 * the helpers every builder (demo, benchmark, test fixtures) uses to get exactly the segments it
 * promises.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as lancedb from "@lancedb/lancedb";
import { describe, expect, test } from "vitest";
import {
  addSegment,
  JOIN_BELOW,
  SegmentMergeError,
  SPLIT_ABOVE,
  segmentCount,
  settleIndex,
} from "../local/index-segments.js";
import { mulberry32 } from "../local/random.js";
import { makeDataset } from "./support/fixtures.js";

/**
 * A table whose two IVF partitions are exactly two far-apart clusters ("near" around 0 and "far"
 * around 100 in every coordinate), so the test knows every partition's row count.
 */
async function twoClusters(near: number, far: number) {
  const next = mulberry32(3);
  let id = 0;
  const rows = (n: number, at: number) =>
    Array.from({ length: n }, () => ({
      id: id++,
      vector: Array.from({ length: 16 }, () => at + next()),
    }));
  const db = await lancedb.connect(await mkdtemp(join(tmpdir(), "fanout-rule-")));
  const table = await db.createTable("t", [...rows(near, 0), ...rows(far, 100)]);
  await table.createIndex("vector", {
    config: lancedb.Index.ivfPq({ numPartitions: 2, numSubVectors: 2 }),
  });
  return { table, near: (n: number) => rows(n, 0), far: (n: number) => rows(n, 100) };
}

describe("Lance's rule: optimize() merges every segment when a partition leaves its bounds", () => {
  test("bounds are 2,048 and 32,768 rows per IVF_PQ partition", () => {
    expect([JOIN_BELOW, SPLIT_ABOVE]).toEqual([2_048, 32_768]);
  });

  // The bounds were measured to the row once (2,048 kept, 2,047 joined; 32,768 kept, 32,769
  // split), but near them the outcome varies between runs (k-means), so the tests keep a wide
  // margin on the side that merges: the rule, not the exact row, is what builders rely on.
  // On these two-partition tables Lance also merges now and then far from both bounds (1 test
  // run in 14 under vitest, 0 of 80 optimize() calls in a plain script), so a test gets two more
  // tries: a rule that no longer held would fail all three.
  test("a partition that stays over 2,048 rows gets a new segment", { retry: 2 }, async () => {
    // Below the bound Lance joins the partition most of the time, not always (measured: a
    // 1,100-row partition was kept in 1 of 8 runs), so only this side is asserted.
    const kept = await twoClusters(1_000, 5_000);
    expect(await addSegment(kept.table, kept.near(JOIN_BELOW - 1_000 + 300))).toBe(2);
  });

  test("a partition under 32,768 rows gets a new segment; one over it is split, merging all", {
    retry: 2,
  }, async () => {
    const { table, near, far } = await twoClusters(30_000, 5_000);
    expect(await addSegment(table, far(100))).toBe(2);
    expect(await addSegment(table, near(SPLIT_ABOVE - 30_000 - 300))).toBe(3);
    const error = await addSegment(table, near(10_000)).catch((e) => e);
    expect(error).toBeInstanceOf(SegmentMergeError);
    expect(error).toMatchObject({ before: 3, after: 1 });
    expect((error as Error).message).toMatch(/3 segments before, 1 after/);
  });
});

describe("settleIndex", () => {
  test("joins the partitions training left too small, so every later round adds a segment", async () => {
    const { table, far } = await twoClusters(500, 5_000);
    await settleIndex(table, 2);
    expect(await segmentCount(table)).toBe(1);
    expect(await addSegment(table, far(100))).toBe(2);
    expect(await addSegment(table, far(100))).toBe(3);
  });

  test("changes nothing when no partition is too small", async () => {
    const { table } = await twoClusters(3_000, 5_000);
    const version = await table.version();
    await settleIndex(table, 2);
    expect(await table.version()).toBe(version);
  });
});

describe("test fixtures", () => {
  test("makeDataset has one segment more than it has rounds, and all the rows", async () => {
    const ds = await makeDataset({ rounds: [4000, 1500, 6000, 2500] });
    expect(ds.segments).toBe(5);
    expect(await ds.table.countRows()).toBe(12_000 + 14_000);
  });
});
