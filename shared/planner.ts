/**
 * The planner: pins a version, reads its manifest, chooses the index, checks the request against
 * the schema and groups the index segments into tasks.
 * @module
 */
import { encodeVectors } from "./codec.js";
import { FanoutError } from "./errors.js";
import { type Group, groupSegments } from "./grouping.js";
import { chooseIndex, type IndexChoice } from "./index-choice.js";
import { readManifest } from "./manifest-store.js";
import type { ValidSearchRequest } from "./request.js";
import type { Runtime } from "./runtime.js";
import type { SegmentTask } from "./tasks.js";

export interface SearchPlan {
  readonly dataset: string;
  readonly version: number;
  readonly index: IndexChoice;
  readonly groups: readonly Group[];
}

export async function plan(request: ValidSearchRequest, runtime: Runtime): Promise<SearchPlan> {
  const location = runtime.resolveDataset(request.dataset);
  const version = request.version ?? (await runtime.tables.latestVersion(location));
  const table = await runtime.tables.at(location, version);
  const manifest = await readManifest(runtime.objects, location.uri, version);
  const index = chooseIndex(manifest, request);
  const dimension = request.queries[0]?.length;
  if (dimension !== index.dimension) {
    throw new FanoutError(
      "INVALID_REQUEST",
      `query: vectors have dimension ${dimension}, column "${index.column}" has ${index.dimension}`,
    );
  }
  const columns = new Set(manifest.fields.filter((f) => f.parentId === -1).map((f) => f.name));
  const unknown = request.select?.filter((c) => !columns.has(c)) ?? [];
  if (unknown.length > 0) {
    throw new FanoutError("INVALID_REQUEST", `select: unknown column(s) ${unknown.join(", ")}`);
  }
  if (request.filter !== undefined) {
    // Planning the query makes Lance parse the filter against the schema, without reading data.
    await table
      .vectorSearch(new Float32Array(index.dimension))
      .column(index.column)
      .where(request.filter)
      .explainPlan()
      .catch((err: unknown) => {
        throw new FanoutError("INVALID_REQUEST", `filter: ${lanceMessage(err)}`, { cause: err });
      });
  }
  const maxGroups = Math.min(request.maxTasks ?? runtime.config.maxTasks, runtime.config.maxTasks);
  return {
    dataset: location.uri,
    version,
    index,
    groups: groupSegments(index.segments, maxGroups),
  };
}

/** One task per group; every task carries all query vectors. */
export function tasksOf(
  searchPlan: SearchPlan,
  request: ValidSearchRequest,
  requestId: string,
): SegmentTask[] {
  const queries = encodeVectors(request.queries);
  return searchPlan.groups.map((group, i) => ({
    requestId,
    dataset: searchPlan.dataset,
    version: searchPlan.version,
    column: searchPlan.index.column,
    indexName: searchPlan.index.name,
    metric: searchPlan.index.metric,
    group: i,
    segments: [...group.segments],
    fragments: [...group.fragments],
    queries,
    k: request.k,
    filter: request.filter,
    nprobes: request.nprobes,
    refineFactor: request.refineFactor,
  }));
}

/** The first line of a lance error, without its Rust source locations. */
function lanceMessage(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const inner = /Caused by: (.*?)(?:, \/|$)/.exec(message)?.[1] ?? message;
  return inner.split(/,\s*\/usr\//)[0]?.trim() ?? inner;
}
