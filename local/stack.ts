/**
 * The embedded local stack: local S3, the functions behind a local Lambda invoke endpoint (with
 * their deployed memory sizes and timeouts, frozen between invocations), and the HTTP API, all on
 * 127.0.0.1, wired exactly as on AWS (real SDK clients, real HTTP).
 * @module
 */
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { Writable } from "node:stream";
import { FUNCTION_DEFAULTS } from "../functions/defaults.js";
import { bundleFunctions } from "./bundle.js";
import { type HttpApi, startHttpApi } from "./http-api.js";
import { type LocalLambda, startLocalLambda } from "./lambda.js";
import { freePort } from "./net.js";
import { type LocalS3, startLocalS3 } from "./s3.js";

export interface StackOptions {
  /** Where the local S3 keeps its objects. @default `.data` in the working directory */
  readonly dataDir?: string;
  /** HTTP API port (`PORT`). @default 3000; 0 picks a free port */
  readonly apiPort?: number;
  /** Local S3 port (`LANCE_FANOUT_S3_PORT`). @default 4569 */
  readonly s3Port?: number;
  /** Local Lambda endpoint port (`LANCE_FANOUT_LAMBDA_PORT`). @default 9001 */
  readonly lambdaPort?: number;
  /** Bucket holding datasets and views. @default "lance-fanout" */
  readonly bucket?: string;
  /**
   * Worker processes per function (its concurrency limit, like reserved concurrency). Calls over
   * the limit wait for a free worker (first in, first out); only when too many wait do they get
   * 429, which the planner and the HTTP API retry with jittered backoff.
   * @default { planner: 8, segmentSearch: 8, merge: 4 }
   */
  readonly concurrency?: {
    readonly planner?: number;
    readonly segmentSearch?: number;
    readonly merge?: number;
  };
  /** Per-invocation timeout of every function. @default each function's deployed timeout */
  readonly timeoutMs?: number;
  /**
   * GET /health answers 503 "starting" with this reason until `api.ready()` (the stack's user
   * prepares more, e.g. `npm start` its demo dataset). @default undefined: ready once it listens
   */
  readonly starting?: string;
  /** Freeze idle workers between invocations, as Lambda does. @default true */
  readonly freeze?: boolean;
  /**
   * Segment-search functions, each with `concurrency.segmentSearch` workers: group g's tasks go
   * to function g mod slots (`segmentSearchSlot`), so its workers keep serving the same groups.
   * @default 1
   */
  readonly segmentSearchSlots?: number;
  /**
   * Index cache of each segment-search worker in MiB (its `LANCE_FANOUT_INDEX_CACHE_MB`), and
   * what the planner's cost model is told it is (`LANCE_FANOUT_TASK_INDEX_CACHE_MB`); the user's
   * settings of either win. @default half the segment-search's memory, as on Lambda
   */
  readonly indexCacheMb?: number;
  /**
   * The user's environment: every `LANCE_FANOUT_*` variable set in it reaches the functions
   * over the stack's own defaults (see {@link userSettings}). @default process.env
   */
  readonly userEnv?: NodeJS.ProcessEnv;
  /** Where the functions' log lines go. @default this process's stdout and stderr */
  readonly functionLog?: Writable;
}

/** The local segment-search function of slot `n`: the first has the plain name. */
export function segmentSearchSlot(n: number): string {
  return n === 0 ? FUNCTIONS.segmentSearch : `${FUNCTIONS.segmentSearch}-${n}`;
}

export interface Stack {
  readonly s3: LocalS3;
  readonly lambda: LocalLambda;
  readonly api: HttpApi;
  readonly bucket: string;
  /** The environment the functions run with (also what a client in this process needs). */
  readonly env: Readonly<Record<string, string>>;
  stop(): Promise<void>;
}

export const FUNCTIONS = {
  planner: "lance-fanout-planner",
  segmentSearch: "lance-fanout-segment-search",
  merge: "lance-fanout-merge",
  gc: "lance-fanout-gc",
} as const;

export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const dataDir = options.dataDir ?? join(process.cwd(), ".data");
  const bucket = options.bucket ?? "lance-fanout";
  await mkdir(join(dataDir, "s3"), { recursive: true });
  const s3 = await startLocalS3({
    directory: join(dataDir, "s3"),
    port: options.s3Port ?? 4569,
    buckets: [bucket],
  });
  const stops: (() => Promise<void>)[] = [() => s3.stop()];
  try {
    // The planner's env names the Lambda endpoint, so its port is fixed before it starts.
    const lambdaPort = options.lambdaPort === 0 ? await freePort() : (options.lambdaPort ?? 9001);
    const limits = options.concurrency ?? {};
    const segmentSearchConcurrency = limits.segmentSearch ?? 8;
    const slots = Array.from({ length: options.segmentSearchSlots ?? 1 }, (_, n) =>
      segmentSearchSlot(n),
    );
    const env = {
      ...localEnv(s3.endpoint, `http://127.0.0.1:${lambdaPort}`, bucket),
      LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION: slots.join(","),
      // Every worker a task may land in: prepare loads a typical query's views into all of them.
      LANCE_FANOUT_PREPARE_ENVIRONMENTS: String(segmentSearchConcurrency * slots.length),
      // Each segment-search worker's index cache, as the deployed memory size gives it.
      LANCE_FANOUT_TASK_INDEX_CACHE_MB: String(
        options.indexCacheMb ?? FUNCTION_DEFAULTS.segmentSearch.memorySize / 2,
      ),
      ...userSettings(options.userEnv ?? process.env),
    };
    const segmentSearchEnv: Record<string, string> =
      options.indexCacheMb === undefined || "LANCE_FANOUT_INDEX_CACHE_MB" in env
        ? {}
        : { LANCE_FANOUT_INDEX_CACHE_MB: String(options.indexCacheMb) };
    const bundles = await bundleFunctions();
    // Memory sizes and timeouts are the deployed ones (functions/defaults.ts).
    const fn = (
      name: string,
      module: string,
      concurrency: number,
      size: { readonly memorySize: number; readonly timeoutSeconds: number },
      fnEnv: Readonly<Record<string, string>> = {},
    ) => ({
      name,
      module,
      concurrency,
      memorySize: size.memorySize,
      timeoutMs: options.timeoutMs ?? size.timeoutSeconds * 1000,
      env: fnEnv,
    });
    const lambda = await startLocalLambda({
      port: lambdaPort,
      workerEntry: bundles.worker,
      env,
      freeze: options.freeze,
      output: options.functionLog,
      functions: [
        fn(FUNCTIONS.planner, bundles.planner, limits.planner ?? 8, FUNCTION_DEFAULTS.planner),
        ...slots.map((name) =>
          fn(
            name,
            bundles.segmentSearch,
            segmentSearchConcurrency,
            FUNCTION_DEFAULTS.segmentSearch,
            segmentSearchEnv,
          ),
        ),
        fn(FUNCTIONS.merge, bundles.merge, limits.merge ?? 4, FUNCTION_DEFAULTS.merge),
        fn(FUNCTIONS.gc, bundles.gc, 1, FUNCTION_DEFAULTS.gc),
      ],
    });
    stops.unshift(() => lambda.stop());
    const api = await startHttpApi({
      port: options.apiPort ?? 3000,
      plannerFunction: FUNCTIONS.planner,
      lambdaEndpoint: lambda.endpoint,
      starting: options.starting,
    });
    stops.unshift(() => api.stop());
    return { s3, lambda, api, bucket, env, stop: () => stopAll(stops) };
  } catch (err) {
    await stopAll(stops);
    throw err;
  }
}

/**
 * The environment of the local stack's functions, and of any client of it in this process.
 * Everything points at loopback: explicit endpoints and credentials, no instance metadata, so
 * neither the AWS SDK nor lancedb (which re-opens fresh clones without their storage options)
 * can fall back to AWS.
 */
export function localEnv(
  s3Endpoint: string,
  lambdaEndpoint: string,
  bucket = "lance-fanout",
): Record<string, string> {
  return {
    AWS_EC2_METADATA_DISABLED: "true",
    AWS_REGION: "us-east-1",
    AWS_ACCESS_KEY_ID: "S3RVER",
    AWS_SECRET_ACCESS_KEY: "S3RVER",
    AWS_ENDPOINT_URL: s3Endpoint,
    AWS_ENDPOINT_URL_S3: s3Endpoint,
    AWS_ENDPOINT_URL_LAMBDA: lambdaEndpoint,
    AWS_ALLOW_HTTP: "true",
    LANCE_FANOUT_S3_VIEW_PREFIX: "lance-fanout-views",
    LANCE_FANOUT_ALLOWED_DATASETS: `s3://${bucket}/`,
    LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION: FUNCTIONS.segmentSearch,
    LANCE_FANOUT_MERGE_FUNCTION: FUNCTIONS.merge,
    LANCEDB_LOG: "error",
    LANCE_FANOUT_LOG: process.env.LANCE_FANOUT_LOG ?? "on",
    // Tasks here hardly overlap: they share this machine's cores and one single-threaded local
    // S3 that serves every task's reads in turn (bench/README.md: each extra task adds ~35-50 ms
    // at batch 1, warm). Telling the cost model so makes `auto` choose what is fastest here.
    LANCE_FANOUT_PARALLELISM: "1",
    LANCE_FANOUT_INVOKE_MS: "3",
    // The workers run on the Node that started the stack, which need not be Lambda's.
    AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true",
  };
}

/** How the stack wires its functions to one another: not the user's to change. */
const WIRING = new Set(["LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION", "LANCE_FANOUT_MERGE_FUNCTION"]);

/**
 * The `LANCE_FANOUT_*` variables the user set (an allow-list, a coverage, a timeout...): the
 * functions get them as on a deployment configured so; the stack's defaults fill in the rest.
 */
export function userSettings(env: NodeJS.ProcessEnv): Record<string, string> {
  return Object.fromEntries(
    Object.entries(env).filter(
      (entry): entry is [string, string] =>
        entry[0].startsWith("LANCE_FANOUT_") && !WIRING.has(entry[0]) && Boolean(entry[1]?.trim()),
    ),
  );
}

async function stopAll(stops: readonly (() => Promise<void>)[]): Promise<void> {
  for (const stop of stops) await stop().catch(() => {});
}
