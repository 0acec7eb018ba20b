/**
 * The payloads that cross function boundaries: planner -> segment-search (a task), segment-search
 * -> planner (candidates), planner -> merge. One zod schema each gives validation and types.
 * @module
 */
import { z } from "zod";
import { DISTANCE_TYPES, LIMITS } from "./request.js";

const base64 = z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/, "must be base64");
const uuid = z.string().regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
const count = z.number().int().min(0);
const digest = z.string().regex(/^[0-9a-f]{32}$/, "must be a 128-bit hex digest");

export const encodedVectorsSchema = z.strictObject({
  dimension: z.number().int().min(1).max(LIMITS.maxDimension),
  count: z.number().int().min(1).max(LIMITS.maxQueries),
  data: base64,
});

export const encodedCandidatesSchema = z.strictObject({
  counts: z.array(count),
  rowIds: base64,
  distances: base64,
});

/** The pinned version a view is cut from. */
const versionFields = {
  requestId: z.string().max(256),
  dataset: z.string().min(1),
  version: z.number().int().min(1),
  /** Digest of the dataset's schema at the pinned version. */
  schema: digest,
};

/** One group of that version: with it, what names a view (see shared/views/identity.ts `ViewSpec`). */
const groupFields = {
  /** Empty for a flat task over a dataset without a vector index. */
  indexName: z.string(),
  segments: z.array(uuid),
  /** The group's live fragments with their content digests: they name the view. */
  fragments: z.array(z.strictObject({ id: count, content: digest })).min(1),
};

const viewFields = { ...versionFields, ...groupFields };

/** Build (or verify) one view before a query needs it (`fanout prepare`). */
export const viewTaskSchema = z.strictObject({ ...viewFields, prepare: z.literal(true) });
export type ViewTask = z.infer<typeof viewTaskSchema>;

/** What preparing a view did. */
export const preparedViewSchema = z.strictObject({
  view: z.string(),
  /** True when this call created the view; false when it existed already. */
  created: z.boolean(),
  searchedSegments: count,
});
export type PreparedView = z.infer<typeof preparedViewSchema>;

/**
 * Open (verify) and load some views of a version (a typical query's) in one execution
 * environment, once they exist. Prepare sends several at once: concurrent invokes run in distinct
 * environments, so each of them holds the views before a query's task lands there.
 */
export const warmTaskSchema = z.strictObject({
  ...versionFields,
  warm: z.array(z.strictObject(groupFields)).min(1),
});
export type WarmTask = z.infer<typeof warmTaskSchema>;

/** What a warm task did in the environment that ran it. */
export const warmedSchema = z.strictObject({
  /** Random id of the environment (one per process): prepare counts the distinct ones. */
  environment: z.string(),
  /** Views it opened; it held the others open already. */
  opened: count,
});
export type Warmed = z.infer<typeof warmedSchema>;

/** One segment-search task: search one group of a pinned version for one chunk of queries. */
export const segmentTaskSchema = z.strictObject({
  ...viewFields,
  column: z.string().min(1),
  metric: z.enum(DISTANCE_TYPES),
  /** `index`: ANN over the group's segments; `flat`: exact search of unindexed fragments. */
  kind: z.enum(["index", "flat"]),
  group: count,
  chunk: count,
  queries: encodedVectorsSchema,
  /** Candidates per query: k + offset, times the refine factor when the merge refines. */
  limit: z.number().int().min(1).max(LIMITS.maxCandidates),
  filter: z.string().min(1).optional(),
  nprobes: z.number().int().min(1).max(LIMITS.maxNprobes).optional(),
  refineFactor: z.number().int().min(1).max(LIMITS.maxRefineFactor).optional(),
});
export type SegmentTask = z.infer<typeof segmentTaskSchema>;

/** What a task returns: at most `limit` candidates per query, sorted by (distance, row id). */
export const taskCandidatesSchema = z.strictObject({
  group: count,
  chunk: count,
  /** Index segments of the view the task searched, as Lance reports them. */
  searchedSegments: count,
  candidates: encodedCandidatesSchema,
});
export type TaskCandidates = z.infer<typeof taskCandidatesSchema>;

/**
 * One merge: global top-k per query for a range of queries, over every group's candidates for
 * those queries, then the `select` columns of the winners.
 */
export const mergeInputSchema = z.strictObject({
  requestId: z.string().max(256),
  dataset: z.string().min(1),
  version: z.number().int().min(1),
  k: z.number().int().min(1).max(LIMITS.maxK),
  offset: z.number().int().min(0).max(LIMITS.maxK),
  /** Query id of the first query of the range. */
  queryOffset: z.number().int().min(0).max(LIMITS.maxQueries),
  queryCount: z.number().int().min(1).max(LIMITS.maxQueries),
  select: z.array(z.string().min(1)).optional(),
  /** Candidate lists with final distances (exact, or approximate when nothing is refined). */
  candidates: z.array(encodedCandidatesSchema),
  /** Index candidates to re-score once, as Lance's refine step does (see shared/refine.ts). */
  refine: z
    .strictObject({
      column: z.string().min(1),
      metric: z.enum(DISTANCE_TYPES),
      /** Candidates per query re-scored: the global top (k + offset) × refineFactor. */
      limit: z.number().int().min(1).max(LIMITS.maxCandidates),
      /** The range's query vectors. */
      queries: encodedVectorsSchema,
      /** Index tasks' candidate lists, by index distance. */
      candidates: z.array(encodedCandidatesSchema),
    })
    .optional(),
});
export type MergeInput = z.infer<typeof mergeInputSchema>;

/** One result row: `_rowid` is a decimal string because a u64 does not fit a JSON number. */
export interface ResultRow {
  readonly _query_id: number;
  readonly _distance: number;
  readonly _rowid: string;
  readonly [column: string]: unknown;
}

export interface MergeOutput {
  readonly results: readonly ResultRow[];
}
