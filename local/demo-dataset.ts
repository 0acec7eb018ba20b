/**
 * Builds the demo (and benchmark) datasets: clustered synthetic vectors with a scalar column,
 * written through lancedb in rounds so the vector index ends up with several uneven segments.
 * @module
 */
import * as lancedb from "@lancedb/lancedb";
import { mulberry32 } from "./random.js";

export interface DemoDatasetOptions {
  /** Database URI, e.g. `s3://lance-fanout/demo` or a local directory. */
  readonly db: string;
  readonly table?: string;
  readonly storageOptions?: Record<string, string>;
  /** @default 200_000 */
  readonly rows?: number;
  /** @default 64 */
  readonly dimension?: number;
  /** Index segments to reach at least. @default 8 */
  readonly segments?: number;
  readonly seed?: number;
  /** Called with a line of progress now and then. */
  readonly progress?: (line: string) => void;
}

export interface DemoDataset {
  readonly uri: string;
  readonly rows: number;
  readonly segments: number;
  readonly version: number;
}

const CLUSTERS = 32;

/** Opens the dataset if it already has enough rows and segments, else builds it anew. */
export async function ensureDemoDataset(options: DemoDatasetOptions): Promise<DemoDataset> {
  const name = options.table ?? "demo";
  const db = await lancedb.connect(options.db, { storageOptions: options.storageOptions ?? {} });
  const table = await db.openTable(name).catch(() => undefined);
  if (table) {
    const existing = await describe(options.db, name, table);
    table.close();
    if (
      existing.rows >= (options.rows ?? 200_000) &&
      existing.segments >= (options.segments ?? 8)
    ) {
      return existing;
    }
    await db.dropTable(name);
  }
  return build(db, name, options);
}

async function build(db: lancedb.Connection, name: string, options: DemoDatasetOptions) {
  const total = options.rows ?? 200_000;
  const dimension = options.dimension ?? 64;
  const wanted = options.segments ?? 8;
  const log = options.progress ?? (() => {});
  const next = mulberry32(options.seed ?? 42);
  const centres = Array.from({ length: CLUSTERS }, () => Array.from({ length: dimension }, next));
  let id = 0;
  // Uniform rows make Lance start a new index segment on optimize(); clustered ones may be
  // merged into the existing segment.
  const rows = (n: number, uniform = false) =>
    Array.from({ length: n }, () => {
      const cluster = Math.floor(next() * CLUSTERS);
      const centre = centres[cluster] ?? [];
      const row = {
        id,
        category: id % 10,
        cluster: uniform ? -1 : cluster,
        vector: uniform ? centre.map(() => next()) : centre.map((c) => c + (next() - 0.5) * 0.3),
      };
      id++;
      return row;
    });
  // Uneven rounds: a large base, then deltas of varying size, one segment per optimize.
  const base = Math.floor(total * 0.3);
  const weights = [3, 1, 4, 1, 5, 2, 6, 2, 3];
  const rest = total - base;
  const sum = weights.reduce((a, b) => a + b, 0);
  const sizes = weights.map((w) => Math.floor((rest * w) / sum));
  log(`creating ${name}: ${base} rows x ${dimension}-d`);
  const table = await db.createTable(name, rows(base));
  log("training the IVF-PQ index");
  await table.createIndex("vector", {
    // Lance merges new rows into the existing segment while its partitions are small (measured:
    // ~500 rows per partition never made a delta, ~5,000 did): size partitions accordingly.
    config: lancedb.Index.ivfPq({
      numPartitions: Math.max(2, Math.round(base / 5000)),
      numSubVectors: dimension / 8,
    }),
  });
  for (const [i, size] of sizes.entries()) {
    await table.add(rows(size));
    await table.optimize();
    const segments = (await table.listIndices())[0]?.numSegments ?? 0;
    log(`round ${i + 1}/${sizes.length}: ${await table.countRows()} rows, ${segments} segments`);
  }
  for (let extra = 0; ((await table.listIndices())[0]?.numSegments ?? 0) < wanted; extra++) {
    if (extra >= 8) throw new Error(`could not reach ${wanted} index segments`);
    await table.add(rows(Math.max(1000, Math.floor(rest / sum)), true));
    await table.optimize();
  }
  const result = await describe(options.db, name, table);
  log(`ready: ${result.rows} rows, ${result.segments} segments, version ${result.version}`);
  table.close();
  return result;
}

async function describe(db: string, name: string, table: lancedb.Table): Promise<DemoDataset> {
  return {
    uri: `${db.replace(/\/+$/, "")}/${name}.lance`,
    rows: await table.countRows(),
    segments: (await table.listIndices())[0]?.numSegments ?? 0,
    version: await table.version(),
  };
}
