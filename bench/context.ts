/**
 * What the benchmark's paths share: the options of a run, its paths' names, the record type of
 * bench/results and the context each path measures a dataset in.
 * @module
 */
import type { DatasetInfo, DatasetSpec } from "./datasets.js";
import type { CommitKind } from "./living-writer.js";
import type { ModeName } from "./modes.js";

export const LIVING_PATHS = ["living", "stack-living"] as const;
export type LivingPath = (typeof LIVING_PATHS)[number];

export const FALLBACK_PATHS = { fallback: "in-process", "stack-fallback": "stack" } as const;
export type FallbackPath = keyof typeof FALLBACK_PATHS;

export interface LivingOptions {
  readonly commits: number;
  /** T: a commit starts every this many ms (at once when the previous one's work ran longer). */
  readonly intervalMs: number;
  readonly cycle: readonly CommitKind[];
  /** Every this many commits a `reindex` instead of the cycle's next kind; 0 = never. */
  readonly reindexEvery: number;
  /** Build each new version's views before its first query (`prepare`, as on a commit event). */
  readonly prepare: boolean;
  /** gc every this many commits; 0 = never. */
  readonly gcEvery: number;
  readonly gcKeep: number;
  /** Queries per side after each first query. */
  readonly steady: number;
  readonly appendRows: number;
  readonly deleteRows: number;
}

export interface BenchOptions {
  datasets: string[];
  modes: ModeName[];
  widths?: number[];
  queryWidths: number[];
  batches: number[];
  paths: BenchPath[];
  queries: number;
  warmup: number;
  batchRepeats: number;
  /** Samples through the stack (slower per query): single queries and batches per mode. */
  stackQueries: number;
  stackBatchRepeats: number;
  cold: number;
  latencyMs: number;
  bandwidthMBps: number;
  workers: number;
  /** Whether the stack freezes idle workers between invocations (as Lambda does). @default true */
  freeze?: boolean;
  recallThreshold?: number;
  recallSlack: number;
  out: string;
  report: boolean;
  calibrate: boolean;
  smoke: boolean;
  seed: number;
  /** The living paths' writer, queries and gc (bench/living.ts). */
  living: LivingOptions;
  /** Unindexed rows the fallback paths measure (bench/fallback-cost.ts). */
  unindexed: number[];
  log: (line: string) => void;
}

/**
 * `cold`: the stack behind injected S3 latency, cold then warm (`--cold` samples); `reads` and
 * `stack-reads`: S3 requests per query, in this process or through the stack (s3-reads.ts);
 * `living` and `stack-living`: a dataset that commits while queries run (living.ts);
 * `fallback` and `stack-fallback`: what unindexed rows cost (fallback-cost.ts); `big-index`: an
 * index several function caches large, against native with one function's cache (big-index.ts);
 * those five only when asked for.
 */
export const BENCH_PATHS = [
  "in-process",
  "stack",
  "cold",
  "reads",
  "stack-reads",
  ...LIVING_PATHS,
  ...(Object.keys(FALLBACK_PATHS) as FallbackPath[]),
  "big-index",
] as const;
export type BenchPath = (typeof BENCH_PATHS)[number];
export const DEFAULT_PATHS: readonly BenchPath[] = [
  "in-process",
  "stack",
  "cold",
  "reads",
  "stack-reads",
];

/** One JSON line in bench/results. */
export type BenchRecord = Record<string, unknown> & { type: string; runId: string };

export interface DatasetContext {
  readonly info: DatasetInfo;
  readonly spec: DatasetSpec;
  readonly queries: number[][];
  readonly truth: string[][];
  readonly widths: number[];
  readonly options: BenchOptions;
  readonly emit: (record: Omit<BenchRecord, "runId">) => Promise<void>;
}
