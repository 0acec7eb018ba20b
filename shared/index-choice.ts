/**
 * Chooses the vector index a request searches and lists its segments with their live coverage,
 * from one version's manifest. Pure: no I/O.
 * @module
 */
import { FanoutError } from "./errors.js";
import type { Manifest, ManifestField, ManifestFragment, ManifestSegment } from "./manifest.js";
import type { DistanceType } from "./request.js";
import type { FlatFragment, Segment } from "./units.js";

export interface IndexChoice {
  readonly name: string;
  readonly column: string;
  readonly dimension: number;
  readonly metric: DistanceType;
  /** Segments covering at least one live fragment, ordered by uuid. */
  readonly segments: readonly Segment[];
  /** Live fragments no segment covers, with their live and physical rows, ordered by id. */
  readonly unindexed: readonly FlatFragment[];
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
 *   `METRIC_MISMATCH`.
 */
export function chooseIndex(manifest: Manifest, request: IndexRequest): IndexChoice {
  const field = chooseColumn(manifest, request.column);
  const byName = new Map<string, ManifestSegment[]>();
  for (const s of manifest.segments) {
    if (s.fieldIds[0] !== field.id || s.metric === null) continue;
    byName.set(s.name, [...(byName.get(s.name) ?? []), s]);
  }
  const names = request.indexName ? [request.indexName] : [...byName.keys()];
  const chosen = names[0] === undefined ? undefined : byName.get(names[0]);
  if (!chosen && request.allowMissing && !request.indexName) {
    return {
      name: "",
      column: field.name,
      dimension: vectorDimension(field) ?? 0,
      metric: request.distanceType ?? "l2",
      ...coverage(manifest, []),
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
  const metric = indexMetric(chosen);
  if (request.distanceType && request.distanceType !== metric) {
    throw new FanoutError(
      "METRIC_MISMATCH",
      `index "${chosen[0]?.name}" uses ${metric} distance, the request asked for ${request.distanceType}`,
    );
  }
  return {
    name: chosen[0]?.name ?? "",
    column: field.name,
    dimension: vectorDimension(field) ?? 0,
    metric,
    ...coverage(manifest, chosen),
  };
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

function indexMetric(segments: readonly ManifestSegment[]): DistanceType {
  const metrics = new Set(segments.map((s) => s.metric));
  const [metric] = metrics;
  if (metrics.size !== 1 || (metric !== "l2" && metric !== "cosine" && metric !== "dot")) {
    throw new FanoutError("INVALID_REQUEST", `unsupported index metric(s): ${[...metrics]}`);
  }
  return metric;
}

/** Effective coverage (bitmap ∩ live fragments) of each segment, and the uncovered fragments. */
function coverage(manifest: Manifest, segments: readonly ManifestSegment[]) {
  const live = new Map(manifest.fragments.map((f) => [f.id, f]));
  const covered = new Set<number>();
  const result: Segment[] = [];
  const sum = (ids: readonly number[], rows: (f: ManifestFragment) => number) =>
    ids.reduce((total, id) => total + rows(live.get(id) as ManifestFragment), 0);
  for (const segment of segments) {
    if (segment.fragmentIds === null) {
      throw new FanoutError(
        "INTERNAL",
        `index segment ${segment.uuid} has no fragment bitmap (written by a Lance older than 0.8)`,
      );
    }
    const fragments = segment.fragmentIds.filter((id) => live.has(id));
    for (const id of fragments) covered.add(id);
    if (fragments.length > 0) {
      result.push({
        uuid: segment.uuid,
        created: segment.datasetVersion,
        fragments,
        rows: sum(fragments, (f) => f.liveRows),
        physicalRows: sum(fragments, (f) => f.physicalRows),
        indexBytes: segment.sizeBytes,
      });
    }
  }
  const unindexed = manifest.fragments
    .filter((f) => !covered.has(f.id) && f.liveRows > 0)
    .map((f) => ({ id: f.id, rows: f.liveRows, physicalRows: f.physicalRows }))
    .sort((a, b) => a.id - b.id);
  return {
    segments: result.sort((a, b) => (a.uuid < b.uuid ? -1 : a.uuid > b.uuid ? 1 : 0)),
    unindexed,
  };
}
