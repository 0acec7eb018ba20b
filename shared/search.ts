/**
 * A whole search: request -> plan -> tasks -> candidates -> result.
 * @module
 */
import { randomUUID } from "node:crypto";
import { FanoutError, toFanoutError } from "./errors.js";
import { type Invoker, inProcessInvoker } from "./invoker.js";
import { plan, type SearchPlan, tasksOf } from "./planner.js";
import { parseSearchRequest, type SearchRequest, type ValidSearchRequest } from "./request.js";
import { defaultRuntime, type Runtime } from "./runtime.js";
import type { MergeInput, ResultRow, TaskCandidates } from "./tasks.js";

/** The synchronous invoke payload limit of AWS Lambda, for requests and responses. */
export const MAX_PAYLOAD_BYTES = 6 * 1024 * 1024;

export interface SearchOptions {
  /** Where the tasks and the merge run. @default in this process */
  readonly invoker?: Invoker;
  /** Configuration, caches and views of this process. @default from the environment */
  readonly runtime?: Runtime;
  /** Carried to every task for logs. @default a random UUID */
  readonly requestId?: string;
}

export interface PlanResponse {
  readonly version: number;
  readonly index: {
    readonly name: string;
    readonly column: string;
    readonly metric: string;
    readonly segments: number;
  };
  readonly plan: {
    readonly tasks: number;
    readonly groups: readonly {
      readonly segments: readonly string[];
      readonly rows: number;
      readonly cost: number;
    }[];
  };
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
 * Searches a Lance dataset with one task per segment group and merges the global top-k.
 * The request is validated and its vectors copied before this returns its promise.
 * @example
 * const { results } = await vectorSearch({ dataset: "s3://bucket/db/items.lance", query: [0.1, 0.2], k: 10 });
 */
export function vectorSearch(
  request: SearchRequest,
  options: SearchOptions = {},
): Promise<SearchResponse> {
  let valid: ValidSearchRequest;
  try {
    valid = parseSearchRequest(request);
  } catch (err) {
    return Promise.reject(err);
  }
  const runtime = options.runtime ?? defaultRuntime();
  const timeoutMs = valid.timeoutMs ?? runtime.config.timeoutMs;
  return withDeadline(execute(valid, runtime, options), timeoutMs).catch((err: unknown) => {
    throw toFanoutError(err);
  });
}

/** Plans a search without running it: the version, the index and the groups. */
export async function planSearch(
  request: SearchRequest,
  options: SearchOptions = {},
): Promise<PlanResponse> {
  const valid = parseSearchRequest(request);
  return describePlan(await plan(valid, options.runtime ?? defaultRuntime()));
}

async function execute(
  request: ValidSearchRequest,
  runtime: Runtime,
  options: SearchOptions,
): Promise<SearchResponse> {
  const invoker = options.invoker ?? inProcessInvoker(runtime);
  const requestId = options.requestId ?? randomUUID();
  const searchPlan = await plan(request, runtime);
  const tasks = tasksOf(searchPlan, request, requestId);
  for (const task of tasks) assertPayloadSize(task, "a segment-search task");
  assertCandidatesFit(searchPlan, request);
  const settled = await Promise.allSettled(tasks.map((task) => invoker.searchSegments(task)));
  const candidates = collect(settled);
  const mergeInput: MergeInput = {
    requestId,
    dataset: searchPlan.dataset,
    version: searchPlan.version,
    k: request.k,
    queryCount: request.queries.length,
    select: request.select,
    candidates: candidates.map((c) => c.candidates),
  };
  assertPayloadSize(mergeInput, "the merge input (tasks x queries x k candidates)");
  const { results } = await invoker.merge(mergeInput);
  const described = describePlan(searchPlan);
  return {
    ...described,
    plan: {
      ...described.plan,
      groups: described.plan.groups.map((g, i) => ({
        ...g,
        searchedSegments: candidates[i]?.searchedSegments ?? 0,
      })),
    },
    results,
  };
}

/** All tasks' candidates in group order, or one error naming every failed group. */
function collect(settled: PromiseSettledResult<TaskCandidates>[]): TaskCandidates[] {
  const failed = settled.flatMap((s, group) =>
    s.status === "rejected" ? [{ group, error: toFanoutError(s.reason) }] : [],
  );
  if (failed.length === 0) {
    return settled.map((s) => (s as PromiseFulfilledResult<TaskCandidates>).value);
  }
  // A caller's mistake found inside a task is still the caller's mistake.
  const callerError = failed.find((f) => f.error.status < 500);
  if (callerError) throw callerError.error;
  const groups = failed.map((f) => f.group);
  throw new FanoutError(
    "SEGMENT_SEARCH_FAILED",
    `segment search failed for group(s) ${groups.join(", ")}: ${failed[0]?.error.message}`,
    { details: { groups: failed.map((f) => ({ group: f.group, message: f.error.message })) } },
  );
}

function describePlan(searchPlan: SearchPlan): PlanResponse {
  const { index, groups } = searchPlan;
  return {
    version: searchPlan.version,
    index: {
      name: index.name,
      column: index.column,
      metric: index.metric,
      segments: index.segments.length,
    },
    plan: {
      tasks: groups.length,
      groups: groups.map((g) => ({ segments: g.segments, rows: g.rows, cost: g.cost })),
    },
  };
}

/**
 * Refuses, before any task runs, a search whose candidates could not travel in one invoke:
 * each task returns up to min(k, its rows) candidates per query, 12 bytes each before base64.
 */
function assertCandidatesFit(searchPlan: SearchPlan, request: ValidSearchRequest): void {
  const candidates = searchPlan.groups.map(
    (g) => request.queries.length * Math.min(request.k, g.rows),
  );
  const bytes = (n: number) => Math.ceil((n * 12) / 3) * 4;
  const largestTask = Math.max(0, ...candidates);
  const total = candidates.reduce((sum, n) => sum + n, 0);
  if (bytes(largestTask) > MAX_PAYLOAD_BYTES || bytes(total) > MAX_PAYLOAD_BYTES) {
    throw new FanoutError(
      "PAYLOAD_TOO_LARGE",
      `up to ${total} candidates (queries x k x tasks) would not fit the merge input's ` +
        `${MAX_PAYLOAD_BYTES}-byte Lambda payload limit; send fewer queries or a smaller k`,
    );
  }
}

function assertPayloadSize(payload: unknown, what: string): void {
  const bytes = Buffer.byteLength(JSON.stringify(payload));
  if (bytes > MAX_PAYLOAD_BYTES) {
    throw new FanoutError(
      "PAYLOAD_TOO_LARGE",
      `${what} would be ${bytes} bytes, over the ${MAX_PAYLOAD_BYTES}-byte Lambda payload limit`,
    );
  }
}

function withDeadline<T>(work: Promise<T>, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new FanoutError("TIMEOUT", `the search did not finish within ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}
