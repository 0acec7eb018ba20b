/**
 * Runtime configuration, read once from the environment (per cold start on Lambda).
 * @module
 */
import { tmpdir } from "node:os";
import { join } from "node:path";
import { COVERAGE_MODES, type Coverage, LIMITS } from "./request.js";

/** Where and how lance-fanout reaches S3. Empty fields fall back to the SDK defaults. */
export interface S3Config {
  /** Custom endpoint, e.g. the local S3 `http://127.0.0.1:4569`. @default AWS */
  readonly endpoint?: string;
  /** @default "us-east-1" */
  readonly region: string;
  readonly accessKeyId?: string;
  readonly secretAccessKey?: string;
  readonly sessionToken?: string;
}

/** How the planner reaches the segment-search and merge functions on Lambda. */
export interface LambdaConfig {
  /**
   * `LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION`: the segment-search function's name or ARN, or a
   * comma-separated list of them (slots: group g's tasks go to slot g mod n, so each function's
   * environments keep serving the same groups); required where the planner invokes.
   */
  readonly segmentSearchFunctions: readonly string[];
  /** `LANCE_FANOUT_MERGE_FUNCTION`: name or ARN; required where the planner invokes. */
  readonly mergeFunction?: string;
  /** `AWS_ENDPOINT_URL_LAMBDA` (or `AWS_ENDPOINT_URL`), e.g. the local Lambda endpoint. @default AWS */
  readonly endpoint?: string;
  /** Tasks that truly run at once (`LANCE_FANOUT_PARALLELISM`), for the cost model. @default 256 */
  readonly parallelism: number;
  /** What one warm invoke costs (`LANCE_FANOUT_INVOKE_MS`), for the cost model. @default 15 */
  readonly invokeMs: number;
  /**
   * The segment-search's index cache (`LANCE_FANOUT_TASK_INDEX_CACHE_MB`): how much of a group's
   * index one task's environment holds, for the cost model. @default 1024 (half of the
   * segment-search's default 2048 MB; the stack sets it from the deployed memory size)
   */
  readonly taskIndexCacheBytes: number;
}

/** The local stack's ports (`fanout serve`, `npm start`), all on 127.0.0.1. */
export interface LocalStackPorts {
  /** `PORT`: the HTTP API. @default 3000 */
  readonly http: number;
  /** `LANCE_FANOUT_S3_PORT`: the local S3. @default 4569 */
  readonly s3: number;
  /** `LANCE_FANOUT_LAMBDA_PORT`: the local Lambda endpoint. @default 9001 */
  readonly lambda: number;
}

export interface FanoutConfig {
  /** Upper bound on segment-search tasks when a request sets no `maxTasks`. @default 16 */
  readonly maxTasks: number;
  /** Directory for segment views of local datasets. @default `<tmpdir>/lance-fanout-views` */
  readonly localViewRoot: string;
  /**
   * Key prefix, in each S3 dataset's own bucket, where its segment views live; required to search
   * S3 datasets. Same bucket because lancedb writes a clone into another bucket to the source's.
   */
  readonly s3ViewPrefix?: string;
  /** Dataset prefixes that may be searched (`s3://bucket/prefix/` or local directories). @default all */
  readonly allowedDatasets?: readonly string[];
  /** Whether local paths may be searched (true in embedded mode, false on Lambda). */
  readonly allowLocal: boolean;
  /** Deadline of a query when the request sets no `timeoutMs`. @default 25000 */
  readonly timeoutMs: number;
  /** Open segment views kept per process. @default 64 */
  readonly viewCacheSize: number;
  /**
   * Whether a process loads a view's whole index into memory once: `background` (after the
   * view's first search; see {@link frozenWhenIdle}), `eager` (before its first search), `off`.
   * A task then reads only its group's segments from memory, which is the fan-out's point: each
   * process holds a slice of the index hot. @default "background"
   */
  readonly prewarm: PrewarmMode;
  /**
   * Whether this process is frozen between invocations, as Lambda freezes an execution
   * environment: work it leaves running after answering stalls, and slows its next invocation.
   * So a `background` prewarm finishes before the task answers here, and runs on after the answer
   * elsewhere. @default true on Lambda (`AWS_LAMBDA_FUNCTION_NAME` set), else false
   */
  readonly frozenWhenIdle: boolean;
  /**
   * Bytes of lancedb's index cache per process; views are prewarmed only while the prewarmed
   * index files fit in 80% of it. @default half the Lambda function's memory, else 2 GiB
   */
  readonly indexCacheBytes: number;
  /**
   * Bytes of lancedb's metadata cache (file metadata, manifests) per process; lancedb's own
   * default is 1 GiB, beside the index cache. @default an eighth of the Lambda function's
   * memory, else 256 MiB
   */
  readonly metadataCacheBytes: number;
  /** Coverage of a request that sets none. @default "fallback" (native lancedb's behaviour) */
  readonly coverage: Coverage;
  /**
   * Segment-search environments prepare loads a typical query's views into, by that many
   * concurrent invokes (each runs in an environment of its own). @default on Lambda `maxTasks`
   * + 1, the most tasks one query runs at once; elsewhere 1 (tasks run in this process)
   */
  readonly prepareEnvironments: number;
  /** What gc keeps (shared/gc.ts). */
  readonly gc: {
    /** Views of the newest this many versions stay. @default 3 */
    readonly keepVersions: number;
    /**
     * A view stays while it is younger than this, or used by a version that was the latest
     * this recently; longer than any query's deadline (15 minutes). @default 60 minutes
     */
    readonly graceMs: number;
  };
  /** Datasets a scheduled prepare event prepares (`LANCE_FANOUT_PREPARE_DATASETS`). @default none */
  readonly prepareDatasets: readonly string[];
  /** Whether the functions log a JSON line per event (`LANCE_FANOUT_LOG`: on, off). @default on */
  readonly log: boolean;
  readonly s3: S3Config;
  readonly lambda: LambdaConfig;
  readonly localStack: LocalStackPorts;
}

export const PREWARM_MODES = ["background", "eager", "off"] as const;
export type PrewarmMode = (typeof PREWARM_MODES)[number];

type Env = Readonly<Record<string, string | undefined>>;

/**
 * Reads the configuration from environment variables, every one the product reads (all
 * optional; the README's Configuration table lists them). Lambda's own `AWS_LAMBDA_FUNCTION_NAME`
 * and `AWS_LAMBDA_FUNCTION_MEMORY_SIZE` set the defaults that differ on Lambda.
 * @throws TypeError naming the variable whose value is not valid.
 */
export function loadConfig(env: Env = process.env): FanoutConfig {
  const onLambda = Boolean(env.AWS_LAMBDA_FUNCTION_NAME);
  const maxTasks = intVar(env, "LANCE_FANOUT_MAX_TASKS", 16);
  return {
    maxTasks,
    localViewRoot: text(env.LANCE_FANOUT_VIEW_ROOT) ?? join(tmpdir(), "lance-fanout-views"),
    s3ViewPrefix: text(env.LANCE_FANOUT_S3_VIEW_PREFIX)?.replace(/^\/+|\/+$/g, ""),
    allowedDatasets: list(env.LANCE_FANOUT_ALLOWED_DATASETS),
    allowLocal: boolVar(env, "LANCE_FANOUT_ALLOW_LOCAL", !onLambda),
    timeoutMs: intVar(env, "LANCE_FANOUT_TIMEOUT_MS", 25_000),
    viewCacheSize: intVar(env, "LANCE_FANOUT_VIEW_CACHE_SIZE", 64),
    prewarm: enumVar(env, "LANCE_FANOUT_PREWARM", PREWARM_MODES, "background"),
    frozenWhenIdle: onLambda,
    indexCacheBytes: intVar(env, "LANCE_FANOUT_INDEX_CACHE_MB", lambdaMemoryMb(env, 2, 2048)) * MB,
    metadataCacheBytes:
      intVar(env, "LANCE_FANOUT_METADATA_CACHE_MB", lambdaMemoryMb(env, 8, 256)) * MB,
    coverage: enumVar(env, "LANCE_FANOUT_COVERAGE", COVERAGE_MODES, "fallback"),
    prepareEnvironments: intVar(
      env,
      "LANCE_FANOUT_PREPARE_ENVIRONMENTS",
      onLambda ? maxTasks + 1 : 1,
    ),
    gc: {
      keepVersions: intVar(env, "LANCE_FANOUT_GC_KEEP_VERSIONS", 3),
      graceMs: graceMinutes(env) * 60_000,
    },
    prepareDatasets: list(env.LANCE_FANOUT_PREPARE_DATASETS) ?? [],
    log: enumVar(env, "LANCE_FANOUT_LOG", ["on", "off"], "on") === "on",
    lambda: {
      segmentSearchFunctions: list(env.LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION) ?? [],
      mergeFunction: text(env.LANCE_FANOUT_MERGE_FUNCTION),
      endpoint: text(env.AWS_ENDPOINT_URL_LAMBDA) ?? text(env.AWS_ENDPOINT_URL),
      parallelism: intVar(env, "LANCE_FANOUT_PARALLELISM", 256),
      invokeMs: intVar(env, "LANCE_FANOUT_INVOKE_MS", 15),
      taskIndexCacheBytes: intVar(env, "LANCE_FANOUT_TASK_INDEX_CACHE_MB", 1024) * MB,
    },
    localStack: {
      http: intVar(env, "PORT", 3000),
      s3: intVar(env, "LANCE_FANOUT_S3_PORT", 4569),
      lambda: intVar(env, "LANCE_FANOUT_LAMBDA_PORT", 9001),
    },
    s3: {
      endpoint: text(env.AWS_ENDPOINT_URL_S3) ?? text(env.AWS_ENDPOINT_URL),
      region: text(env.AWS_REGION) ?? text(env.AWS_DEFAULT_REGION) ?? "us-east-1",
      accessKeyId: text(env.AWS_ACCESS_KEY_ID),
      secretAccessKey: text(env.AWS_SECRET_ACCESS_KEY),
      sessionToken: text(env.AWS_SESSION_TOKEN),
    },
  };
}

function text(value: string | undefined): string | undefined {
  const trimmed = value?.trim();
  return trimmed ? trimmed : undefined;
}

function list(value: string | undefined): string[] | undefined {
  const items = value
    ?.split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  return items?.length ? items : undefined;
}

function intVar(env: Env, name: string, fallback: number): number {
  const raw = text(env[name]);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new TypeError(`Environment variable ${name} must be a positive integer, got "${raw}"`);
  }
  return value;
}

const MB = 1024 * 1024;

/** A view must outlive every query that may still use it: no query runs over 15 minutes. */
function graceMinutes(env: Env): number {
  const minutes = intVar(env, "LANCE_FANOUT_GC_GRACE_MINUTES", 60);
  const floor = Math.ceil(LIMITS.maxTimeoutMs / 60_000);
  if (minutes <= floor) {
    throw new TypeError(
      `Environment variable LANCE_FANOUT_GC_GRACE_MINUTES must be over ${floor} (the longest query deadline), got ${minutes}`,
    );
  }
  return minutes;
}

/** `1/divisor` of the Lambda function's memory in MiB, or `fallback` outside Lambda. */
function lambdaMemoryMb(env: Env, divisor: number, fallback: number): number {
  const lambdaMb = Number(text(env.AWS_LAMBDA_FUNCTION_MEMORY_SIZE));
  return Number.isSafeInteger(lambdaMb) && lambdaMb > 0 ? Math.floor(lambdaMb / divisor) : fallback;
}

function enumVar<T extends string>(
  env: Env,
  name: string,
  values: readonly T[],
  fallback: NoInfer<T>,
): T {
  const raw = text(env[name])?.toLowerCase() ?? fallback;
  if (!(values as readonly string[]).includes(raw)) {
    throw new TypeError(
      `Environment variable ${name} must be one of ${values.join(", ")}, got "${raw}"`,
    );
  }
  return raw as T;
}

function boolVar(env: Env, name: string, fallback: boolean): boolean {
  const raw = text(env[name])?.toLowerCase();
  if (raw === undefined) return fallback;
  if (raw === "true" || raw === "1") return true;
  if (raw === "false" || raw === "0") return false;
  throw new TypeError(`Environment variable ${name} must be true or false, got "${raw}"`);
}
