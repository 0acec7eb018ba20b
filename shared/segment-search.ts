/**
 * One segment-search task: a single lancedb query over the group's view carrying every query
 * vector, with the filter applied before nearest-neighbour selection (Lance's prefilter).
 * @module
 */
import { randomUUID } from "node:crypto";
import type { Table as ArrowTable } from "apache-arrow";
import { decodeVectors, encodeCandidates, type QueryCandidates } from "./codec.js";
import type { DatasetLocation } from "./dataset.js";
import { FanoutError } from "./errors.js";
import {
  failsOnValues,
  lanceErrorKind,
  missingObject,
  refusesBatchSearch,
  valueFailure,
} from "./lance/errors.js";
import { notFoundError, unsupportedError } from "./manifest-store.js";
import type { Runtime } from "./runtime.js";
import type {
  PreparedView,
  SegmentTask,
  TaskCandidates,
  ViewTask,
  Warmed,
  WarmTask,
} from "./tasks.js";
import { compareHits } from "./top-k.js";
import type { ViewSpec } from "./views/identity.js";
import type { OpenView } from "./views/materialize.js";

export async function searchSegments(task: SegmentTask, runtime: Runtime): Promise<TaskCandidates> {
  const spec = viewSpecOf(task, runtime.resolveDataset(task.dataset));
  try {
    return await search(task, spec, runtime);
  } catch (err) {
    if (err instanceof FanoutError) throw err;
    if (task.filter !== undefined && failsOnValues(err)) {
      const message = `filter: Lance could not evaluate it on the data (${valueFailure(err)})`;
      throw new FanoutError("INVALID_REQUEST", message, { cause: err });
    }
    const kind = lanceErrorKind(err);
    if (kind === "unsupported") {
      throw await unsupportedError(err, runtime.objects, spec.dataset.uri, task.version);
    }
    if (kind !== "not-found") throw err;
    throw await notFoundError(err, runtime.objects, spec.dataset.uri, task.version);
  }
}

/**
 * Builds (or verifies) a task's view. Its index is not loaded here: this is one environment of
 * many, which the next task of the view is unlikely to reach; warm tasks load the views a
 * typical query needs into every environment.
 */
export async function prepareView(task: ViewTask, runtime: Runtime): Promise<PreparedView> {
  const spec = viewSpecOf(task, runtime.resolveDataset(task.dataset));
  const known = runtime.views.isOpen(spec);
  const view = await runtime.views.open(spec);
  const created = view.created && !known;
  return { view: view.name, created, searchedSegments: view.searchedSegments };
}

/** This process's id in warm answers: concurrent invokes that reached it count once. */
const ENVIRONMENT = randomUUID();

/** Views opened at once by a warm task: each is a few storage round trips. */
const WARM_CONCURRENCY = 8;

/**
 * Opens and loads every view of a warm task in this process. The load is awaited: Lambda
 * freezes the environment once the answer is sent, which would leave it stalled.
 */
export async function warmViews(task: WarmTask, runtime: Runtime): Promise<Warmed> {
  const dataset = runtime.resolveDataset(task.dataset);
  const specs = task.warm.map((group) => viewSpecOf({ ...task, ...group }, dataset));
  return { environment: ENVIRONMENT, opened: await runtime.views.warm(specs, WARM_CONCURRENCY) };
}

/** The view a task searches: its group of the pinned version. */
export function viewSpecOf(task: Omit<ViewTask, "prepare">, dataset: DatasetLocation): ViewSpec {
  return {
    dataset,
    version: task.version,
    indexName: task.indexName,
    segments: task.segments,
    fragments: task.fragments,
    schema: task.schema,
  };
}

async function search(task: SegmentTask, spec: ViewSpec, runtime: Runtime) {
  const view = await runtime.views.open(spec);
  try {
    return await searchView(task, view, runtime);
  } catch (err) {
    // The view's own files were collected (gc) while this process held it open: verify it
    // again, which rebuilds what is missing, and search once more.
    if (!missingObject(err)?.includes(view.name)) throw err;
    runtime.views.evict(view);
    return searchView(task, await runtime.views.open(spec), runtime);
  }
}

async function searchView(
  task: SegmentTask,
  view: OpenView,
  runtime: Runtime,
): Promise<TaskCandidates> {
  const queries = decodeVectors(task.queries);
  if (queries.length === 0) {
    throw new FanoutError("INVALID_REQUEST", "a task needs at least one query vector");
  }
  const candidates = await lanceCandidates(task, view, queries);
  // After the search, so a cold search does not compete with loading the view's index. A frozen
  // process would leave the load stalled and make its next task wait for it instead (measured:
  // bench/results/experiments/README.md). So the load, and the trim after it, run after the
  // answer where the environment can (afterAnswer); a frozen one without finishes it first.
  const prewarm = runtime.views.prewarm(view);
  if (runtime.afterAnswer) {
    runtime.afterAnswer(prewarm.then(() => runtime.views.trim()));
  } else {
    if (runtime.config.frozenWhenIdle) await prewarm;
    await runtime.views.trim();
  }
  return {
    group: task.group,
    chunk: task.chunk,
    searchedSegments: view.searchedSegments,
    candidates: encodeCandidates(candidates),
  };
}

/** Views whose index Lance cannot search with several vectors at once (see {@link refusesBatchSearch}). */
const singleVectorOnly = new WeakSet<OpenView["table"]>();

/**
 * Each query's candidates: one lancedb query for all of them, or, where Lance refuses a batch
 * on the view's index, one query per vector (where native lancedb fails a query matrix).
 */
async function lanceCandidates(
  task: SegmentTask,
  view: OpenView,
  queries: readonly Float32Array[],
): Promise<QueryCandidates[]> {
  if (queries.length === 1 || !singleVectorOnly.has(view.table)) {
    try {
      const batch = await lanceQuery(task, view, queries).toArrow();
      return splitByQuery(batch, queries.length, task.limit);
    } catch (err) {
      if (!refusesBatchSearch(err)) throw err;
      singleVectorOnly.add(view.table);
    }
  }
  const candidates: QueryCandidates[] = [];
  for (const vector of queries) {
    const batch = await lanceQuery(task, view, [vector]).toArrow();
    candidates.push(...splitByQuery(batch, 1, task.limit));
  }
  return candidates;
}

/** One lancedb query over the view: every vector of `queries`, the task's filter before the k-NN. */
function lanceQuery(task: SegmentTask, view: OpenView, queries: readonly Float32Array[]) {
  const [first, ...rest] = queries as [Float32Array, ...Float32Array[]];
  let query = view.table
    .vectorSearch(first)
    .column(task.column)
    .distanceType(task.metric)
    .limit(task.limit)
    .withRowId()
    .select(["_distance"]);
  for (const vector of rest) query = query.addQueryVector(vector);
  if (task.filter !== undefined) query = query.where(task.filter);
  if (task.kind === "flat") {
    // Lance computes the exact distances itself: no home-made metric can drift from its own.
    return query.bypassVectorIndex();
  }
  if (task.nprobes !== undefined) query = query.nprobes(task.nprobes);
  if (task.refineFactor !== undefined) query = query.refineFactor(task.refineFactor);
  return query;
}

/** Splits Lance's answer into per-query lists sorted by (distance, row id), k at most each. */
function splitByQuery(batch: ArrowTable, queryCount: number, k: number): QueryCandidates[] {
  if (batch.numRows === 0) {
    return Array.from({ length: queryCount }, () => ({
      rowIds: new BigUint64Array(0),
      distances: new Float32Array(0),
    }));
  }
  const queryIndex = batch.getChild("query_index");
  const rowIds = batch.getChild("_rowid");
  const distances = batch.getChild("_distance");
  if (!rowIds || !distances) throw new Error("lancedb returned no _rowid or _distance column");
  const lists = Array.from(
    { length: queryCount },
    () => [] as { rowId: bigint; distance: number }[],
  );
  for (let i = 0; i < batch.numRows; i++) {
    const q = queryIndex ? Number(queryIndex.get(i)) : 0;
    lists[q]?.push({ rowId: BigInt(rowIds.get(i)), distance: Number(distances.get(i)) });
  }
  return lists.map((list) => {
    const top = list
      .map((c) => ({ queryId: 0, ...c }))
      .sort(compareHits)
      .slice(0, k);
    return {
      rowIds: BigUint64Array.from(top, (c) => c.rowId),
      distances: Float32Array.from(top, (c) => c.distance),
    };
  });
}
