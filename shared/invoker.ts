/**
 * How the planner reaches the other two functions. In-process for the library and embedded
 * mode; AWS Lambda (functions/common/lambda-invoker.ts) when deployed or in the local stack.
 * @module
 */
import { availableParallelism } from "node:os";
import { decodeCandidates, decodeVectors, type QueryCandidates } from "./codec.js";
import { FanoutError } from "./errors.js";
import { notFoundError } from "./manifest-store.js";
import { type Hit, materialize, mergeCandidates } from "./merge.js";
import { rescore } from "./refine.js";
import type { Runtime } from "./runtime.js";
import { prepareView, searchSegments, warmViews } from "./segment-search.js";
import type { ExecutionProfile } from "./strategy.js";
import { firstRowsOf, isNotFound, readFooters, type Table } from "./tables.js";
import type {
  MergeInput,
  MergeOutput,
  PreparedView,
  SegmentTask,
  TaskCandidates,
  ViewTask,
  Warmed,
  WarmTask,
} from "./tasks.js";

export interface Invoker {
  /** Where tasks run, for the planner's cost model and payload limits. */
  readonly profile: ExecutionProfile;
  /**
   * Runs one segment-search task. Failures reject with a FanoutError. `signal` aborts when the
   * query's deadline passes: no retry starts after it, and a remote invoke is let go.
   */
  searchSegments(task: SegmentTask, signal?: AbortSignal): Promise<TaskCandidates>;
  /** Runs the merge. Failures reject with a FanoutError. */
  merge(input: MergeInput, signal?: AbortSignal): Promise<MergeOutput>;
  /** Builds and warms one view where tasks run (`fanout prepare`). */
  prepareView(task: ViewTask): Promise<PreparedView>;
  /** Opens and loads a warm task's views in the environment the invoke reaches. */
  warmViews(task: WarmTask): Promise<Warmed>;
}

/** The merge step itself, shared by the in-process invoker and the merge function. */
export async function runMerge(input: MergeInput, runtime: Runtime): Promise<MergeOutput> {
  const location = runtime.resolveDataset(input.dataset);
  try {
    const pinned = () => runtime.tables.at(location, input.version);
    const lists = input.candidates.map(decodeCandidates);
    if (input.refine) lists.push(await refined(input, input.refine, await pinned()));
    const hits = mergeCandidates(lists, input);
    const table = input.select?.length ? await pinned() : undefined;
    return { results: await materialize(hits, input.select, table) };
  } catch (err) {
    if (err instanceof FanoutError || !isNotFound(err)) throw err;
    throw await notFoundError(err, runtime.objects, location.uri, input.version);
  }
}

/** The global top `refine.limit` index candidates of each query, with exact distances. */
function refined(
  input: MergeInput,
  refine: NonNullable<MergeInput["refine"]>,
  table: Table,
): Promise<QueryCandidates[]> {
  const global = mergeCandidates(refine.candidates.map(decodeCandidates), {
    k: refine.limit,
    offset: 0,
    queryOffset: 0,
    queryCount: input.queryCount,
  });
  const perQuery = Array.from({ length: input.queryCount }, (): Hit[] => []);
  for (const hit of global) perQuery[hit.queryId]?.push(hit);
  return rescore({
    table,
    column: refine.column,
    metric: refine.metric,
    queries: decodeVectors(refine.queries),
    candidates: perQuery,
  });
}

/**
 * Reads the footers of the pinned version's data files where merges run (this process): a
 * merge that refines or selects columns then reads its candidates' rows at once.
 */
async function warmMerge(task: WarmTask, runtime: Runtime): Promise<void> {
  const location = runtime.resolveDataset(task.dataset);
  const table = await runtime.tables.at(location, task.version);
  const manifest = await runtime.manifests.read(location.uri, task.version);
  await readFooters(table, firstRowsOf(manifest.fragments));
}

/** Calls the shared modules directly, in this process. */
export function inProcessInvoker(runtime: Runtime): Invoker {
  return {
    // Tasks share this process's cores; nothing is serialised, so no payload limit applies.
    profile: { parallelism: availableParallelism(), invokeMs: 0, maxPayloadBytes: Infinity },
    searchSegments: (task) => searchSegments(task, runtime),
    prepareView: (task) => prepareView(task, runtime),
    warmViews: async (task) => {
      const warmed = await warmViews(task, runtime);
      await warmMerge(task, runtime);
      return warmed;
    },
    merge: (input) => runMerge(input, runtime),
  };
}
