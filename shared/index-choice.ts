/**
 * Chooses the vector index a request searches and lists its segments with their live coverage,
 * from one version as Lance reads it (shared/dataset-version.ts). Pure: no I/O.
 * @module
 */
import type { DatasetVersion, Fragment, VersionIndex } from "./dataset-version.js";
import { FanoutError } from "./errors.js";
import type { Manifest, ManifestField } from "./manifest.js";
import type { DistanceType } from "./request.js";
import type { FlatFragment, Segment } from "./units.js";

export interface IndexChoice {
  readonly name: string;
  readonly column: string;
  readonly dimension: number;
  readonly metric: DistanceType;
  /** lancedb's type name of the index (e.g. `IvfPq`); null without one, or where lancedb does not list it. */
  readonly type: string | null;
  /** Segments of the index as Lance counts them, with or without live coverage. */
  readonly segmentCount: number;
  /** Segments covering at least one live fragment, ordered by uuid. */
  readonly segments: readonly Segment[];
  /** Live fragments no segment covers, with their live and physical rows, ordered by id. */
  readonly unindexed: readonly FlatFragment[];
  /** Live rows the index covers, each counted once. */
  readonly indexedRows: number;
}

export interface IndexRequest {
  readonly column?: string | undefined;
  readonly indexName?: string | undefined;
  readonly distanceType?: DistanceType | undefined;
  /** Without a vector index, answer a plan with no segments (every fragment unindexed). */
  readonly allowMissing?: boolean;
}

/**
 * @throws FanoutError `INVALID_REQUEST` (column), `INDEX_NOT_FOUND`, `AMBIGUOUS_INDEX`,
 *   `METRIC_MISMATCH`, `UNSUPPORTED_DATASET` (an index Lance reads otherwise than its manifest says).
 */
export function chooseIndex(version: DatasetVersion, request: IndexRequest): IndexChoice {
  const field = chooseColumn(version.manifest, request.column);
  const onColumn = version.indices.filter((i) => i.field.id === field.id);
  const names = request.indexName ? [request.indexName] : onColumn.map((i) => i.name);
  const chosen = onColumn.find((i) => i.name === names[0]);
  if (!chosen && request.allowMissing && !request.indexName) {
    return {
      name: "",
      column: field.name,
      dimension: vectorDimension(field) ?? 0,
      metric: request.distanceType ?? "l2",
      type: null,
      segmentCount: 0,
      ...coverage(version, undefined).choice,
    };
  }
  if (!chosen) {
    const which = request.indexName ? `named "${request.indexName}" ` : "";
    throw new FanoutError("INDEX_NOT_FOUND", `no vector index ${which}on column "${field.name}"`);
  }
  if (names.length > 1) {
    throw new FanoutError(
      "AMBIGUOUS_INDEX",
      `column "${field.name}" has several vector indices (${names.join(", ")}); set indexName`,
    );
  }
  const { choice: covered, coveredRows } = coverage(version, chosen);
  const metric = searchableMetric(chosen, version);
  if (request.distanceType && request.distanceType !== metric) {
    throw new FanoutError(
      "METRIC_MISMATCH",
      `index "${chosen.name}" uses ${metric} distance, the request asked for ${request.distanceType}`,
    );
  }
  checkAgainstLance(chosen, covered, coveredRows, version);
  return {
    name: chosen.name,
    column: field.name,
    dimension: vectorDimension(field) ?? 0,
    metric,
    type: chosen.type,
    segmentCount: chosen.lance?.segments ?? chosen.segments.length,
    ...covered,
  };
}

/** An index this service cannot search: `UNSUPPORTED_DATASET`, naming what and who wrote it. */
function unsupported(version: DatasetVersion, what: string): FanoutError {
  const writer = version.writer ?? "a writer that did not record its version";
  return new FanoutError(
    "UNSUPPORTED_DATASET",
    `version ${version.version}, written by ${writer}: ${what}`,
    { details: { writer: version.writer, version: version.version } },
  );
}

function searchableMetric(index: VersionIndex, version: DatasetVersion): DistanceType {
  const { metric } = index;
  if (metric === "l2" || metric === "cosine" || metric === "dot") return metric;
  throw unsupported(
    version,
    metric === null
      ? `Lance reports no metric for index "${index.name}" (it would not search it)`
      : `index "${index.name}" uses ${metric} distance, which lance-fanout does not search`,
  );
}

/**
 * Where Lance counts the index otherwise than its manifest reads (segments it drops, coverage
 * it remaps), the plan would search other rows than a native search: refuse it.
 */
function checkAgainstLance(
  index: VersionIndex,
  covered: Coverage,
  coveredRows: number,
  version: DatasetVersion,
): void {
  const lance = index.lance;
  if (!lance) return;
  const unindexed = covered.unindexed.reduce((sum, f) => sum + f.rows, 0);
  const ours = {
    segments: index.segments.length,
    indexedRows: lance.indexedRows === undefined ? undefined : coveredRows,
    unindexedRows: lance.unindexedRows === undefined ? undefined : unindexed,
  };
  const differ = (Object.keys(ours) as (keyof typeof ours)[]).filter(
    (key) => ours[key] !== lance[key],
  );
  if (differ.length === 0) return;
  const what = differ.map((key) => `${key} ${ours[key]} (Lance: ${lance[key]})`).join(", ");
  throw unsupported(version, `index "${index.name}" reads otherwise than Lance reads it: ${what}`);
}

/** The error of `coverage: "require"` when some live fragments are not indexed. */
export function incompleteCoverage(index: IndexChoice): FanoutError {
  const rows = index.unindexed.reduce((sum, f) => sum + f.rows, 0);
  return new FanoutError(
    "INCOMPLETE_INDEX_COVERAGE",
    `${index.unindexed.length} fragment(s) with ${rows} live rows are not covered by index ` +
      `"${index.name}": ${index.unindexed.map((f) => `${f.id} (${f.rows} rows)`).join(", ")}; ` +
      `set coverage to "fallback" to search them exactly or "indexed-only" to skip them`,
    { details: { fragments: index.unindexed.map(({ id, rows }) => ({ id, rows })) } },
  );
}

function chooseColumn(manifest: Manifest, column: string | undefined): ManifestField {
  const topLevel = manifest.fields.filter((f) => f.parentId === -1);
  if (column !== undefined) {
    const field = topLevel.find((f) => f.name === column);
    if (!field) throw new FanoutError("INVALID_REQUEST", `column "${column}" does not exist`);
    if (vectorDimension(field) === undefined) {
      throw new FanoutError("INVALID_REQUEST", `column "${column}" is not a float vector column`);
    }
    return field;
  }
  const vectors = topLevel.filter((f) => vectorDimension(f) !== undefined);
  if (vectors.length === 1 && vectors[0]) return vectors[0];
  throw new FanoutError(
    "INVALID_REQUEST",
    vectors.length === 0
      ? "the dataset has no float vector column"
      : `the dataset has several vector columns (${vectors.map((f) => f.name).join(", ")}); set column`,
  );
}

/** The dimension of a `fixed_size_list:<float type>:<n>` column, or undefined for other types. */
export function vectorDimension(field: ManifestField): number | undefined {
  const match = /^fixed_size_list:(float|halffloat|double):(\d+)$/.exec(field.logicalType);
  return match ? Number(match[2]) : undefined;
}

type Coverage = Pick<IndexChoice, "segments" | "unindexed" | "indexedRows">;

/**
 * Effective coverage (bitmap ∩ live fragments) of each segment, and the uncovered fragments.
 * A fragment two segments cover (an old writer's overlapping bitmaps) is searched by both, as
 * in a native search, but its rows count once: for the older segment. `coveredRows` sums each
 * segment's live coverage, as Lance counts indexed rows.
 */
function coverage(
  version: DatasetVersion,
  index: VersionIndex | undefined,
): { choice: Coverage; coveredRows: number } {
  const live = new Map(version.fragments.map((f) => [f.id, f]));
  const counted = new Set<number>();
  const covered = new Set<number>();
  const result: Segment[] = [];
  let coveredRows = 0;
  const creation = [...(index?.segments ?? [])].sort(
    (a, b) => a.datasetVersion - b.datasetVersion || (a.uuid < b.uuid ? -1 : 1),
  );
  for (const segment of creation) {
    if (segment.fragmentIds === null) {
      throw unsupported(
        version,
        `index segment ${segment.uuid} records no fragments (written by a Lance older than 0.8); ` +
          "Lance cannot search it either: rebuild the index with a current Lance",
      );
    }
    const fragments = segment.fragmentIds.filter((id) => live.has(id));
    const own = fragments.filter((id) => !counted.has(id)).map((id) => live.get(id) as Fragment);
    for (const id of fragments) covered.add(id);
    for (const f of own) counted.add(f.id);
    coveredRows += fragments.reduce((sum, id) => sum + (live.get(id) as Fragment).liveRows, 0);
    if (fragments.length > 0) {
      result.push({
        uuid: segment.uuid,
        created: segment.datasetVersion,
        fragments,
        rows: own.reduce((sum, f) => sum + f.liveRows, 0),
        physicalRows: own.reduce((sum, f) => sum + f.physicalRows, 0),
        indexBytes: segment.sizeBytes,
      });
    }
  }
  const unindexed = version.fragments
    .filter((f) => !covered.has(f.id) && f.liveRows > 0)
    .map((f) => ({ id: f.id, rows: f.liveRows, physicalRows: f.physicalRows }))
    .sort((a, b) => a.id - b.id);
  return {
    choice: {
      segments: result.sort((a, b) => (a.uuid < b.uuid ? -1 : a.uuid > b.uuid ? 1 : 0)),
      unindexed,
      indexedRows: result.reduce((sum, s) => sum + s.rows, 0),
    },
    coveredRows,
  };
}
