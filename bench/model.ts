/**
 * Cost fit and the Lambda projection.
 *
 * Fit: the warm latency of one segment-search task measured alone, on local disk, as
 * `ms = a + queries * (b * rows + c * segments)` (least squares over every group shape the planner
 * made, with 1 and 8 queries per task).
 * `perSegment = c / b` rows is what shared/grouping.ts SEGMENT_COST wants.
 *
 * Projection (per query, k=10): latency = invokes + slowest task + S3 round trip, where
 * - task = a + b * rows/G + c * segments/G (the measured fit, extrapolated linearly in rows: an
 *   IVF search with fixed nprobes scans rows/partitions * nprobes rows; linear is pessimistic),
 * - invokes = planner, task and (G > 1 only: the planner merges one task itself) merge, each
 *   `invokeMs` (the planner's own Lambda assumption; not measurable here),
 * - cold adds `coldFixed + coldPerMillionRows * rows/G`: coldFixed = 10 sequential S3 round trips
 *   (open, versions, manifest, view check, index metadata, partitions, refine take), and the
 *   per-row part from the measured cold G=1 run (its penalty over warm in-process, minus coldFixed).
 * GB-seconds = G * task seconds * task memory + planner seconds * 1 GB, with task memory =
 * max(1 GB, 2 x the task's index and vector bytes / (1024^3)) rounded up to 0.5 GB (Lambda gives
 * CPU in proportion to memory; at least one vCPU needs 1.77 GB).
 * @module
 */
import { leastSquares, round } from "./stats.js";

export interface TaskPoint {
  readonly dataset: string;
  readonly rows: number;
  readonly segments: number;
  /** Query vectors in the task. @default 1 */
  readonly queries?: number;
  readonly dimension: number;
  readonly ms: number;
}

export interface TaskFit {
  readonly a: number;
  readonly perRowMs: number;
  readonly perSegmentMs: number;
  /** `SEGMENT_COST.perSegment` with `perRow: 1`. */
  readonly perSegmentRows: number;
  readonly points: number;
  readonly r2: number;
}

export function fitTasks(points: readonly TaskPoint[]): TaskFit {
  // ms = a + queries * (b * rows + c * segments): a task's fixed cost, then per query.
  const q = (p: TaskPoint) => p.queries ?? 1;
  const x = points.map((p) => [1, q(p) * p.rows, q(p) * p.segments]);
  const y = points.map((p) => p.ms);
  const [a = 0, b = 0, c = 0] = leastSquares(x, y);
  const mean = y.reduce((s, v) => s + v, 0) / Math.max(1, y.length);
  const ssTot = y.reduce((s, v) => s + (v - mean) ** 2, 0);
  const ssRes = points.reduce(
    (s, p) => s + (p.ms - (a + q(p) * (b * p.rows + c * p.segments))) ** 2,
    0,
  );
  return {
    a: round(a, 4),
    perRowMs: b,
    perSegmentMs: round(c, 4),
    perSegmentRows: b > 0 ? Math.round(c / b) : Number.POSITIVE_INFINITY,
    points: points.length,
    r2: round(ssTot > 0 ? 1 - ssRes / ssTot : 0, 3),
  };
}

export interface ProjectionInputs {
  readonly fit: TaskFit;
  /** One synchronous invoke on Lambda, ms (assumed: it cannot be measured here). */
  readonly invokeMs: number;
  /** Cold extra per task: fixed + per million rows in the task, ms (at the injected S3 latency). */
  readonly coldFixedMs: number;
  readonly coldPerMillionRowsMs: number;
  readonly s3LatencyMs: number;
  /**
   * Bytes per row a warm task holds: its prewarmed index (measured from the index files). The raw
   * vectors it refines from stay in S3: one parallel round of GETs per query (`s3LatencyMs`).
   */
  readonly bytesPerRow: number;
  /** Rows per index segment assumed for big datasets. */
  readonly rowsPerSegment: number;
}

export interface ProjectionRow {
  readonly rows: number;
  readonly segments: number;
  readonly width: number;
  readonly warmMs: number;
  readonly coldMs: number;
  readonly taskMemoryGB: number;
  readonly gbSecondsPerQuery: number;
}

export function project(inputs: ProjectionInputs, sizes: readonly number[]): ProjectionRow[] {
  const out: ProjectionRow[] = [];
  for (const rows of sizes) {
    const segments = Math.max(1, Math.ceil(rows / inputs.rowsPerSegment));
    const widths = [1, 10, 100, 1000].filter((g) => g <= segments);
    if (!widths.includes(segments) && segments <= 1000) widths.push(segments);
    for (const width of widths) {
      const taskRows = rows / width;
      const taskSegments = segments / width;
      const task =
        inputs.fit.a + inputs.fit.perRowMs * taskRows + inputs.fit.perSegmentMs * taskSegments;
      const invokes = width > 1 ? 3 : 2;
      const warmMs = invokes * inputs.invokeMs + task + inputs.s3LatencyMs;
      const coldMs = warmMs + inputs.coldFixedMs + (inputs.coldPerMillionRowsMs * taskRows) / 1e6;
      // 1 GB for the runtime and lancedb, plus twice the index (load and cache overheads).
      const memory = Math.ceil((1 + (2 * taskRows * inputs.bytesPerRow) / 2 ** 30) * 2) / 2;
      const taskMemoryGB = Math.min(10, memory);
      const gbSecondsPerQuery = width * (task / 1000) * taskMemoryGB + (warmMs / 1000) * 1;
      out.push({
        rows,
        segments,
        width,
        warmMs: round(warmMs, 1),
        coldMs: round(coldMs, 1),
        taskMemoryGB,
        gbSecondsPerQuery: round(gbSecondsPerQuery, 4),
      });
    }
  }
  return out;
}
