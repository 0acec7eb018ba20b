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
    config: lancedb.Index.ivfPq({
      numPartitions,
      numSubVectors: 4,
      distanceType: options.metric ?? "l2",
    }),
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
    const rows = await q.select(["_distance"]).toArray();
    return rows.map((r) => ({ rowid: String(r._rowid), distance: Number(r._distance) }));
  } finally {
    table.close();
  }
}
