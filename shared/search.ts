/**
 * A whole search: request -> plan -> tasks -> candidates -> result.
 * @module
 */
import { randomUUID } from "node:crypto";
import type { CpuPhases } from "./cpu-phases.js";
import { FanoutError, toFanoutError } from "./errors.js";
import { type Invoker, inProcessInvoker } from "./invoker.js";
import { isMissingObject } from "./manifest-store.js";
import { mergeInputs, mergesHere, runMerge } from "./merge.js";
import { withinPayloadLimit } from "./payload.js";
import { plan, type Refine, type SearchPlan, tasksOf } from "./planner.js";
import { parseSearchRequest, type SearchRequest, type ValidSearchRequest } from "./request.js";
import { defaultRuntime, type Runtime } from "./runtime.js";
import type { ResultRow, SegmentTask, TaskCandidates } from "./tasks.js";

export interface SearchOptions {
  /** Where the tasks and the merge run. @default in this process */
  readonly invoker?: Invoker;
  /** Configuration, caches and views of this process. @default from the environment */
  readonly runtime?: Runtime;
  /** Carried to every task for logs. @default a random UUID */
  readonly requestId?: string;
  /**
   * The latest time (epoch ms) the answer is of use, e.g. an HTTP request's arrival plus what
   * API Gateway allows: the search's deadline is the earlier of this and its `timeoutMs`.
   */
  readonly deadline?: number | undefined;
  /** Marked with this process's CPU time at the end of each phase (the planner's log line). */
  readonly cpu?: CpuPhases;
}

export interface PlanResponse {
  readonly version: number;
  /** Who wrote the version, e.g. `lance 0.21.0`; null when its manifest does not say (before 0.8). */
  readonly writer: string | null;
  readonly index: {
    readonly name: string;
    /** lancedb's type name (e.g. `IvfPq`); null without an index, or where lancedb does not list it. */
    readonly type: string | null;
    readonly column: string;
    readonly metric: string;
    /** Index segments of the version, as Lance counts them. */
    readonly segmentCount: number;
    /** Live rows the index covers (each once) and live rows it does not. */
    readonly rows: { readonly indexed: number; readonly unindexed: number };
  };
  readonly plan: {
    readonly strategy: SearchPlan["strategy"];
    readonly tasks: number;
    readonly queryChunks: number;
    readonly estimatedMs: number;
    /** Where index candidates get exact distances: in each index task, once in the merge, or nowhere. */
    readonly refine: Refine["where"] | "none";
    /** Why the plan has this shape, in words: index bytes against the cache, segments, estimates. */
    readonly reason: string;
    /** Every plan the cost model weighed, with its estimate. */
    readonly considered: readonly {
      readonly strategy: SearchPlan["strategy"];
      readonly groups: number;
      readonly queryChunks: number;
      readonly estimatedMs: number;
    }[];
    readonly groups: readonly {
      readonly kind: "index" | "flat";
      readonly segments: readonly string[];
      readonly rows: number;
      readonly cost: number;
    }[];
  };
  /** True when rows were left out on purpose (coverage "indexed-only"). */
  readonly partial: boolean;
  /** Live rows not searched (coverage "indexed-only"). */
  readonly unsearchedRows: number;
}

export interface SearchResponse extends PlanResponse {
  readonly plan: PlanResponse["plan"] & {
    readonly groups: readonly (PlanResponse["plan"]["groups"][number] & {
      readonly searchedSegments: number;
    })[];
  };
  readonly results: readonly ResultRow[];
}

/**
 * Searches a Lance dataset with one task per group (and query chunk) and merges the
 * global top-k. The request is validated and its vectors copied before this returns its promise.
 * With `explain: true` it answers the plan only.
 * @example
 * const { results } = await vectorSearch({ dataset: "s3://bucket/db/items.lance", query: [0.1, 0.2], k: 10 });
 */
export function vectorSearch(
  request: SearchRequest & { explain: true },
  options?: SearchOptions,
): Promise<PlanResponse>;
export function vectorSearch(
  request: SearchRequest,
  options?: SearchOptions,
): Promise<SearchResponse>;
export function vectorSearch(
  request: SearchRequest,
  options: SearchOptions = {},
): Promise<SearchResponse | PlanResponse> {
  let valid: ValidSearchRequest;
  try {
    valid = parseSearchRequest(request);
  } catch (err) {
    return Promise.reject(err);
  }
  options.cpu?.mark("parse");
  const runtime = options.runtime ?? defaultRuntime();
  const left = options.deadline === undefined ? Infinity : options.deadline - Date.now();
  const timeoutMs = Math.max(0, Math.min(valid.timeoutMs ?? runtime.config.timeoutMs, left));
  const deadline = new AbortController();
  return withDeadline(execute(valid, runtime, options, deadline.signal), timeoutMs, deadline).catch(
    (err: unknown) => {
      throw toFanoutError(err);
    },
  );
}

/** Plans a search without running it: the version, the index, the groups and chunks. */
export async function planSearch(
  request: SearchRequest,
  options: SearchOptions = {},
): Promise<PlanResponse> {
  const valid = parseSearchRequest(request);
  const runtime = options.runtime ?? defaultRuntime();
  const invoker = options.invoker ?? inProcessInvoker(runtime);
  return describePlan(
    await plan(valid, runtime, invoker.profile).catch((err: unknown) => {
      throw toFanoutError(err);
    }),
  );
}

async function execute(
  request: ValidSearchRequest,
  runtime: Runtime,
  options: SearchOptions,
  signal: AbortSignal,
): Promise<SearchResponse | PlanResponse> {
  const invoker = options.invoker ?? inProcessInvoker(runtime);
  const requestId = options.requestId ?? randomUUID();
  const { cpu } = options;
  const searchPlan = await plan(request, runtime, invoker.profile);
  const described = describePlan(searchPlan);
  cpu?.mark("plan");
  if (request.explain) return described;
  const { maxPayloadBytes } = invoker.profile;
  const tasks = tasksOf(searchPlan, request, requestId);
  if (Number.isFinite(maxPayloadBytes)) {
    for (const task of tasks) withinPayloadLimit(task, "a segment-search task", maxPayloadBytes);
  }
  cpu?.mark("encode");
  const settled = await Promise.allSettled(tasks.map((t) => invoker.searchSegments(t, signal)));
  const candidates = collect(settled, tasks);
  cpu?.mark("tasks");
  const merges = mergeInputs(searchPlan, request, requestId, candidates, maxPayloadBytes);
  const outputs = await Promise.all(
    merges.map((input) =>
      mergesHere(input) ? runMerge(input, runtime) : invoker.merge(input, signal),
    ),
  );
  cpu?.mark("merge");
  const searched = new Map(candidates.filter((c) => c.chunk === 0).map((c) => [c.group, c]));
  return {
    ...described,
    plan: {
      ...described.plan,
      groups: described.plan.groups.map((g, i) => ({
        ...g,
        searchedSegments: searched.get(i)?.searchedSegments ?? 0,
      })),
    },
    results: outputs.flatMap((o) => o.results),
  };
}

/** All tasks' candidates, or one error naming every failed group (never a partial answer). */
function collect(
  settled: readonly PromiseSettledResult<TaskCandidates>[],
  tasks: readonly SegmentTask[],
): TaskCandidates[] {
  const failed = settled.flatMap((s, i) =>
    s.status === "rejected" ? [{ task: tasks[i], error: toFanoutError(s.reason) }] : [],
  );
  if (failed.length === 0) {
    return settled.map((s) => (s as PromiseFulfilledResult<TaskCandidates>).value);
  }
  // A caller's mistake found inside a task is still the caller's mistake, and a missing file
  // is a fact about the dataset, not a failure of the task's function.
  const diagnosed = failed.find((f) => f.error.status < 500 || isMissingObject(f.error));
  if (diagnosed) throw diagnosed.error;
  const groups = [...new Set(failed.map((f) => f.task?.group))];
  throw new FanoutError(
    "SEGMENT_SEARCH_FAILED",
    `segment search failed for group(s) ${groups.join(", ")}: ${failed[0]?.error.message}`,
    {
      details: {
        tasks: failed.map((f) => ({
          group: f.task?.group,
          chunk: f.task?.chunk,
          message: f.error.message,
        })),
      },
    },
  );
}

function describePlan(searchPlan: SearchPlan): PlanResponse {
  const { index, groups, chunks } = searchPlan;
  return {
    version: searchPlan.pinned.version,
    writer: searchPlan.writer,
    index: {
      name: index.name,
      type: index.type,
      column: index.column,
      metric: index.metric,
      segmentCount: index.segmentCount,
      rows: {
        indexed: index.indexedRows,
        unindexed: index.unindexed.reduce((sum, f) => sum + f.rows, 0),
      },
    },
    plan: {
      strategy: searchPlan.strategy,
      tasks: groups.length * chunks.length,
      queryChunks: chunks.length,
      estimatedMs: Math.round(searchPlan.estimatedMs * 100) / 100,
      refine: searchPlan.refine?.where ?? "none",
      reason: searchPlan.reason,
      considered: searchPlan.considered.map((x) => ({
        strategy: x.strategy,
        groups: x.groups,
        queryChunks: x.chunks,
        estimatedMs: Math.round(x.estimatedMs * 100) / 100,
      })),
      groups: groups.map((g) => ({
        kind: g.kind,
        segments: g.segments,
        rows: g.rows,
        cost: g.cost,
      })),
    },
    partial: searchPlan.unsearchedRows > 0,
    unsearchedRows: searchPlan.unsearchedRows,
  };
}

/** `work`, or TIMEOUT after `timeoutMs`; then `deadline` aborts what is still in flight. */
function withDeadline<T>(
  work: Promise<T>,
  timeoutMs: number,
  deadline: AbortController,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(new FanoutError("TIMEOUT", `the search did not finish within ${timeoutMs} ms`));
      deadline.abort();
    }, timeoutMs);
  });
  return Promise.race([work, expired]).finally(() => clearTimeout(timer));
}
