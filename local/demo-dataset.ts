/**
 * Builds the demo dataset (`npm start`, `fanout make-dataset`): clustered synthetic vectors with
 * a scalar column, written through lancedb in rounds so that the vector index has exactly the
 * requested number of segments, of uneven size.
 * @module
 */

import * as lancedb from "@lancedb/lancedb";
import { FanoutError } from "../shared/errors.js";
import { addSegment, partitionsFor, segmentCount, settleIndex } from "./index-segments.js";
import { mulberry32 } from "./random.js";

export interface DemoDatasetOptions {
  /** Database URI, e.g. `s3://lance-fanout/demo` or a local directory. */
  readonly db: string;
  /** @default "demo" */
  readonly table?: string;
  readonly storageOptions?: Record<string, string>;
  /** Rows, exactly. @default 200_000 */
  readonly rows?: number;
  /** A multiple of 8 (one PQ sub-vector per 8 dimensions). @default 64 */
  readonly dimension?: number;
  /** Index segments, exactly: the base and `segments - 1` deltas. @default 8 */
  readonly segments?: number;
  /** @default 42 */
  readonly seed?: number;
  /** Called with a line of progress now and then. */
  readonly progress?: (line: string) => void;
  /**
   * A table of that name that is not this dataset (other rows, segments or dimension) is
   * dropped and built again; otherwise it is refused (it may be someone's data).
   * @default false
   */
  readonly overwrite?: boolean;
}

export interface DemoDataset {
  readonly uri: string;
  readonly rows: number;
  readonly segments: number;
  readonly version: number;
  /** Set when this call built the dataset; absent when it reused a finished one. */
  readonly build?: {
    readonly seconds: number;
    /** Index segments after each delta round: 2, 3, ... `segments`. */
    readonly segmentsPerRound: readonly number[];
  };
}

/**
 * Far more clusters than IVF partitions: k-means then gives every partition a similar share
 * (measured: 0.7-1.3x the mean), where 32 clusters gave 0.15-3.7x and pushed a partition over
 * Lance's split bound.
 */
const CLUSTERS = 4_096;
/** The base's share of the rows; the deltas share the rest by these weights, in turn. */
const BASE_SHARE = 0.3;
const DELTA_WEIGHTS = [3, 1, 4, 1, 5, 2, 6, 2, 3];
/** Rows IVF_PQ training needs at least (256 codes per sub-vector). */
const MIN_BASE_ROWS = 256;

/**
 * Opens the dataset if it is a finished build of these rows, segments and dimension; otherwise
 * (missing, interrupted, other options) builds it anew.
 */
export async function ensureDemoDataset(options: DemoDatasetOptions): Promise<DemoDataset> {
  const plan = planBuild(options);
  const name = options.table ?? "demo";
  const log = options.progress ?? (() => {});
  const db = await lancedb.connect(options.db, { storageOptions: options.storageOptions ?? {} });
  const table = await db.openTable(name).catch(() => undefined);
  if (table) {
    const existing = await describe(options.db, name, table);
    const dimension = await vectorDimension(table);
    table.close();
    if (
      existing.rows === plan.rows &&
      existing.segments === plan.sizes.length &&
      dimension === plan.dimension
    ) {
      return existing;
    }
    if (!options.overwrite) {
      throw new FanoutError(
        "INVALID_REQUEST",
        `${options.db} already has a table ${name} (${existing.rows} rows, ${existing.segments} ` +
          `segments, ${dimension}-d) that is not this dataset; overwrite it (--overwrite) to build it again`,
      );
    }
    log(
      `found ${name} with ${existing.rows} rows, ${existing.segments} segments, ${dimension}-d: ` +
        "rebuilding",
    );
    await db.dropTable(name);
  }
  return build(db, name, options, plan);
}

interface BuildPlan {
  readonly rows: number;
  readonly dimension: number;
  /** Rows of the base, then of each delta. */
  readonly sizes: readonly number[];
}

function planBuild(options: DemoDatasetOptions): BuildPlan {
  const { rows = 200_000, dimension = 64, segments = 8 } = options;
  if (!Number.isSafeInteger(rows) || rows < 1) {
    throw new RangeError(`rows must be a whole number >= 1, got ${rows}`);
  }
  if (!Number.isSafeInteger(segments) || segments < 1) {
    throw new RangeError(`segments must be a whole number >= 1, got ${segments}`);
  }
  if (!Number.isSafeInteger(dimension) || dimension < 8 || dimension % 8 !== 0) {
    throw new RangeError(`dimension must be a positive multiple of 8, got ${dimension}`);
  }
  const base = segments === 1 ? rows : Math.floor(rows * BASE_SHARE);
  const weights = Array.from({ length: segments - 1 }, (_, i) => DELTA_WEIGHTS[i % 9] ?? 1);
  const sum = weights.reduce((a, b) => a + b, 0);
  const deltas = weights.map((w) => Math.floor(((rows - base) * w) / sum));
  // The flooring leftovers go to the last delta, so the sizes add up to `rows` exactly.
  const leftover = rows - base - deltas.reduce((a, b) => a + b, 0);
  if (deltas.length > 0) deltas[deltas.length - 1] = (deltas.at(-1) ?? 0) + leftover;
  if (base < MIN_BASE_ROWS || deltas.some((n) => n < 1)) {
    throw new RangeError(
      `${rows} rows are too few for ${segments} segments: the base (${BASE_SHARE * 100}%) needs ` +
        `${MIN_BASE_ROWS} rows and each delta at least one`,
    );
  }
  return { rows, dimension, sizes: [base, ...deltas] };
}

async function build(
  db: lancedb.Connection,
  name: string,
  options: DemoDatasetOptions,
  plan: BuildPlan,
): Promise<DemoDataset> {
  const started = performance.now();
  const log = options.progress ?? (() => {});
  const [base = 0, ...deltas] = plan.sizes;
  const rows = rowSource(plan.dimension, options.seed ?? 42);
  const partitions = partitionsFor(plan.rows);
  log(`creating ${name}: ${base} rows x ${plan.dimension}-d`);
  const table = await db.createTable(name, rows(base));
  try {
    log(`training the IVF-PQ index (${partitions} partitions)`);
    await table.createIndex("vector", {
      config: lancedb.Index.ivfPq({ numPartitions: partitions, numSubVectors: plan.dimension / 8 }),
    });
    await settleIndex(table, partitions);
    const segmentsPerRound: number[] = [];
    for (const [i, size] of deltas.entries()) {
      segmentsPerRound.push(await addSegment(table, rows(size)));
      log(`round ${i + 1}/${deltas.length}: +${size} rows, ${segmentsPerRound.at(-1)} segments`);
    }
    const result = await describe(options.db, name, table);
    if (result.rows !== plan.rows || result.segments !== plan.sizes.length) {
      throw new Error(
        `built ${result.rows} rows in ${result.segments} segments, not ${plan.rows} in ${plan.sizes.length}`,
      );
    }
    const seconds = Math.round((performance.now() - started) / 100) / 10;
    log(`ready: ${result.rows} rows, ${result.segments} segments, version ${result.version}`);
    return { ...result, build: { seconds, segmentsPerRound } };
  } finally {
    table.close();
  }
}

/** Rows with consecutive ids: vectors around one of {@link CLUSTERS} seeded centres. */
function rowSource(dimension: number, seed: number) {
  const next = mulberry32(seed);
  const centres = Array.from({ length: CLUSTERS }, () => Array.from({ length: dimension }, next));
  let id = 0;
  return (n: number) =>
    Array.from({ length: n }, () => {
      const cluster = Math.floor(next() * CLUSTERS);
      const centre = centres[cluster] ?? [];
      const row = {
        id,
        category: id % 10,
        cluster,
        vector: centre.map((c) => c + (next() - 0.5) * 0.3),
      };
      id++;
      return row;
    });
}

async function describe(db: string, name: string, table: lancedb.Table): Promise<DemoDataset> {
  return {
    uri: `${db.replace(/\/+$/, "")}/${name}.lance`,
    rows: await table.countRows(),
    segments: await segmentCount(table),
    version: await table.version(),
  };
}

async function vectorDimension(table: lancedb.Table): Promise<number | undefined> {
  const field = (await table.schema()).fields.find((f) => f.name === "vector");
  return (field?.type as { listSize?: number } | undefined)?.listSize;
}
