/**
 * The local stack as the benchmark needs it: the same parts as `local/stack.ts` (local S3,
 * bundled function workers behind the local Lambda endpoint, the planner invoking them with the
 * real SDK) but with an S3-like network in front of S3 (first-byte latency and per-connection
 * bandwidth, see s3-proxy.ts), chosen worker counts and thread variables, and workers that can be
 * replaced by fresh ones for cold runs. No HTTP API: the benchmark invokes the planner directly.
 * @module
 */
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { InvokeCommand, LambdaClient } from "@aws-sdk/client-lambda";
import { HeadObjectCommand, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { lambdaInvoker, lambdaProfile } from "../functions/common/lambda-invoker.js";
import { FUNCTION_DEFAULTS } from "../functions/defaults.js";
import { bundleFunctions, type FunctionBundles } from "../local/bundle.js";
import { type LocalLambda, startLocalLambda } from "../local/lambda.js";
import { freePort } from "../local/net.js";
import { type LocalS3, startLocalS3 } from "../local/s3.js";
import { FUNCTIONS, localEnv, segmentSearchSlot } from "../local/stack.js";
import { loadConfig, type PrewarmMode } from "../shared/config.js";
import { createObjectStore, type ObjectStore } from "../shared/objects.js";
import type { SearchRequest } from "../shared/request.js";
import { createRuntime, type Runtime } from "../shared/runtime.js";
import { vectorSearch } from "../shared/search.js";
import type { DatasetInfo } from "./datasets.js";
import { type ProcessResources, procResources } from "./env.js";
import { type S3Proxy, type S3ProxyOptions, startS3Proxy } from "./s3-proxy.js";

export const BUCKET = "lance-fanout";
/** The local stack's dummy credentials (s3rver's account); nothing here talks to AWS. */
const LOOPBACK_CREDENTIALS = { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" };

/** Every function's timeout in the bench stack (a planner waits for tasks that wait for S3). */
const WORKER_TIMEOUT_MS = 120_000;

/** A Lambda client of the local endpoint; no SDK retries (the product's invoker has its own). */
export function loopbackLambdaClient(endpoint: string | undefined): LambdaClient {
  return new LambdaClient({
    endpoint,
    maxAttempts: 1,
    region: "us-east-1",
    credentials: LOOPBACK_CREDENTIALS,
  });
}

export interface BenchStackOptions {
  readonly dataDir: string;
  readonly latencyMs: number;
  readonly bandwidthMBps: number;
  /** segment-search workers (its concurrency). */
  readonly workers: number;
  /** Extra environment of every worker (thread counts). */
  readonly workerEnv: Readonly<Record<string, string>>;
  /** LANCE_FANOUT_PREWARM of the workers; native prewarms its index unless "off". */
  readonly prewarm: PrewarmMode;
  /** Freeze idle workers between invocations, as Lambda does. @default true */
  readonly freeze?: boolean;
  /** Sees every S3 request through the proxy (GET profiles). */
  readonly onRequest?: S3ProxyOptions["onRequest"];
  /** Segment-search functions, `workers` workers each (local/stack.ts `segmentSearchSlots`). @default 1 */
  readonly slots?: number;
  /** Memory size of each segment-search worker, in MB. @default the deployed one */
  readonly segmentSearchMemorySize?: number;
}

/** The local S3 behind the S3-like proxy, without functions: what in-process runs on S3 need. */
export interface BenchS3 {
  readonly s3: LocalS3;
  readonly proxy: S3Proxy;
  /** lancedb storage options through the proxy. */
  storageOptions(): Record<string, string>;
  stop(): Promise<void>;
}

/** The local S3 itself, not through the proxy: what the harness reads uncounted and undelayed. */
export function directObjectStore(storage: Pick<BenchS3, "s3">): ObjectStore {
  const { s3 } = storage;
  return createObjectStore({
    region: "us-east-1",
    endpoint: s3.endpoint,
    accessKeyId: s3.credentials.accessKeyId,
    secretAccessKey: s3.credentials.secretAccessKey,
  });
}

export async function startBenchS3(
  options: Pick<BenchStackOptions, "dataDir" | "latencyMs" | "bandwidthMBps" | "onRequest">,
): Promise<BenchS3> {
  const s3 = await startLocalS3({
    directory: options.dataDir,
    port: 0,
    buckets: [BUCKET],
  });
  const proxy = await startS3Proxy({
    upstream: s3.endpoint,
    latencyMs: options.latencyMs,
    bandwidthMBps: options.bandwidthMBps,
    ...(options.onRequest ? { onRequest: options.onRequest } : {}),
  });
  const restoreEnv = useEndpoint(proxy.endpoint);
  return {
    s3,
    proxy,
    storageOptions: () => ({
      aws_endpoint: proxy.endpoint,
      allow_http: "true",
      aws_access_key_id: s3.credentials.accessKeyId,
      aws_secret_access_key: s3.credentials.secretAccessKey,
      aws_region: "us-east-1",
    }),
    async stop() {
      restoreEnv();
      await proxy.stop();
      await s3.stop();
    },
  };
}

/**
 * lancedb re-opens a fresh clone from the environment, without its storage options (see
 * shared/views.ts `clone`): while the local S3 runs, this process's environment names the proxy,
 * as the stack's workers' does, or a view made in this process would try AWS's default endpoint
 * (seen: `GET https://s3.us-east-1.amazonaws.com/...`, failing after retries, ~5 s per view).
 * Answers the undo.
 */
function useEndpoint(endpoint: string): () => void {
  const names = ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"] as const;
  const saved = [...names, "AWS_ALLOW_HTTP"].map((n) => [n, process.env[n]] as const);
  for (const n of names) process.env[n] = endpoint;
  process.env.AWS_ALLOW_HTTP = "true";
  return () => {
    for (const [n, v] of saved) {
      if (v === undefined) delete process.env[n];
      else process.env[n] = v;
    }
  };
}

export interface BenchStack extends BenchS3 {
  readonly lambdaEndpoint: string;
  /** LANCE_FANOUT_PREWARM of the current workers. */
  readonly prewarm: PrewarmMode;
  /** Environment of the functions; also what this process needs to reach S3 through the proxy. */
  readonly env: Readonly<Record<string, string>>;
  /**
   * Replaces every worker by a fresh process (empty caches) and starts them (init excluded);
   * `prewarm` changes LANCE_FANOUT_PREWARM for the new workers.
   */
  freshWorkers(prewarm?: PrewarmMode): Promise<void>;
  /**
   * Runs `request` once with each of its tasks sent to every segment-search worker: afterwards
   * every worker holds every view of that plan (prewarmed when the workers prewarm eagerly).
   */
  warmEveryWorker(request: Record<string, unknown>): Promise<void>;
  /** Every worker's peak RSS and CPU so far (every function and slot, retired workers too). */
  resources(): ProcessResources[];
  /** Pids of a function's live workers (memory over time: /proc/<pid>/status). */
  workerPids(name: string): number[];
}

export async function startBenchStack(options: BenchStackOptions): Promise<BenchStack> {
  const storage = await startBenchS3(options);
  const { proxy } = storage;
  const lambdaPort = await freePort();
  const lambdaEndpoint = `http://127.0.0.1:${lambdaPort}`;
  let env: Record<string, string> = {
    ...localEnv(proxy.endpoint, lambdaEndpoint, BUCKET),
    LANCE_FANOUT_MAX_TASKS: "1000",
    LANCE_FANOUT_LOG: process.env.LANCE_FANOUT_LOG ?? "off",
    LANCE_FANOUT_VIEW_CACHE_SIZE: "256",
    // Prepare loads a typical query's views into every segment-search worker, as the local stack.
    LANCE_FANOUT_PREPARE_ENVIRONMENTS: String(options.workers * (options.slots ?? 1)),
    LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION: slotNames(options.slots ?? 1).join(","),
    LANCE_FANOUT_PREWARM: options.prewarm,
    // A batch of 100 through the stack is tens of thousands of reads, which the single-threaded
    // local S3 serves one at a time: give it up to the workers' own timeout, less a margin.
    LANCE_FANOUT_TIMEOUT_MS: String(WORKER_TIMEOUT_MS - 10_000),
    ...options.workerEnv,
  };
  // Plans as the planner function does, for warmEveryWorker; it only reads the manifest. Its
  // tasks run one at a time, each loading a view's index in every worker: no query deadline.
  const planner = createRuntime(loadConfig({ ...env, LANCE_FANOUT_TIMEOUT_MS: "3600000" }));
  const bundles = await bundleFunctions();
  const launched = () => launch(bundles, lambdaPort, env, options);
  let lambda = await launched();
  let retired: ProcessResources[] = [];
  const names = functionNames(options.slots ?? 1);
  const resources = () =>
    names.flatMap((name) =>
      lambda.workerPids(name).flatMap((pid) => procResources(name, pid) ?? []),
    );
  return {
    ...storage,
    lambdaEndpoint,
    get prewarm() {
      return env.LANCE_FANOUT_PREWARM as PrewarmMode;
    },
    get env() {
      return env;
    },
    async freshWorkers(prewarm) {
      retired = [...retired, ...resources()];
      await lambda.stop();
      if (prewarm) env = { ...env, LANCE_FANOUT_PREWARM: prewarm };
      lambda = await launched();
      await prewarmProcesses(lambdaEndpoint, options.workers, options.slots);
    },
    warmEveryWorker: (request) => warmEveryWorker(planner, env, options.workers, request),
    resources: () => [...retired, ...resources()],
    workerPids: (name) => lambda.workerPids(name),
    async stop() {
      await lambda.stop();
      await storage.stop();
    },
  };
}

function slotNames(slots: number): string[] {
  return Array.from({ length: slots }, (_, n) => segmentSearchSlot(n));
}

/** Every function the bench stack runs: the planner, each segment-search slot, the merge. */
function functionNames(slots: number): string[] {
  return [FUNCTIONS.planner, ...slotNames(slots), FUNCTIONS.merge];
}

/** The functions with their deployed memory sizes (functions/defaults.ts) unless told. */
function launch(
  bundles: FunctionBundles,
  port: number,
  env: Record<string, string>,
  options: BenchStackOptions,
): Promise<LocalLambda> {
  const { workers } = options;
  const searchMemory =
    options.segmentSearchMemorySize ?? FUNCTION_DEFAULTS.segmentSearch.memorySize;
  const fn = (name: string, module: string, concurrency: number, memorySize: number) => ({
    name,
    module,
    concurrency,
    memorySize,
    timeoutMs: WORKER_TIMEOUT_MS,
  });
  return startLocalLambda({
    port,
    workerEntry: bundles.worker,
    env,
    freeze: options.freeze ?? true,
    functions: [
      fn(FUNCTIONS.planner, bundles.planner, 8, FUNCTION_DEFAULTS.planner.memorySize),
      ...slotNames(options.slots ?? 1).map((name) =>
        fn(name, bundles.segmentSearch, workers, searchMemory),
      ),
      fn(FUNCTIONS.merge, bundles.merge, 4, FUNCTION_DEFAULTS.merge.memorySize),
    ],
  });
}

/**
 * Starts the worker processes (Node start, module import, native lancedb load) with invalid
 * payloads that each function rejects before touching any dataset: a cold run then measures
 * empty caches, not process creation (Lambda's init phase, reported apart).
 */
export async function prewarmProcesses(
  endpoint: string,
  workers: number,
  slots = 1,
): Promise<number> {
  const client = loopbackLambdaClient(endpoint);
  const started = performance.now();
  const poke = (name: string) =>
    client.send(new InvokeCommand({ FunctionName: name, Payload: "{}" })).catch(() => undefined);
  await Promise.all([
    poke(FUNCTIONS.planner),
    ...slotNames(slots).flatMap((name) => Array.from({ length: workers }, () => poke(name))),
    poke(FUNCTIONS.merge),
  ]);
  client.destroy();
  return performance.now() - started;
}

/**
 * Steady state by construction, not by sampling. The plan is made here, as the planner function
 * makes it (same environment, same execution profile), and its tasks run one at a time, each
 * sent to the segment-search function `workers` times at once. A pool that gives a worker one
 * invocation at a time must then hand each copy to a different worker, so every worker opens
 * (and, prewarming eagerly, loads) every view of the plan. With the pool idle nothing is throttled.
 */
async function warmEveryWorker(
  runtime: Runtime,
  env: Readonly<Record<string, string>>,
  workers: number,
  request: Record<string, unknown>,
): Promise<void> {
  const client = loopbackLambdaClient(env.AWS_ENDPOINT_URL_LAMBDA);
  const lambda = lambdaInvoker({
    segmentSearchFunction: FUNCTIONS.segmentSearch,
    mergeFunction: FUNCTIONS.merge,
    client,
    profile: lambdaProfile(loadConfig(env).lambda),
  });
  let previous: Promise<unknown> = Promise.resolve();
  const everyWorker = (task: Parameters<typeof lambda.searchSegments>[0]) => {
    const copies = previous.then(() =>
      Promise.all(Array.from({ length: workers }, () => lambda.searchSegments(task))),
    );
    previous = copies.catch(() => undefined);
    return copies.then(([first]) => first as NonNullable<typeof first>);
  };
  try {
    await vectorSearch(request as SearchRequest, {
      runtime,
      invoker: { ...lambda, searchSegments: everyWorker },
    });
  } finally {
    client.destroy();
  }
}

/**
 * The bare cost of one synchronous invoke through the local Lambda endpoint: a payload the
 * segment-search function rejects at validation (HTTP, worker IPC, JSON, zod; no Lance work).
 */
export async function invokeProbe(endpoint: string, samples: number): Promise<number[]> {
  const client = loopbackLambdaClient(endpoint);
  const out: number[] = [];
  for (let i = 0; i < samples; i++) {
    const t0 = performance.now();
    await client.send(new InvokeCommand({ FunctionName: FUNCTIONS.segmentSearch, Payload: "{}" }));
    out.push(performance.now() - t0);
  }
  client.destroy();
  return out;
}

/** Copies a local dataset into the local S3 once (a marker object records the manifest hash). */
export async function uploadDataset(
  stack: Pick<BenchS3, "s3">,
  info: DatasetInfo,
): Promise<string> {
  const prefix = `bench/${info.name}`;
  const uri = `s3://${BUCKET}/${prefix}/items.lance`;
  const client = new S3Client({
    endpoint: stack.s3.endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: stack.s3.credentials,
  });
  const marker = `${prefix}/.uploaded-${info.manifestHash.slice(0, 16)}`;
  const done = await client
    .send(new HeadObjectCommand({ Bucket: BUCKET, Key: marker }))
    .then(() => true)
    .catch(() => false);
  if (!done) {
    const files = (await readdir(info.uri, { recursive: true, withFileTypes: true })).filter((e) =>
      e.isFile(),
    );
    for (const file of files) {
      const path = join(file.parentPath, file.name);
      const key = `${prefix}/items.lance/${relative(info.uri, path)}`;
      await client.send(
        new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: await readFile(path) }),
      );
    }
    await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: marker, Body: "ok" }));
  }
  client.destroy();
  return uri;
}
