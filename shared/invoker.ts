/**
 * How the planner reaches the other two functions. In-process for the library and embedded
 * mode; AWS Lambda (functions/common/lambda-invoker.ts) when deployed or in the local stack.
 * @module
 */
import { availableParallelism } from "node:os";
import { refusesTake } from "./lance/errors.js";
import { firstRowsOf, readFooters } from "./lance/tables.js";
import { runMerge } from "./merge.js";
import type { Runtime } from "./runtime.js";
import { prepareView, searchSegments, warmViews } from "./segment-search.js";
import type { ExecutionProfile } from "./strategy.js";
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
  /** Opens and loads a warm task's views in an environment of `slot` (default 0). */
  warmViews(task: WarmTask, slot?: number): Promise<Warmed>;
  /** Tasks sent a second time because they were late (shared/hedge.ts), so far; none in-process. */
  hedged?(): number;
}

/**
 * Reads the footers of the pinned version's data files where merges run (this process): a
 * merge that refines or selects columns then reads its candidates' rows at once. Only speed:
 * where Lance cannot take rows by offset (legacy data files), the merge reads them later.
 */
async function warmMerge(task: WarmTask, runtime: Runtime): Promise<void> {
  const location = runtime.resolveDataset(task.dataset);
  const table = await runtime.tables.at(location, task.version);
  const read = await runtime.versions.read(location, task.version);
  await readFooters(table, firstRowsOf(read.fragments)).catch((err: unknown) => {
    if (!refusesTake(err)) throw err;
  });
}

/**
 * Cores one lancedb search keeps busy (measured ~1.24 in this project): on two cores, two query
 * chunks of a batch of 100 searched in 0.86-1.30x one task's time (run
 * 2026-12-06T00-47-53-488Z), so concurrent tasks here overlap little.
 */
const CORES_PER_SEARCH = 1.24;

/** Calls the shared modules directly, in this process. */
export function inProcessInvoker(runtime: Runtime): Invoker {
  return {
    // Tasks share this process's cores and its one index cache; nothing is serialised, so no
    // payload limit applies.
    profile: {
      parallelism: Math.max(1, Math.floor(availableParallelism() / CORES_PER_SEARCH)),
      invokeMs: 0,
      maxPayloadBytes: Infinity,
      indexCacheBytes: runtime.config.indexCacheBytes,
      slots: 1,
    },
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
