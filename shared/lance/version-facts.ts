/**
 * What lancedb can tell about one version of a dataset, as Lance reads it: its vector indices
 * (type, metric, segments, indexed and unindexed rows), the index Lance's scanner searches on a
 * column, and the rows of fragments whose manifest entry does not record them. Lance is the
 * authority on what a dataset means; the manifest supplies only what lancedb does not expose
 * (shared/dataset-version.ts puts the two together).
 * @module
 */
import pLimit from "p-limit";
import type { IndexMetric } from "../manifest.js";
import type { Table } from "./connect.js";
import { refusesLegacyIndex } from "./errors.js";

/** One index as lancedb's `listIndices` reports it. */
export interface ListedIndex {
  readonly name: string;
  /** lancedb's index type, e.g. `IvfPq`, `IvfHnswSq`. */
  readonly type: string;
  readonly columns: readonly string[];
  /** From the details Lance read or inferred from the index files; null when it names none. */
  readonly metric: IndexMetric | null;
  readonly segments: number;
  /** Live rows of each segment's coverage, summed (a row two segments cover counts twice). */
  readonly indexedRows: number;
  readonly unindexedRows: number;
}

/** The vector index Lance's scanner searches on a column (`explainPlan`): its name, metric, segments. */
export interface ScannerIndex {
  readonly name: string;
  readonly metric: IndexMetric;
  /** Segments (deltas) it loads, with or without live coverage. */
  readonly segments: number;
}

const METRICS: Readonly<Record<string, IndexMetric>> = {
  l2: "l2",
  euclidean: "l2",
  cosine: "cosine",
  dot: "dot",
  hamming: "hamming",
};

function metricOf(name: unknown): IndexMetric | null {
  return typeof name === "string" ? (METRICS[name.toLowerCase()] ?? null) : null;
}

/**
 * The indices lancedb lists. It leaves out those whose type Lance cannot name (e.g. an
 * IVF_HNSW_SQ written by pylance 0.13, whose details Lance cannot infer): {@link scannerIndex}
 * still sees them. It lists none where an index predates Lance 0.8 (it cannot describe it).
 */
export async function listedIndices(table: Table): Promise<ListedIndex[]> {
  const indices = await table.listIndices().catch((err: unknown) => {
    if (refusesLegacyIndex(err)) return [];
    throw err;
  });
  return indices.map((index) => ({
    name: index.name,
    type: index.indexType,
    columns: index.columns,
    metric: metricOf((index.indexDetails as { metric_type?: unknown } | undefined)?.metric_type),
    segments: index.numSegments ?? 0,
    indexedRows: index.numIndexedRows ?? 0,
    unindexedRows: index.numUnindexedRows ?? 0,
  }));
}

/**
 * The index a vector search of `column` uses, as Lance plans it, or null when Lance would
 * search the column flat or cannot search its index (written before Lance 0.8). Planning
 * reads no data.
 */
export async function scannerIndex(
  table: Table,
  column: string,
  dimension: number,
): Promise<ScannerIndex | null> {
  const plan = await table
    .vectorSearch(new Float32Array(dimension))
    .column(column)
    .explainPlan()
    .catch((err: unknown) => {
      if (refusesLegacyIndex(err)) return "";
      throw err;
    });
  const ann = /ANNSubIndex: name=(.*), k=\d+, deltas=(\d+), metric=(\w+)/.exec(plan);
  const metric = metricOf(ann?.[3]);
  if (!ann?.[1] || !metric) return null;
  return { name: ann[1], metric, segments: Number(ann[2]) };
}

/** Fragments counted at once: each count is a small query. */
const COUNT_CONCURRENCY = 8;

/**
 * The live rows Lance counts in each of `ids` (from the data and deletion files where the
 * manifest does not record them: writers before 0.8).
 */
export async function fragmentRows(
  table: Table,
  ids: readonly number[],
): Promise<Map<number, number>> {
  const limit = pLimit(COUNT_CONCURRENCY);
  const counts = await Promise.all(
    ids.map((id) =>
      limit(async () => {
        const from = BigInt(id) << 32n;
        const to = BigInt(id + 1) << 32n;
        return [id, await table.countRows(`_rowaddr >= ${from} AND _rowaddr < ${to}`)] as const;
      }),
    ),
  );
  return new Map(counts);
}
