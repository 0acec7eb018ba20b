/**
 * Reading a version as Lance does (shared/dataset-version.ts) and choosing its index: the
 * manifest's segments with Lance's metric and counts, rows counted once, and a refusal naming
 * the writer wherever the two disagree. Synthetic versions: the corpus test shows each case on
 * real datasets.
 */
import { describe, expect, test } from "vitest";
import { describeVersion, type LanceFacts } from "../shared/dataset-version.js";
import { FanoutError } from "../shared/errors.js";
import { groupSegments } from "../shared/grouping.js";
import { chooseIndex } from "../shared/index-choice.js";
import type { Manifest, ManifestFragment, ManifestSegment } from "../shared/manifest.js";

const fragment = (id: number, rows: number | null, deleted: number | null = 0) =>
  ({
    id,
    physicalRows: rows,
    deletedRows: deleted,
    files: [],
    content: `c${id}`.padEnd(32, "0"),
  }) satisfies ManifestFragment;

const segment = (uuid: string, fragments: number[] | null, over: Partial<ManifestSegment> = {}) =>
  ({
    uuid: uuid.padEnd(36, "0"),
    name: "vector_idx",
    fieldIds: [1],
    datasetVersion: 1,
    fragmentIds: fragments,
    typeUrl: "/lance.table.VectorIndexDetails",
    vector: true,
    metric: null,
    indexVersion: null,
    sizeBytes: null,
    files: [],
    ...over,
  }) satisfies ManifestSegment;

function manifest(fragments: ManifestFragment[], segments: ManifestSegment[]): Manifest {
  return {
    version: 4,
    writer: "lance 0.21.0",
    readerFeatureFlags: 0n,
    stableRowIds: false,
    fields: [
      { id: 0, parentId: -1, name: "id", logicalType: "int64" },
      { id: 1, parentId: -1, name: "vector", logicalType: "fixed_size_list:float:16" },
    ],
    schema: "0".repeat(32),
    fragments,
    segments,
    fragmentReuse: null,
  };
}

const listed = (
  over: Partial<LanceFacts["listed"][number]> = {},
): LanceFacts["listed"][number] => ({
  name: "vector_idx",
  type: "IvfPq",
  columns: ["vector"],
  metric: "l2",
  segments: 2,
  indexedRows: 544,
  unindexedRows: 0,
  ...over,
});

const facts = (over: Partial<LanceFacts> = {}): LanceFacts => ({
  listed: [listed()],
  scanner: new Map(),
  rows: new Map(),
  ...over,
});

/** pylance 0.21's overlapping delta: segment a covers {0}, segment b claims {0, 1}. */
const overlapping = manifest(
  [fragment(0, 256), fragment(1, 32)],
  [segment("a", [0]), segment("b", [0, 1], { datasetVersion: 3 })],
);

function refusal(fn: () => unknown): FanoutError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(FanoutError);
    return err as FanoutError;
  }
  throw new Error("expected a refusal");
}

describe("chooseIndex on a version read as Lance reads it", () => {
  test("a fragment two segments cover counts once, and both segments search it together", () => {
    const index = chooseIndex(describeVersion(overlapping, facts()), {});
    expect(index.indexedRows).toBe(288);
    expect(index.segments.map((s) => [s.fragments, s.rows])).toEqual([
      [[0], 256],
      [[0, 1], 32],
    ]);
    const [group, ...others] = groupSegments(index.segments, 8);
    expect(others).toEqual([]);
    expect(group).toMatchObject({ fragments: [0, 1], rows: 288 });
  });

  test("the metric and type are Lance's where the manifest names none", () => {
    const index = chooseIndex(describeVersion(overlapping, facts()), {});
    expect(index).toMatchObject({ metric: "l2", type: "IvfPq", segmentCount: 2 });
  });

  test("where the manifest's metric and Lance's differ, Lance's is searched", () => {
    const cosine = manifest(overlapping.fragments as ManifestFragment[], [
      segment("a", [0], { metric: "cosine" }),
      segment("b", [0, 1], { metric: "cosine", datasetVersion: 3 }),
    ]);
    expect(chooseIndex(describeVersion(cosine, facts()), {}).metric).toBe("l2");
  });

  test("an index lancedb does not list is read from the scanner's plan", () => {
    const scanner = new Map([
      ["vector", { name: "vector_idx", metric: "cosine" as const, segments: 2 }],
    ]);
    const read = describeVersion(overlapping, facts({ listed: [], scanner }));
    expect(chooseIndex(read, {})).toMatchObject({ metric: "cosine", type: null, segmentCount: 2 });
  });

  test("an index Lance names no metric for is refused, naming the writer", () => {
    const read = describeVersion(overlapping, facts({ listed: [] }));
    const error = refusal(() => chooseIndex(read, {}));
    expect(error.code).toBe("UNSUPPORTED_DATASET");
    expect(error.status).toBe(422);
    expect(error.message).toMatch(/written by lance 0\.21\.0: Lance reports no metric/);
  });

  test("where Lance counts the index otherwise than the manifest reads, the version is refused", () => {
    const drops = describeVersion(overlapping, facts({ listed: [listed({ segments: 1 })] }));
    expect(refusal(() => chooseIndex(drops, {})).message).toMatch(/segments 2 \(Lance: 1\)/);
    const remaps = describeVersion(overlapping, facts({ listed: [listed({ unindexedRows: 32 })] }));
    expect(refusal(() => chooseIndex(remaps, {})).message).toMatch(/unindexedRows 0 \(Lance: 32\)/);
  });

  test("a segment without fragment coverage (Lance before 0.8) is refused", () => {
    const old = manifest([fragment(0, 10)], [segment("a", null)]);
    const error = refusal(() => chooseIndex(describeVersion(old, facts({ listed: [] })), {}));
    expect(error.code).toBe("UNSUPPORTED_DATASET");
    expect(error.message).toMatch(/older than 0\.8/);
  });

  test("rows a manifest does not record are Lance's counts", () => {
    const legacy = manifest([fragment(0, null, 10), fragment(1, 5, null)], []);
    const rows = new Map([
      [0, 90],
      [1, 4],
    ]);
    const read = describeVersion(legacy, facts({ listed: [], rows }));
    expect(read.fragments.map((f) => [f.liveRows, f.physicalRows])).toEqual([
      [90, 100],
      [4, 5],
    ]);
    const flat = chooseIndex(read, { allowMissing: true });
    expect(flat.unindexed.map((f) => f.rows)).toEqual([90, 4]);
  });

  test("an index on another column or a scalar index is not a vector index of the column", () => {
    const scalar = segment("s", [0], { name: "id_idx", fieldIds: [0], vector: false });
    const read = describeVersion(manifest([fragment(0, 10)], [scalar]), facts({ listed: [] }));
    expect(read.indices).toEqual([]);
    expect(chooseIndex(read, { allowMissing: true }).name).toBe("");
  });
});
