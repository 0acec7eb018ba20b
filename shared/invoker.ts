/**
 * How the planner reaches the other two functions. In-process for the library and embedded
 * mode; AWS Lambda (functions/common/lambda-invoker.ts) when deployed or in the local stack.
 * @module
 */
import { decodeCandidates } from "./codec.js";
import { materialize, mergeCandidates } from "./merge.js";
import type { Runtime } from "./runtime.js";
import { searchSegments } from "./segment-search.js";
import type { MergeInput, MergeOutput, SegmentTask, TaskCandidates } from "./tasks.js";

export interface Invoker {
  /** Runs one segment-search task. Failures reject with a FanoutError. */
  searchSegments(task: SegmentTask): Promise<TaskCandidates>;
  /** Runs the merge. Failures reject with a FanoutError. */
  merge(input: MergeInput): Promise<MergeOutput>;
}

/** The merge step itself, shared by the in-process invoker and the merge function. */
export async function runMerge(input: MergeInput, runtime: Runtime): Promise<MergeOutput> {
  const hits = mergeCandidates(input.candidates.map(decodeCandidates), input.k, input.queryCount);
  const table = input.select?.length
    ? await runtime.tables.at(runtime.resolveDataset(input.dataset), input.version)
    : undefined;
  return { results: await materialize(hits, input.select, table) };
}

/** Calls the shared modules directly, in this process. */
export function inProcessInvoker(runtime: Runtime): Invoker {
  return {
    searchSegments: (task) => searchSegments(task, runtime),
    merge: (input) => runMerge(input, runtime),
  };
}
