/**
 * Writing an IVF_PQ vector index in a chosen number of segments through lancedb, whose
 * `optimize()` decides by itself whether new rows become a new delta segment.
 *
 * The rule in Lance 8 and 12 (@lancedb/lancedb 0.31 and 0.39, default optimize options), pinned by
 * test/index-segments.test.ts: `optimize()` indexes the rows added since the last one as one new
 * delta segment, unless some IVF partition, counting its rows in every segment plus the new rows
 * assigned to it, holds fewer than {@link JOIN_BELOW} rows (Lance joins it into its neighbours)
 * or more than {@link SPLIT_ABOVE} (Lance splits it in two). Either way Lance rewrites the index
 * as one segment: every delta is merged.
 *
 * While rows are only added, partitions only grow. So a build never merges if, once the index is
 * trained, no partition is under {@link JOIN_BELOW} ({@link settleIndex}: k-means sometimes
 * leaves a nearly empty partition, 7 of 96,000 rows seen) and the final rows are spread over
 * enough partitions that none passes {@link SPLIT_ABOVE} ({@link partitionsFor}).
 * {@link addSegment} checks every round anyway and throws rather than build fewer segments.
 * @module
 */
import type { Data, Table } from "@lancedb/lancedb";

/** A partition under this many rows is joined: 25% of IVF_PQ's 8,192-row target partition. */
export const JOIN_BELOW = 2_048;
/** A partition over this many rows is split: 4 x IVF_PQ's 8,192-row target partition. */
export const SPLIT_ABOVE = 32_768;
/**
 * Mean rows per partition a builder aims at, at most: a third of {@link SPLIT_ABOVE}. k-means'
 * largest partition held 1.1-1.5x the mean on the builders' data (clustered, with far more
 * clusters than partitions, or uniform; measured with 2 to 128 partitions).
 */
export const PARTITION_ROWS = Math.floor(SPLIT_ABOVE / 3);

/** optimize() merged the index's segments instead of adding one. */
export class SegmentMergeError extends Error {
  constructor(
    readonly before: number,
    readonly after: number,
  ) {
    super(
      `optimize() merged the vector index: ${before} segments before, ${after} after, ` +
        `expected ${before + 1}; an IVF partition went under ${JOIN_BELOW} or over ` +
        `${SPLIT_ABOVE} rows, and Lance then merges every segment`,
    );
    this.name = "SegmentMergeError";
  }
}

/** IVF partitions for an index that will end up holding `rows` rows. */
export function partitionsFor(rows: number): number {
  return Math.max(1, Math.ceil(rows / PARTITION_ROWS));
}

/** Segments of the index `indexName` (0 without one). */
export async function segmentCount(table: Table, indexName = "vector_idx"): Promise<number> {
  const index = (await table.listIndices()).find((i) => i.name === indexName);
  return index?.numSegments ?? 0;
}

/**
 * Lets Lance join every partition under {@link JOIN_BELOW} now, while the index is one segment,
 * so that no later round does it. `optimize()` without new rows joins one such partition per
 * call and commits nothing when there is none (and no fragments to compact), so this calls it
 * until the version stops moving (one join per call, so at most `partitions` + 2 calls).
 */
export async function settleIndex(table: Table, partitions: number): Promise<void> {
  for (let call = 0; call <= partitions + 1; call++) {
    const version = await table.version();
    await table.optimize();
    if ((await table.version()) === version) return;
  }
  throw new Error(`optimize() kept changing the index after ${partitions + 2} calls`);
}

/**
 * Appends `rows` and indexes them as one new delta segment. Returns the segment count; throws
 * {@link SegmentMergeError} when optimize() merged instead.
 */
export async function addSegment(
  table: Table,
  rows: Data,
  indexName = "vector_idx",
): Promise<number> {
  const before = await segmentCount(table, indexName);
  await table.add(rows);
  await table.optimize();
  const after = await segmentCount(table, indexName);
  if (after !== before + 1) throw new SegmentMergeError(before, after);
  return after;
}
