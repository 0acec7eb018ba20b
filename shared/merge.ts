/**
 * The merge step: the merges a plan's candidates go to (one per query chunk, split further to
 * fit a payload), and each merge itself: the global top-k per query, Lance's refine step once
 * over the global candidates when the plan puts it here, then the `select` columns of the winners.
 * @module
 */
import {
  decodeCandidates,
  decodeVectors,
  type EncodedCandidates,
  encodeCandidates,
  encodeVectors,
  type QueryCandidates,
} from "./codec.js";
import { FanoutError } from "./errors.js";
import type { Table } from "./lance/connect.js";
import { lanceErrorKind } from "./lance/errors.js";
import { notFoundError } from "./manifest-store.js";
import { payloadBytes } from "./payload.js";
import type { SearchPlan } from "./planner.js";
import { rescore } from "./refine.js";
import type { ValidSearchRequest } from "./request.js";
import { resultRows } from "./rows.js";
import type { Runtime } from "./runtime.js";
import { chunkRanges } from "./strategy.js";
import type { MergeInput, MergeOutput, TaskCandidates } from "./tasks.js";
import { type Hit, mergeCandidates } from "./top-k.js";

/**
 * The merges of a plan's candidates: one per query chunk when its candidates fit one payload
 * of `maxPayloadBytes`; otherwise the chunk's queries are split further, so merges stay within
 * the limit and run side by side.
 */
export function mergeInputs(
  searchPlan: SearchPlan,
  request: ValidSearchRequest,
  requestId: string,
  candidates: readonly TaskCandidates[],
  maxPayloadBytes: number,
): MergeInput[] {
  const { refine, index, pinned, limits } = searchPlan;
  const base = {
    requestId,
    dataset: pinned.dataset.uri,
    version: pinned.version,
    k: request.k,
    offset: request.offset ?? 0,
    select: request.select,
  };
  // Index candidates are re-scored in the merge; the rest already have their final distances.
  const rescored = (c: TaskCandidates) =>
    refine?.where === "merge" && searchPlan.groups[c.group]?.kind === "index";
  /** The merge of queries [start, end) of chunk `chunk`. */
  const inputOf = (chunk: number, start: number, end: number): MergeInput => {
    const [chunkStart = 0, chunkEnd = 0] = searchPlan.chunks[chunk] ?? [];
    const part = (list: EncodedCandidates) =>
      start === chunkStart && end === chunkEnd
        ? list
        : encodeCandidates(decodeCandidates(list).slice(start - chunkStart, end - chunkStart));
    const lists = (kind: boolean) =>
      candidates
        .filter((c) => c.chunk === chunk && rescored(c) === kind)
        .map((c) => part(c.candidates));
    return {
      ...base,
      queryOffset: start,
      queryCount: end - start,
      candidates: lists(false),
      ...(refine?.where === "merge" && {
        refine: {
          column: index.column,
          metric: index.metric,
          limit: limits.indexTask,
          queries: encodeVectors(request.queries.slice(start, end)),
          candidates: lists(true),
        },
      }),
    };
  };
  return searchPlan.chunks.flatMap(([start, end], chunk) => {
    const input = inputOf(chunk, start, end);
    if (!Number.isFinite(maxPayloadBytes)) return [input];
    const bytes = payloadBytes(input);
    if (bytes <= maxPayloadBytes * 0.9 || end - start === 1) return [input];
    const parts = Math.ceil(bytes / (maxPayloadBytes * 0.8));
    return chunkRanges(end - start, parts).map(([a, b]) => inputOf(chunk, start + a, start + b));
  });
}

/**
 * A merge of one task's candidates that fetches no columns is a slice of one list: it runs where
 * the planner runs, sparing the query one of its three sequential function invokes. Every other
 * merge (several lists, or `select` columns to read from the dataset) runs in the merge function.
 */
export function mergesHere(input: MergeInput): boolean {
  return input.candidates.length === 1 && !input.refine && !input.select?.length;
}

/** One merge, in this process: the in-process invoker and the merge function run it. */
export async function runMerge(input: MergeInput, runtime: Runtime): Promise<MergeOutput> {
  const location = runtime.resolveDataset(input.dataset);
  try {
    const pinned = () => runtime.tables.at(location, input.version);
    const lists = input.candidates.map(decodeCandidates);
    if (input.refine) lists.push(await refined(input, input.refine, await pinned()));
    const hits = mergeCandidates(lists, input);
    const table = input.select?.length ? await pinned() : undefined;
    return { results: await resultRows(hits, input.select, table) };
  } catch (err) {
    if (err instanceof FanoutError || lanceErrorKind(err) !== "not-found") throw err;
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
