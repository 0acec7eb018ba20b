/**
 * How a search is split into tasks: groups (G) x query chunks (C). `auto` picks the
 * split with the lowest estimated latency from a small cost model whose constants the benchmark
 * measures (`shared/calibration.json`, `npm run bench -- --calibrate`).
 * @module
 */
import calibration from "./calibration.json" with { type: "json" };
import type { Group } from "./grouping.js";
import type { Strategy } from "./request.js";

/** Where tasks run, as the cost model needs it. */
export interface ExecutionProfile {
  /** Tasks that truly run at once (cores in-process; large on Lambda). */
  readonly parallelism: number;
  /** Cost of invoking one task, in ms. */
  readonly invokeMs: number;
  /** Largest task or merge payload, in bytes. */
  readonly maxPayloadBytes: number;
  /** Bytes of lancedb's index cache of one environment where tasks run. */
  readonly indexCacheBytes: number;
  /**
   * Pools of environments tasks are routed to: group g's tasks run in slot g mod `slots`, so
   * each environment of a slot comes to hold the views of that slot's groups. 1 in one process
   * (every task shares its cache) and for one segment-search function.
   */
  readonly slots: number;
}

export interface CostModel {
  readonly taskFixedMs: number;
  readonly perQuerySegmentMs: number;
  readonly perQueryThousandRowsMs: number;
  readonly referenceDimension: number;
  /** One storage read's first-byte latency (S3's typical p50): what an uncached partition costs. */
  readonly storageRoundTripMs: number;
  /** The merge's refine of a fanned-out search: its fixed cost (scratch table, one take)... */
  readonly refineFixedMs: number;
  /** ...its cost per query of reading the candidates' rows... */
  readonly refinePerQueryMs: number;
  /** ...and of re-scoring them, at the reference dimension. */
  readonly refineScorePerQueryMs: number;
  /**
   * A task that refines itself (one group) pays per query this much per segment x candidate:
   * measured on batches, its refine grows with the segments it searches, so a batch over many
   * segments is cheaper as unrefined groups and one refine in the merge.
   */
  readonly taskRefinePerCandidateMs: number;
}

export const COST_MODEL: CostModel = calibration;

/** One plan the cost model weighed: its shape and estimate. */
export interface ConsideredSplit {
  readonly strategy: Exclude<Strategy, "auto">;
  readonly groups: number;
  readonly chunks: number;
  readonly estimatedMs: number;
}

export interface Split {
  readonly strategy: Exclude<Strategy, "auto">;
  readonly groups: readonly Group[];
  /** Query ranges `[start, end)`, one per chunk. */
  readonly chunks: readonly (readonly [number, number])[];
  /** Estimated latency of the whole fan-out, in ms. */
  readonly estimatedMs: number;
  /**
   * A refining search refines in the merge, once over the global candidates: always with
   * several groups, and for the one group of a split that can have no other when that is
   * estimated faster. False when nothing is refined.
   */
  readonly refineInMerge: boolean;
  /** Every plan weighed (one for a fixed strategy), each at its best refine placement. */
  readonly considered: readonly ConsideredSplit[];
}

export interface SplitInput {
  /** Indivisible pieces of work (index segments, or fragments searched flat): the widest split. */
  readonly units: number;
  /** Groups the units into at most `maxGroups` balanced groups. */
  readonly group: (maxGroups: number) => readonly Group[];
  readonly queries: number;
  readonly dimension: number;
  /** Candidates per query a task returns at most: (k + offset) x the refine factor. */
  readonly limit: number;
  /** IVF partitions a query probes in each segment. */
  readonly nprobes: number;
  readonly maxTasks: number;
  readonly strategy: Strategy;
  /**
   * Every merge runs in the merge function whatever the split (e.g. `select` columns to fetch);
   * otherwise one group's merge runs in the planner and saves that invoke.
   */
  readonly mergeInvoked: boolean;
  /**
   * The search refines (a refine factor, or a flat group beside the index): in the task of
   * one index group, or once in the merge (see {@link Split.refineInMerge}).
   */
  readonly refines: boolean;
  /**
   * Where the dataset is read from. On S3 a task's refine is priced a round trip per query (its
   * queries read their candidates' rows in turn: through the local stack a one-task batch of
   * 100 took about as long as 100 single queries), the merge's one read for the whole batch.
   */
  readonly storage: "s3" | "local";
  readonly profile: ExecutionProfile;
  /** Bytes the index takes in a cache per byte of its files (see {@link cachedPerFileByte}). @default 1 */
  readonly cachedPerFileByte?: number;
  readonly model?: CostModel;
}

/**
 * What an index of lancedb type `type` takes in a segment-search's cache per byte of its files,
 * as the cache is accounted (lancedb's `sizeBytes`): a PQ index's cached partitions are weighed
 * with their codebook again (docs/architecture.md, "Prewarm and the caches"), so it takes more
 * than its files (bisected by bench/probes/cache-fit.ts on the demo's IVF_PQ index, the upper
 * end taken); other types as their files. Unknown types count as their files.
 */
export function cachedPerFileByte(type: string | null): number {
  return type !== null && /Pq$/.test(type) ? PQ_CACHED_PER_FILE_BYTE : 1;
}

const PQ_CACHED_PER_FILE_BYTE = 1.8;

/** lancedb's `nprobes` when a request sets none (its query.d.ts: "The default value is 20"). */
export const DEFAULT_NPROBES = 20;

/** Bytes one candidate takes in a payload: u64 row id + f32 distance, base64. */
const CANDIDATE_BYTES = 16;

/** Chooses the groups and query chunks for a strategy. */
export function splitWork(input: SplitInput): Split {
  const model = input.model ?? COST_MODEL;
  // A task's answer must fit one payload: this bounds the queries per chunk.
  const perChunk = Math.max(
    1,
    Math.floor((input.profile.maxPayloadBytes * 0.9) / (CANDIDATE_BYTES * input.limit)),
  );
  const minChunks = Math.ceil(input.queries / perChunk);
  const widths = (max: number) => powersOfTwoUpTo(Math.max(1, max));
  const candidates: { strategy: Split["strategy"]; g: number; c: number }[] = [];
  const add = (strategy: Split["strategy"], g: number, c: number) =>
    candidates.push({ strategy, g, c: Math.min(input.queries, Math.max(c, minChunks)) });
  const maxG = Math.max(1, Math.min(input.units, input.maxTasks));
  const maxC = Math.min(input.queries, input.maxTasks);
  switch (input.strategy) {
    case "single":
      add("single", 1, 1);
      break;
    case "segments":
      add("segments", maxG, 1);
      break;
    case "queries":
      add("queries", 1, maxC);
      break;
    case "hybrid":
    case "auto":
      for (const g of widths(maxG)) {
        for (const c of widths(Math.min(input.queries, Math.floor(input.maxTasks / g)))) {
          add(g > 1 && c > 1 ? "hybrid" : g > 1 ? "segments" : c > 1 ? "queries" : "single", g, c);
        }
      }
      if (input.strategy === "hybrid") {
        const mixed = candidates.filter((x) => x.strategy === "hybrid");
        if (mixed.length > 0) candidates.splice(0, candidates.length, ...mixed);
      }
      break;
  }
  // One group refines in its task, as native Lance does, unless the split can have no other
  // group (one segment, or maxTasks 1): then the merge may refine, where it is estimated faster.
  // Where several groups are allowed they are the better way out of a slow task refine: one
  // unrefined group of a batch searched 1.2-1.5x slower than two on synth-many (in-process and
  // through the local stack, run 2026-12-07T07-08-04), which the model cannot tell apart.
  const oneGroupRefines = maxG > 1 ? [false] : [false, true];
  let best: Omit<Split, "considered"> | undefined;
  const considered: ConsideredSplit[] = [];
  for (const { strategy, g, c } of candidates) {
    const groups = input.group(g);
    const chunks = chunkRanges(input.queries, c);
    const placements = !input.refines ? [false] : groups.length > 1 ? [true] : oneGroupRefines;
    const estimates = placements.map((refineInMerge) => {
      const estimatedMs = estimate(groups, chunks, refineInMerge, input, model);
      if (!best || estimatedMs < best.estimatedMs - 1e-9) {
        best = { strategy, groups, chunks, estimatedMs, refineInMerge };
      }
      return estimatedMs;
    });
    const shape = { groups: groups.length, chunks: chunks.length };
    if (!considered.some((x) => x.groups === shape.groups && x.chunks === shape.chunks)) {
      considered.push({ strategy, ...shape, estimatedMs: Math.min(...estimates) });
    }
  }
  if (!best) throw new Error("no split to choose from");
  return { ...best, considered };
}

/** Planner-side cost of dispatching one task and handling its answer, in ms. */
const DISPATCH_MS = 0.2;

/**
 * Latency: the task invoke, waves of parallel tasks (each as slow as its slowest task), then the
 * merge invoke, which one group does not pay unless `mergeInvoked` or the merge refines (else
 * the planner merges it), and the refine: in a task, per segment and candidate, plus on S3 a
 * round trip per query; in the merge, one read from storage and a re-score of the global
 * candidates.
 */
function estimate(
  groups: readonly Group[],
  chunks: readonly (readonly [number, number])[],
  mergeRefines: boolean,
  input: SplitInput,
  model: CostModel,
): number {
  const scale = input.dimension / model.referenceDimension;
  const chunk = Math.max(...chunks.map(([a, b]) => b - a));
  const missed = missedShare(groups, input.profile, input.cachedPerFileByte ?? 1);
  const taskRefines = input.refines && !mergeRefines;
  const taskRefine = taskRefines ? model.taskRefinePerCandidateMs : 0;
  const taskRefineReadMs = taskRefines && input.storage === "s3" ? model.storageRoundTripMs : 0;
  const slowestTask = Math.max(
    model.taskFixedMs,
    ...groups.map(
      (g, i) =>
        model.taskFixedMs +
        chunk *
          (g.segments.length * model.perQuerySegmentMs +
            (g.rows / 1000) * model.perQueryThousandRowsMs * scale +
            g.segments.length * input.limit * taskRefine +
            taskRefineReadMs +
            g.segments.length * input.nprobes * missed(i) * model.storageRoundTripMs),
    ),
  );
  const tasks = groups.length * chunks.length;
  const waves = Math.ceil(tasks / Math.max(1, input.profile.parallelism));
  const invokes = groups.length > 1 || input.mergeInvoked || mergeRefines ? 2 : 1;
  const refine = mergeRefines
    ? model.refineFixedMs +
      model.storageRoundTripMs +
      input.queries * (model.refinePerQueryMs + model.refineScorePerQueryMs * scale)
    : 0;
  return invokes * input.profile.invokeMs + tasks * DISPATCH_MS + waves * slowestTask + refine;
}

/**
 * The share of a group's index its task reads from storage on every query: what does not fit
 * the cache of an environment of its slot, which holds every group of that slot. With a slot
 * per group, G groups hold G caches' worth of the index hot; with one slot (one process, or one
 * segment-search function) every environment holds every group, and fanning out holds no more.
 * Unknown sizes count as fitting.
 */
function missedShare(
  groups: readonly Group[],
  profile: Pick<ExecutionProfile, "indexCacheBytes" | "slots">,
  cachedPerFileByte: number,
): (group: number) => number {
  const slots = Math.max(1, profile.slots);
  const held = new Array<number>(slots).fill(0);
  groups.forEach((g, i) => {
    held[i % slots] = (held[i % slots] ?? 0) + (g.indexBytes ?? 0) * cachedPerFileByte;
  });
  const cache = profile.indexCacheBytes;
  return (group) => {
    const bytes = held[group % slots] ?? 0;
    return bytes > cache ? 1 - cache / bytes : 0;
  };
}

/** `count` contiguous ranges covering `[0, total)`, as equal as possible. */
export function chunkRanges(total: number, count: number): [number, number][] {
  const n = Math.max(1, Math.min(total, count));
  return Array.from({ length: n }, (_, i) => [
    Math.floor((i * total) / n),
    Math.floor(((i + 1) * total) / n),
  ]);
}

/** The group counts `auto` and `hybrid` weigh: powers of two below `max`, and `max`. */
export function powersOfTwoUpTo(max: number): number[] {
  const out: number[] = [];
  for (let w = 1; w < max; w *= 2) out.push(w);
  out.push(max);
  return [...new Set(out)];
}
