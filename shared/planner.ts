/**
 * The planner: pins a version, reads it as Lance does, chooses the index, checks the request against
 * the schema, and splits the work into groups x query chunks.
 * @module
 */
import { encodeVectors } from "./codec.js";
import { FanoutError } from "./errors.js";
import { type Group, groupFragments, groupSegments, segmentCost } from "./grouping.js";
import { chooseIndex, type IndexChoice, incompleteCoverage } from "./index-choice.js";
import { checkFilterWithLance } from "./lance/filters.js";
import type { Writer } from "./manifest.js";
import { planReason } from "./plan-reason.js";
import type { Coverage, ValidSearchRequest } from "./request.js";
import type { Runtime } from "./runtime.js";
import {
  cachedPerFileByte,
  DEFAULT_NPROBES,
  type ExecutionProfile,
  type Split,
  type SplitInput,
  splitWork,
} from "./strategy.js";
import type { SegmentTask } from "./tasks.js";
import type { FlatFragment } from "./units.js";
import {
  groupFieldsOf,
  type PinnedVersion,
  pinnedVersion,
  viewSpecOfGroup,
} from "./views/identity.js";

/** A group of the plan: index segments searched through the index, or unindexed fragments searched flat. */
export interface PlannedGroup extends Group {
  readonly kind: "index" | "flat";
}

export interface SearchPlan {
  /** The version every task and merge reads, and what names its views. */
  readonly pinned: PinnedVersion;
  /** Who wrote the pinned version, e.g. `lance 0.21.0`; null when its manifest does not say. */
  readonly writer: Writer | null;
  readonly index: IndexChoice;
  readonly strategy: "single" | "segments" | "queries" | "hybrid";
  readonly groups: readonly PlannedGroup[];
  /** Query ranges `[start, end)`; every group is searched once per chunk. */
  readonly chunks: readonly (readonly [number, number])[];
  readonly estimatedMs: number;
  /** Why the plan has this shape, in words (see shared/plan-reason.ts). */
  readonly reason: string;
  /** Every plan the cost model weighed. */
  readonly considered: Split["considered"];
  /** Live rows left out (coverage "indexed-only"); 0 when the answer covers every row. */
  readonly unsearchedRows: number;
  /** Where index candidates get exact distances, if anywhere (see {@link refinePlacement}). */
  readonly refine: Refine | undefined;
  readonly limits: Limits;
}

/** Candidates per query at each step, computed once per plan (see {@link limitsOf}). */
export interface Limits {
  /** Ranks each query's answer keeps before its offset is dropped: k + offset. */
  readonly results: number;
  /**
   * What an index task answers per query: `results`, times the refine factor when the merge
   * refines (each task's share of the global top candidates); also what the merge re-scores.
   */
  readonly indexTask: number;
}

/**
 * The limits of `request`. `most` is what an index task may answer whatever the refine's
 * placement: the cost model's bound before the groups are known.
 */
export function limitsOf(request: ValidSearchRequest, refine?: Refine): Limits & { most: number } {
  const results = request.k + (request.offset ?? 0);
  const most = results * (request.refineFactor ?? 1);
  return {
    results,
    most,
    indexTask: refine?.where === "merge" ? results * refine.factor : results,
  };
}

/**
 * Lance's refine step: the top (k + offset) × factor candidates by index distance over every
 * segment get exact distances. A task that alone sees every indexed row of its queries may do it
 * as native Lance would (see {@link refinePlacement}); otherwise the merge does it once on the
 * global candidates, so the answer does not depend on how the segments were grouped.
 */
export interface Refine {
  readonly where: "task" | "merge";
  readonly factor: number;
}

export async function plan(
  request: ValidSearchRequest,
  runtime: Runtime,
  profile: ExecutionProfile,
): Promise<SearchPlan> {
  const location = runtime.resolveDataset(request.dataset);
  const version = request.version ?? (await runtime.tables.latestVersion(location));
  const read = await runtime.versions.read(location, version);
  const coverage = request.coverage ?? runtime.config.coverage;
  const index = chooseIndex(read, { ...request, allowMissing: coverage === "fallback" });
  if (index.unindexed.length > 0 && coverage === "require") throw incompleteCoverage(index);
  const dimension = request.queries[0]?.length;
  if (dimension !== index.dimension) {
    throw new FanoutError(
      "INVALID_REQUEST",
      `query: vectors have dimension ${dimension}, column "${index.column}" has ${index.dimension}`,
    );
  }
  const columns = new Set(read.manifest.fields.filter((f) => f.parentId === -1).map((f) => f.name));
  const unknown = request.select?.filter((c) => !columns.has(c)) ?? [];
  if (unknown.length > 0) {
    throw new FanoutError("INVALID_REQUEST", `select: unknown column(s) ${unknown.join(", ")}`);
  }
  if (request.filter !== undefined) {
    const table = await runtime.tables.at(location, version);
    await checkFilterWithLance(table, index.column, index.dimension, request.filter);
  }
  const { units, split } = splitPlan(index, coverage, request, runtime.config.maxTasks, {
    profile,
    storage: location.kind,
  });
  const unindexedRows = index.unindexed.reduce((sum, f) => sum + f.rows, 0);
  const indexGroups = units.kind === "index" ? split.groups.length : 0;
  const refine = refinePlacement(indexGroups, units.flat.length > 0, request.refineFactor, split);
  return {
    pinned: pinnedVersion(read, location),
    writer: read.writer,
    index,
    strategy: split.strategy,
    groups: [...split.groups.map((g) => ({ ...g, kind: units.kind })), ...units.flat],
    chunks: split.chunks,
    estimatedMs: split.estimatedMs,
    reason: planReason(split, {
      requested: request.strategy ?? "auto",
      kind: units.kind,
      cachedPerFileByte: cachedPerFileByte(index.type),
      units: units.kind === "index" ? index.segmentCount : units.count,
      queries: request.queries.length,
      profile,
    }),
    considered: split.considered,
    unsearchedRows: coverage === "indexed-only" ? unindexedRows : 0,
    refine,
    limits: limitsOf(request, refine),
  };
}

/**
 * How `request` splits the work of the version `index` was chosen from: the groups (index
 * groups in `split`, flat ones in `units.flat`) and the query chunks. No I/O: prepare uses it to
 * foresee a typical query's plan.
 */
export function splitPlan(
  index: IndexChoice,
  coverage: Coverage,
  request: ValidSearchRequest,
  maxTasks: number,
  where: Pick<SplitInput, "profile" | "storage">,
) {
  const units = workUnits(index, coverage);
  const split = splitWork({
    units: units.count,
    group: units.group,
    queries: request.queries.length,
    dimension: index.dimension,
    limit: limitsOf(request).most,
    nprobes: request.nprobes ?? DEFAULT_NPROBES,
    maxTasks: Math.min(request.maxTasks ?? maxTasks, maxTasks),
    strategy: request.strategy ?? "auto",
    // `select` columns or a flat group beside the index groups: the merge function runs anyway.
    mergeInvoked: (request.select?.length ?? 0) > 0 || units.flat.length > 0,
    refines: request.refineFactor !== undefined || units.flat.length > 0,
    cachedPerFileByte: cachedPerFileByte(index.type),
    ...where,
  });
  return { units, split };
}

/**
 * Where the refine step runs. Beside a flat group Lance re-scores the index candidates exactly
 * even without a refine factor (a factor of 1), so both kinds rank on one scale. Native Lance
 * refines the index's candidates only (the unindexed rows' distances are exact already), so one
 * index group may refine in its task whether or not a flat group stands beside it; the split
 * chose where (`Split.refineInMerge`, which priced the same refine: see `splitPlan`).
 */
export function refinePlacement(
  indexGroups: number,
  flat: boolean,
  refineFactor: number | undefined,
  split: Pick<Split, "refineInMerge">,
): Refine | undefined {
  const factor = refineFactor ?? (flat && indexGroups > 0 ? 1 : undefined);
  if (factor === undefined || indexGroups === 0) return undefined;
  return { where: split.refineInMerge ? "merge" : "task", factor };
}

/** What a version's plans split into groups, whatever the request's strategy and width. */
export interface WorkUnits {
  /** `index`: the index's segments; `flat`: no index, the fragments are searched exactly. */
  readonly kind: "index" | "flat";
  /** Indivisible units: the widest possible split. */
  readonly count: number;
  /** Balanced groups of the units (shared/grouping.ts: stable across commits). */
  readonly group: (maxGroups: number) => Group[];
  /**
   * Beside the index's groups: one flat group of the unindexed tail (coverage "fallback"). It
   * comes on top of `maxTasks`, so the index's groups do not change when an append adds a tail.
   */
  readonly flat: readonly PlannedGroup[];
}

/**
 * Without a vector index the unindexed fragments are the whole dataset: they are fanned out
 * like segments. Beside an index they are a small tail, searched exactly by Lance itself
 * (`bypassVectorIndex`, so distances keep Lance's metric semantics) as one flat group.
 */
export function workUnits(index: IndexChoice, coverage: Coverage): WorkUnits {
  const fallback = coverage === "fallback";
  if (index.segments.length === 0) {
    const fragments = fallback ? index.unindexed : [];
    return {
      kind: "flat",
      count: fragments.length,
      group: (g) => groupFragments(fragments, g),
      flat: [],
    };
  }
  const tail = fallback && index.unindexed.length > 0 ? [flatGroup(index.unindexed)] : [];
  return {
    kind: "index",
    count: index.segments.length,
    group: (g) => groupSegments(index.segments, g),
    flat: tail,
  };
}

function flatGroup(fragments: readonly FlatFragment[]): PlannedGroup {
  return {
    kind: "flat",
    segments: [],
    fragments: fragments.map((f) => f.id),
    rows: fragments.reduce((sum, f) => sum + f.rows, 0),
    cost: segmentCost(
      0,
      fragments.reduce((sum, f) => sum + f.physicalRows, 0),
    ),
    indexBytes: 0,
  };
}

/** One task per (group, chunk); each carries only its chunk's query vectors. */
export function tasksOf(
  searchPlan: SearchPlan,
  request: ValidSearchRequest,
  requestId: string,
): SegmentTask[] {
  const { pinned, index, refine, limits } = searchPlan;
  // The same views for every chunk.
  const groups = searchPlan.groups.map((group) => ({
    group,
    view: groupFieldsOf(viewSpecOfGroup(pinned, index.name, group)),
  }));
  return searchPlan.chunks.flatMap(([start, end], chunk) => {
    const queries = encodeVectors(request.queries.slice(start, end));
    return groups.map(({ group, view }, i) => ({
      requestId,
      dataset: pinned.dataset.uri,
      version: pinned.version,
      schema: pinned.schema,
      ...view,
      column: index.column,
      metric: index.metric,
      kind: group.kind,
      group: i,
      chunk,
      queries,
      limit: group.kind === "index" ? limits.indexTask : limits.results,
      filter: request.filter,
      nprobes: request.nprobes,
      refineFactor: group.kind === "index" && refine?.where === "task" ? refine.factor : undefined,
    }));
  });
}
