/**
 * The local Lambda service of the embedded stack and of the tests: AWS Lambda's Invoke API on
 * 127.0.0.1, as `@aws-sdk/client-lambda`'s `InvokeCommand` and the AWS CLI speak it, running each
 * function's handler in worker processes (`local/worker.ts`, forked under tsx).
 *
 * It behaves like Lambda where the code under test could tell the difference
 * (`local/function-pool.ts`): each worker serves one invocation at a time with the function's
 * memory size (`AWS_LAMBDA_FUNCTION_MEMORY_SIZE`; over it, `Runtime.OutOfMemory`) and timeout,
 * and is frozen between invocations. Where Lambda scales out, an invocation waits for a free
 * worker instead. The API takes names, partial and full ARNs, the `$LATEST` qualifier, the
 * `RequestResponse`, `Event` (202) and `DryRun` (204) invocation types and `LogType: Tail`
 * (`X-Amz-Log-Result`).
 *
 * Status codes, `x-amzn-ErrorType` names and bodies copy Lambda's, so the SDK raises the same
 * errors as against AWS: `ResourceNotFoundException`, `TooManyRequestsException`,
 * `InvalidRequestContentException`, `InvalidParameterValueException`, and Lambda's
 * `RequestEntityTooLargeException` and `ValidationException` (names missing from the SDK's model,
 * so the SDK raises a generic `LambdaServiceException` with that name).
 * @module
 */
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { extname, isAbsolute } from "node:path";
import type { Writable } from "node:stream";
import { setImmediate as nextTurn } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { MAX_PAYLOAD_BYTES } from "../shared/payload.js";
import {
  FunctionPool,
  type FunctionStats,
  type InvokeResult,
  type Outcome,
} from "./function-pool.js";
import { type InvokeRequest, RequestError, readInvokeRequest } from "./invoke-request.js";
import { HOST, listenOnLoopback, readBody, sendJson } from "./net.js";
import { type Reaper, startReaper } from "./reaper.js";
import type { LambdaError } from "./worker-protocol.js";

export type { FunctionStats } from "./function-pool.js";

export interface LocalFunction {
  /** The function name clients invoke (Lambda's rules: letters, digits, `-`, `_`, up to 64). */
  readonly name: string;
  /** Absolute path of the handler module (a .ts file, run under tsx); it exports `handler`. */
  readonly module: string;
  /** Max parallel invocations = max workers. @default 4 */
  readonly concurrency?: number;
  /** @default 30000 */
  readonly timeoutMs?: number;
  /**
   * Lambda's `MemorySize` in MB: the worker's `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`, and the resident
   * memory over which it is killed (`Runtime.OutOfMemory`). @default 1024
   */
  readonly memorySize?: number;
  /**
   * Invocations that may wait for a free worker when all are busy; over it, 429. A wait lasts at
   * most `timeoutMs`. @default 128 (8 queries of 16 tasks each)
   */
  readonly maxQueued?: number;
  /** Environment of this function's workers, over {@link LocalLambdaOptions.env}. */
  readonly env?: Readonly<Record<string, string>>;
  /**
   * The program, with its first arguments, that runs this function's workers instead of this
   * Node: another Node build, e.g. an arm64 one under qemu
   * (`["qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu", "/path/to/arm64/node"]`). It runs
   * JavaScript only (a bundled worker entry and module): the TypeScript loader is this Node's.
   * @default process.execPath
   */
  readonly command?: readonly string[];
}

export interface LocalLambdaOptions {
  /** @default 0 = pick a free port */
  readonly port?: number;
  readonly functions: readonly LocalFunction[];
  /** Environment of every worker, merged over a minimal safe env (no parent credentials). */
  readonly env?: Readonly<Record<string, string>>;
  /**
   * Where the workers' output (their log lines) goes, as CloudWatch takes a function's; each
   * invocation's own log still answers `LogType: Tail`. @default this process's stdout and stderr
   */
  readonly output?: Writable;
  /** The worker entry to fork, e.g. a bundled `worker.mjs`. @default local/worker.ts under tsx */
  readonly workerEntry?: string;
  /**
   * Freeze idle workers (SIGSTOP until their next invocation), as Lambda freezes idle execution
   * environments: timers, background loads and sockets make no progress in between.
   * @default true (false on Windows, which has no SIGSTOP)
   */
  readonly freeze?: boolean;
}

export interface LocalLambda {
  /** http://127.0.0.1:PORT, for `new LambdaClient({ endpoint })` or `AWS_ENDPOINT_URL_LAMBDA`. */
  readonly endpoint: string;
  readonly port: number;
  /** Whether idle workers are frozen. */
  readonly freeze: boolean;
  stats(): Record<string, FunctionStats>;
  /** Pids of live worker processes, for tests. */
  workerPids(name: string): number[];
  /** Makes the next invocation of `name` a straggler, `ms` slow to start (tests, benchmark). */
  stallNext(name: string, ms: number): void;
  /** Kills every worker, waits for them to exit and closes the server. */
  stop(): Promise<void>;
}

/** Lambda's limit on an asynchronous (`Event`) invocation's payload. */
const MAX_EVENT_BYTES = 1024 * 1024;
/** Lambda's `X-Amz-Log-Result`: the last 4 KB of the invocation's log. */
const LOG_TAIL_BYTES = 4096;
const INVOKE_PATH = /^\/2015-03-31\/functions\/([^/]+)\/invocations$/;
const FUNCTION_NAME = /^[A-Za-z0-9_-]{1,64}$/;
/** What a worker inherits from this process: enough to run node and find a temp directory. */
const INHERITED_ENV = ["PATH", "HOME", "TMPDIR", "LANG", "TZ"] as const;
/** The worker entry next to this module (worker.ts here, worker.js once compiled). */
const WORKER_ENTRY = fileURLToPath(
  new URL(`./worker${extname(fileURLToPath(import.meta.url))}`, import.meta.url),
);

/** Starts the service on 127.0.0.1; workers start on demand. */
export async function startLocalLambda(options: LocalLambdaOptions): Promise<LocalLambda> {
  const { port = 0, functions, env = {}, workerEntry = WORKER_ENTRY } = options;
  const freeze = options.freeze ?? process.platform !== "win32";
  const reaper: Reaper | undefined = freeze ? startReaper() : undefined;
  const pools = new Map<string, FunctionPool>();
  const pids = () => [...pools.values()].flatMap((pool) => pool.pids());
  for (const fn of functions) {
    validateFunction(fn);
    validateCommand(fn, workerEntry);
    if (pools.has(fn.name)) throw new TypeError(`startLocalLambda: duplicate function ${fn.name}`);
    const memorySize = fn.memorySize ?? 1024;
    pools.set(
      fn.name,
      new FunctionPool({
        name: fn.name,
        module: fn.module,
        entry: workerEntry,
        command: fn.command ?? [process.execPath],
        env: workerEnv(env, fn, memorySize),
        concurrency: fn.concurrency ?? 4,
        timeoutMs: fn.timeoutMs ?? 30_000,
        memorySize,
        maxQueued: fn.maxQueued ?? 128,
        freeze,
        output: options.output,
        onWorkers: () => reaper?.track(pids()),
      }),
    );
  }

  let stopping = false;
  const { server, port: bound } = await listenOnLoopback(port, (req, res) => {
    handle(req, res, pools, () => stopping).catch((err: unknown) => {
      sendError(res, 500, "ServiceException", { Type: "Service", Message: String(err) });
    });
  });

  let stopped: Promise<void> | undefined;
  return {
    endpoint: `http://${HOST}:${bound}`,
    port: bound,
    freeze,
    stats: () => Object.fromEntries([...pools].map(([name, pool]) => [name, pool.stats()])),
    workerPids: (name) => pools.get(name)?.pids() ?? [],
    stallNext: (name, ms) => {
      const pool = pools.get(name);
      if (!pool) throw new TypeError(`stallNext: no function ${name}`);
      pool.stallNext(ms);
    },
    stop() {
      stopped ??= (async () => {
        stopping = true;
        const closed = new Promise<void>((resolve, reject) => {
          server.close((err) => (err ? reject(err) : resolve()));
        });
        // In-flight invocations fail with Runtime.ExitError; their responses are written in the
        // microtasks that follow, so one turn of the event loop lets them out before the close.
        await Promise.all([...pools.values()].map((pool) => pool.stop()));
        reaper?.close();
        await nextTurn();
        server.closeAllConnections();
        await closed;
      })();
      return stopped;
    },
  };
}

async function handle(
  req: IncomingMessage,
  res: ServerResponse,
  pools: ReadonlyMap<string, FunctionPool>,
  stopping: () => boolean,
): Promise<void> {
  const requestId = randomUUID();
  res.setHeader("x-amzn-RequestId", requestId);
  const url = new URL(req.url ?? "/", `http://${HOST}`);
  const match = req.method === "POST" ? INVOKE_PATH.exec(url.pathname) : null;
  if (!match?.[1]) {
    sendError(res, 404, "UnknownOperationException", {
      Type: "User",
      message: "Unknown operation",
    });
    return;
  }
  let request: InvokeRequest;
  try {
    // The SDK percent-encodes the name (an ARN's colons too).
    const name = safeDecode(match[1]) ?? match[1];
    request = readInvokeRequest(name, url.searchParams, req.headers, (n) => pools.has(n));
  } catch (err) {
    if (!(err instanceof RequestError)) throw err;
    sendError(res, err.status, err.errorType, err.body);
    return;
  }
  const pool = pools.get(request.name) as FunctionPool;
  const limit = request.invocationType === "Event" ? MAX_EVENT_BYTES : MAX_PAYLOAD_BYTES;
  const body = await readBody(req, limit, "drain");
  if (body === undefined) {
    const message = `Request must be smaller than ${limit} bytes for the InvokeFunction operation`;
    sendError(res, 413, "RequestEntityTooLargeException", { Type: "User", message });
    return;
  }
  // Lambda gives a handler invoked without a payload an empty object.
  const event = body.length === 0 ? "{}" : body.toString("utf8");
  try {
    JSON.parse(event);
  } catch (err) {
    const message = `Could not parse request body into json: ${(err as Error).message}`;
    sendError(res, 400, "InvalidRequestContentException", { Type: "User", message });
    return;
  }
  // The function exists and the request is valid: that is all a dry run checks.
  if (request.invocationType === "DryRun") {
    res.writeHead(204).end();
    return;
  }
  // Checked in the same tick as a worker spawn (in pool.invoke), so none starts after stop().
  if (stopping()) {
    sendStopping(res);
    return;
  }
  if (request.invocationType === "Event") {
    // pool.invoke takes its worker slot or queue place before its first await, so the invocation
    // is under way when the 202 goes out.
    void invokeAsync(pool, request.name, requestId, event, stopping);
    res.writeHead(202, { "Content-Length": 0 }).end();
    return;
  }
  // A caller that goes away leaves the queue; a running invocation runs to its end, as on Lambda.
  const gone = new AbortController();
  res.on("close", () => gone.abort());
  const result = await pool.invoke(requestId, event, gone.signal);
  if (result.type === "done") {
    sendOutcome(res, result.outcome, request.tail);
  } else if (result.type === "stopping") {
    sendStopping(res);
  } else {
    sendThrottled(res);
  }
}

/**
 * An `Event` invocation: its result is dropped; a function error or a throttle is logged on
 * stderr, one JSON line (Lambda would retry it and then send it to a failure destination), unless
 * the service is stopping (which kills what runs).
 */
async function invokeAsync(
  pool: FunctionPool,
  functionName: string,
  requestId: string,
  event: string,
  stopping: () => boolean,
): Promise<void> {
  const error = await pool.invoke(requestId, event).then(asyncError, (err: Error) => ({
    errorType: err.name,
    errorMessage: err.message,
  }));
  if (!error || stopping()) return;
  process.stderr.write(
    `${JSON.stringify({ level: "ERROR", message: "Event invocation failed", functionName, requestId, errorType: error.errorType, errorMessage: error.errorMessage })}\n`,
  );
}

/** What went wrong with an `Event` invocation, if anything. */
function asyncError(result: InvokeResult): LambdaError | undefined {
  if (result.type === "throttled") {
    return { errorType: "TooManyRequestsException", errorMessage: "Rate Exceeded." };
  }
  if (result.type === "done" && result.outcome.functionError) {
    return JSON.parse(result.outcome.payload) as LambdaError;
  }
  return undefined;
}

function sendOutcome(res: ServerResponse, outcome: Outcome, tail: boolean): void {
  sendJson(res, 200, outcome.payload, {
    "X-Amz-Executed-Version": "$LATEST",
    ...(outcome.functionError ? { "X-Amz-Function-Error": "Unhandled" } : {}),
    ...(tail
      ? {
          "X-Amz-Log-Result": Buffer.from(outcome.log).subarray(-LOG_TAIL_BYTES).toString("base64"),
        }
      : {}),
  });
}

function sendThrottled(res: ServerResponse): void {
  sendError(res, 429, "TooManyRequestsException", {
    Reason: "ReservedFunctionConcurrentInvocationLimitExceeded",
    Type: "User",
    message: "Rate Exceeded.",
  });
}

function sendStopping(res: ServerResponse): void {
  sendError(res, 503, "ServiceException", { Type: "Service", Message: "The service is stopping" });
}

function safeDecode(component: string): string | undefined {
  try {
    return decodeURIComponent(component);
  } catch {
    return undefined;
  }
}

/** A service error as Lambda sends it: the SDK picks the exception class by `x-amzn-ErrorType`. */
function sendError(res: ServerResponse, status: number, errorType: string, body: object): void {
  if (res.headersSent) return;
  sendJson(res, status, JSON.stringify(body), { "x-amzn-ErrorType": errorType });
}

function validateFunction(fn: LocalFunction): void {
  if (!FUNCTION_NAME.test(fn.name)) {
    throw new TypeError(`startLocalLambda: invalid function name ${JSON.stringify(fn.name)}`);
  }
  if (!isAbsolute(fn.module) || !existsSync(fn.module)) {
    throw new TypeError(`startLocalLambda: ${fn.name}: module must be an existing absolute path`);
  }
  for (const [key, value, min, max] of [
    ["concurrency", fn.concurrency, 1, undefined],
    ["timeoutMs", fn.timeoutMs, 1, undefined],
    ["memorySize", fn.memorySize, 128, 10_240], // Lambda's range, MB
    ["maxQueued", fn.maxQueued, 0, undefined],
  ] as const) {
    if (value === undefined) continue;
    if (!Number.isSafeInteger(value) || value < min || value > (max ?? value)) {
      const range = max === undefined ? `>= ${min}` : `${min}..${max}`;
      throw new RangeError(`startLocalLambda: ${fn.name}: ${key} must be an integer ${range}`);
    }
  }
}

/** Another program gets plain JavaScript: the TypeScript loader (tsx) is this Node's. */
function validateCommand(fn: LocalFunction, workerEntry: string): void {
  if (fn.command === undefined) return;
  if (fn.command.length === 0) {
    throw new TypeError(`startLocalLambda: ${fn.name}: command must name a program`);
  }
  if ([workerEntry, fn.module].some((file) => file.endsWith(".ts"))) {
    throw new TypeError(
      `startLocalLambda: ${fn.name}: a command runs JavaScript only: bundle the worker entry and module`,
    );
  }
}

function workerEnv(
  shared: Readonly<Record<string, string>>,
  fn: LocalFunction,
  memorySize: number,
): Record<string, string> {
  const inherited: Record<string, string> = {};
  for (const key of INHERITED_ENV) {
    const value = process.env[key];
    if (value !== undefined) inherited[key] = value;
  }
  return {
    ...inherited,
    ...shared,
    ...fn.env,
    AWS_LAMBDA_FUNCTION_NAME: fn.name,
    // What Lambda sets; shared/config.ts sizes lancedb's caches from it.
    AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(memorySize),
    // No credential lookups against instance metadata: nothing may leave 127.0.0.1.
    AWS_EC2_METADATA_DISABLED: "true",
  };
}
