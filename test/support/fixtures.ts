/**
 * Real multi-segment Lance datasets for tests, built with lancedb itself.
 */
import { mkdtemp } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as lancedb from "@lancedb/lancedb";
import { addSegment, settleIndex } from "../../local/index-segments.js";
import { mulberry32 } from "../../local/random.js";
import { loadConfig } from "../../shared/config.js";
import { createRuntime, type Runtime } from "../../shared/index.js";

// lancedb is CommonJS: build Arrow types from the same Arrow instance it uses.
const arrow = createRequire(import.meta.url)("apache-arrow") as typeof import("apache-arrow");

export const DIMENSION = 16;

export const random = mulberry32;

export interface DatasetOptions {
  readonly seed?: number;
  /**
   * Rows indexed by createIndex. 12,000 over 4 partitions keeps every partition well above the
   * 2,048 rows under which Lance would join it (local/index-segments.ts). @default 12_000
   */
  readonly initialRows?: number;
  /** Rows added per round; each round adds exactly one index segment (or makeDataset throws). */
  readonly rounds?: readonly number[];
  /** A SQL predicate deleted after the last round. */
  readonly deleteWhere?: string;
  readonly stableRowIds?: boolean;
  readonly metric?: "l2" | "cosine" | "dot";
  readonly numPartitions?: number;
  /** The vector index type. @default "ivfPq" */
  readonly index?: IndexType;
  /** Rows appended after the last optimize(): an unindexed fragment. */
  readonly unindexedRows?: number;
  /** Every `tiedEvery`-th row gets `tiedVector` (ties across segments); the rest are random. */
  readonly tiedVector?: number[];
  readonly tiedEvery?: number;
  /** Rename the vector column after indexing (lancedb cannot index a mixed-case name). */
  readonly vectorColumn?: string;
  /** A database URI (e.g. `s3://bucket/db`) and its storage options. @default a temp directory */
  readonly db?: { readonly uri: string; readonly storageOptions: Record<string, string> };
}

/** Every vector index type lancedb 0.31 builds. */
export const INDEX_TYPES = ["ivfPq", "ivfFlat", "ivfRq", "hnswPq", "hnswSq"] as const;
export type IndexType = (typeof INDEX_TYPES)[number];

function indexConfig(type: IndexType, partitions: number, metric: "l2" | "cosine" | "dot") {
  const pq = { numSubVectors: 4 };
  // A small graph, one partition: an HNSW partition is "small" below 262,144 rows (25% of its
  // 1 << 20 target), and with several Lance joins one and merges every delta on optimize()
  // (local/index-segments.ts); with one there is nothing to join it into.
  const hnsw = { m: 8, efConstruction: 40, numPartitions: 1 };
  switch (type) {
    case "ivfPq":
      return lancedb.Index.ivfPq({ numPartitions: partitions, distanceType: metric, ...pq });
    case "ivfFlat":
      return lancedb.Index.ivfFlat({ numPartitions: partitions, distanceType: metric });
    case "ivfRq":
      return lancedb.Index.ivfRq({ numPartitions: partitions, distanceType: metric });
    case "hnswPq":
      return lancedb.Index.hnswPq({ distanceType: metric, ...pq, ...hnsw });
    case "hnswSq":
      return lancedb.Index.hnswSq({ distanceType: metric, ...hnsw });
  }
}

export interface Dataset {
  readonly uri: string;
  readonly dir: string;
  readonly table: lancedb.Table;
  readonly version: number;
  readonly segments: number;
  readonly vectorColumn: string;
  readonly storageOptions: Record<string, string>;
}

export async function makeDataset(options: DatasetOptions = {}): Promise<Dataset> {
  const dir = options.db?.uri ?? (await mkdtemp(join(tmpdir(), "fanout-ds-")));
  const storageOptions = options.db?.storageOptions ?? {};
  const next = random(options.seed ?? 1);
  let id = 0;
  const rows = (n: number) =>
    Array.from({ length: n }, () => {
      const row = {
        id: id,
        category: id % 10,
        "Cat Name": `c${id % 3}`,
        vector:
          options.tiedVector && id % (options.tiedEvery ?? 1) === 0
            ? options.tiedVector
            : Array.from({ length: DIMENSION }, () => next()),
      };
      id++;
      return row;
    });
  const data = (n: number) =>
    lancedb.makeArrowTable(rows(n), {
      vectorColumns: { vector: { type: new arrow.Float32() } },
    });
  const db = await lancedb.connect(dir, { storageOptions });
  const table = await db.createTable("items", data(options.initialRows ?? 12_000), {
    storageOptions: options.stableRowIds ? { new_table_enable_stable_row_ids: "true" } : {},
  });
  const numPartitions = options.numPartitions ?? 4;
  await table.createIndex("vector", {
    config: indexConfig(options.index ?? "ivfPq", numPartitions, options.metric ?? "l2"),
  });
  await settleIndex(table, numPartitions);
  for (const n of options.rounds ?? [4000, 1500, 6000, 2500]) await addSegment(table, data(n));
  if (options.deleteWhere) await table.delete(options.deleteWhere);
  if (options.unindexedRows) await table.add(data(options.unindexedRows));
  if (options.vectorColumn) {
    await table.alterColumns([{ path: "vector", rename: options.vectorColumn }]);
  }
  const segments = (await table.listIndices())[0]?.numSegments ?? 0;
  return {
    uri: `${dir}/items.lance`,
    dir,
    table,
    version: await table.version(),
    segments,
    vectorColumn: options.vectorColumn ?? "vector",
    storageOptions,
  };
}

/** A runtime with its own view directory, so tests do not share views. */
export async function testRuntime(env: Record<string, string> = {}): Promise<Runtime> {
  const views = await mkdtemp(join(tmpdir(), "fanout-views-"));
  return createRuntime(loadConfig({ ...process.env, LANCE_FANOUT_VIEW_ROOT: views, ...env }));
}

/** Query vectors from the same distribution as the data. */
export function queries(count: number, seed = 99): number[][] {
  const next = random(seed);
  return Array.from({ length: count }, () => Array.from({ length: DIMENSION }, () => next()));
}

export interface NativeHit {
  readonly rowid: string;
  readonly distance: number;
  /** With `select` only: those columns of the row, by name. */
  readonly columns?: Readonly<Record<string, unknown>>;
}

/** Native lancedb top-k for one query on the dataset at `version`. */
export async function nativeSearch(
  dataset: Dataset,
  query: number[],
  k: number,
  options: {
    version?: number;
    nprobes?: number;
    refineFactor?: number;
    filter?: string;
    exact?: boolean;
    select?: readonly string[];
  } = {},
): Promise<NativeHit[]> {
  const db = await lancedb.connect(dataset.dir, { storageOptions: dataset.storageOptions });
  const table = await db.openTable("items");
  try {
    await table.checkout(options.version ?? dataset.version);
    let q = table.vectorSearch(query).column(dataset.vectorColumn).limit(k).withRowId();
    if (options.nprobes) q = q.nprobes(options.nprobes);
    if (options.refineFactor) q = q.refineFactor(options.refineFactor);
    if (options.filter) q = q.where(options.filter);
    if (options.exact) q = q.bypassVectorIndex();
    const { select } = options;
    const rows = await q.select(["_distance", ...(select ?? [])]).toArray();
    return rows.map((r) => ({
      rowid: String(r._rowid),
      distance: Number(r._distance),
      ...(select ? { columns: Object.fromEntries(select.map((name) => [name, r[name]])) } : {}),
    }));
  } finally {
    table.close();
  }
}

/** The columns of {@link makeTypedDataset} besides `vector`, one per kind of Arrow type. */
export const TYPED_COLUMNS = ["id", "big", "label", "score", "flag", "at", "day", "counts"];

/**
 * A dataset whose columns JSON cannot carry by itself: 64-bit integers past 2^53, a `Uint64`
 * near 2^64, microsecond timestamps with sub-millisecond parts, nulls, a list of `Int64`, and
 * the indexed `FixedSizeList<Float32>` vector. Built from Arrow data directly,
 * since lancedb's row conversion would infer other types.
 */
export async function makeTypedDataset(
  options: Pick<DatasetOptions, "db" | "seed"> = {},
): Promise<Dataset> {
  const dir = options.db?.uri ?? (await mkdtemp(join(tmpdir(), "fanout-typed-")));
  const storageOptions = options.db?.storageOptions ?? {};
  const next = random(options.seed ?? 7);
  const a = arrow;
  const schema = new a.Schema([
    new a.Field(
      "vector",
      new a.FixedSizeList(DIMENSION, new a.Field("item", new a.Float32(), true)),
      false,
    ),
    new a.Field("id", new a.Int64(), false),
    new a.Field("big", new a.Uint64(), true),
    new a.Field("label", new a.Utf8(), true),
    new a.Field("score", new a.Float32(), false),
    new a.Field("flag", new a.Bool(), true),
    new a.Field("at", new a.TimestampMicrosecond("UTC"), true),
    new a.Field("day", new a.DateDay(), false),
    new a.Field("counts", new a.List(new a.Field("item", new a.Int64(), true)), true),
  ]);
  let row = 0;
  const batch = (n: number) => {
    const ids = Array.from({ length: n }, () => row++);
    const column = (type: import("apache-arrow").DataType, values: unknown[]) =>
      a.vectorFromArray(values, type).data[0] as import("apache-arrow").Data;
    // Arrow's timestamp builder takes milliseconds as floats: build microseconds as Int64.
    const micros = column(
      new a.Int64(),
      ids.map((i) => (i % 5 === 0 ? null : 1_700_000_000_000_000n + BigInt(i) * 1_234_567n)),
    );
    const at = a.makeData({
      type: new a.TimestampMicrosecond("UTC"),
      length: n,
      nullCount: micros.nullCount,
      nullBitmap: micros.nullBitmap,
      data: micros.values,
    });
    const children = [
      column(
        schema.fields[0]?.type as import("apache-arrow").DataType,
        ids.map(() => Array.from({ length: DIMENSION }, () => next())),
      ),
      column(
        new a.Int64(),
        ids.map((i) => 2n ** 53n + BigInt(i)),
      ),
      column(
        new a.Uint64(),
        ids.map((i) => (i % 7 === 0 ? null : 2n ** 64n - 1n - BigInt(i))),
      ),
      column(
        new a.Utf8(),
        ids.map((i) => (i % 3 === 0 ? null : `label ${i % 11}`)),
      ),
      column(
        new a.Float32(),
        ids.map(() => next() * 100),
      ),
      column(
        new a.Bool(),
        ids.map((i) => (i % 4 === 0 ? null : i % 2 === 0)),
      ),
      at,
      column(
        new a.DateDay(),
        ids.map((i) => Date.UTC(2024, 0, 1 + (i % 400))),
      ),
      column(
        schema.fields[8]?.type as import("apache-arrow").DataType,
        ids.map((i) => (i % 6 === 0 ? null : [BigInt(i), -(2n ** 62n)])),
      ),
    ];
    const struct = a.makeData({ type: new a.Struct(schema.fields), length: n, children });
    return new a.Table([new a.RecordBatch(schema, struct)]);
  };
  const db = await lancedb.connect(dir, { storageOptions });
  const table = await db.createTable("items", batch(1200));
  await table.createIndex("vector", {
    config: lancedb.Index.ivfPq({ numPartitions: 2, numSubVectors: 4 }),
  });
  await table.add(batch(800));
  await table.optimize();
  return {
    uri: `${dir}/items.lance`,
    dir,
    table,
    version: await table.version(),
    segments: (await table.listIndices())[0]?.numSegments ?? 0,
    vectorColumn: "vector",
    storageOptions,
  };
}
