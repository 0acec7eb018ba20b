/**
 * How the planner reaches the other two functions. In-process for the library and embedded
 * mode; AWS Lambda (functions/common/lambda-invoker.ts) when deployed or in the local stack.
 * @module
 */
import { availableParallelism } from "node:os";
import { decodeCandidates } from "./codec.js";
import { materialize, mergeCandidates } from "./merge.js";
import type { Runtime } from "./runtime.js";
import { searchSegments } from "./segment-search.js";
import type { ExecutionProfile } from "./strategy.js";
import type { MergeInput, MergeOutput, SegmentTask, TaskCandidates } from "./tasks.js";

export interface Invoker {
  /** Where tasks run, for the planner's cost model and payload limits. */
  readonly profile: ExecutionProfile;
  /** Runs one segment-search task. Failures reject with a FanoutError. */
  searchSegments(task: SegmentTask): Promise<TaskCandidates>;
  /** Runs the merge. Failures reject with a FanoutError. */
  merge(input: MergeInput): Promise<MergeOutput>;
}

/** The merge step itself, shared by the in-process invoker and the merge function. */
export async function runMerge(input: MergeInput, runtime: Runtime): Promise<MergeOutput> {
  const hits = mergeCandidates(input.candidates.map(decodeCandidates), input);
  const table = input.select?.length
    ? await runtime.tables.at(runtime.resolveDataset(input.dataset), input.version)
    : undefined;
  return { results: await materialize(hits, input.select, table) };
}

/** Calls the shared modules directly, in this process. */
export function inProcessInvoker(runtime: Runtime): Invoker {
  return {
    // Tasks share this process's cores; nothing is serialised, so no payload limit applies.
    profile: { parallelism: availableParallelism(), invokeMs: 0, maxPayloadBytes: Infinity },
    searchSegments: (task) => searchSegments(task, runtime),
    merge: (input) => runMerge(input, runtime),
  };
}
