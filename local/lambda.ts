/**
 * The local Lambda service of the embedded stack and of the tests: the synchronous Invoke API of
 * AWS Lambda on 127.0.0.1, as `@aws-sdk/client-lambda`'s `InvokeCommand` speaks it, running each
 * function's handler in worker processes (`local/worker.ts`, forked under tsx).
 *
 * Each function has its own pool of up to `concurrency` workers. Like Lambda execution
 * environments, a worker serves one invocation at a time and stays warm between invocations;
 * when all are busy the invocation is throttled (429), not queued. A worker that dies or runs
 * past its timeout fails that invocation the way Lambda reports it and is replaced.
 *
 * Status codes, `x-amzn-ErrorType` names and bodies copy Lambda's, so the SDK raises the same
 * errors as against AWS: `ResourceNotFoundException`, `TooManyRequestsException`, and for an
 * oversized request Lambda's `RequestEntityTooLargeException` (a name missing from the SDK's model,
 * so the SDK raises a generic `LambdaServiceException` with that name and status 413).
 * @module
 */
import { type ChildProcess, fork } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createRequire } from "node:module";
import { extname, isAbsolute } from "node:path";
import { setImmediate as nextTurn } from "node:timers/promises";
import { fileURLToPath, pathToFileURL } from "node:url";
import { HOST, listenOnLoopback } from "./net.js";
import type { InvokeMessage, InvokeReply, LambdaError, WorkerMessage } from "./worker.js";

export interface LocalFunction {
  /** The function name clients invoke (Lambda's rules: letters, digits, `-`, `_`, up to 64). */
  readonly name: string;
  /** Absolute path of the handler module (a .ts file, run under tsx); it exports `handler`. */
  readonly module: string;
  /** Max parallel invocations = max workers. @default 4 */
  readonly concurrency?: number;
  /** @default 30000 */
  readonly timeoutMs?: number;
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
  /** The worker entry to fork, e.g. a bundled `worker.mjs`. @default local/worker.ts under tsx */
  readonly workerEntry?: string;
}

export interface FunctionStats {
  /** Live worker processes (idle or busy). */
  workers: number;
  busy: number;
  /** Invocations given to a worker (throttled ones excluded). */
  invocations: number;
  /** Workers that exited on their own (process.exit, native abort, signal); timeouts excluded. */
  crashes: number;
}

export interface LocalLambda {
  /** http://127.0.0.1:PORT, for `new LambdaClient({ endpoint })` or `AWS_ENDPOINT_URL_LAMBDA`. */
  readonly endpoint: string;
  readonly port: number;
  stats(): Record<string, FunctionStats>;
  /** Pids of live worker processes, for tests. */
  workerPids(name: string): number[];
  /** Kills every worker, waits for them to exit and closes the server. */
  stop(): Promise<void>;
}

/** Lambda's limit on a synchronous invocation's request and response payloads. */
const MAX_PAYLOAD_BYTES = 6 * 1024 * 1024;
const INVOKE_PATH = /^\/2015-03-31\/functions\/([^/]+)\/invocations$/;
const FUNCTION_NAME = /^[A-Za-z0-9_-]{1,64}$/;
/** What a worker inherits from this process: enough to run node and find a temp directory. */
const INHERITED_ENV = ["PATH", "HOME", "TMPDIR", "LANG", "TZ"] as const;
/** The worker entry next to this module (worker.ts here, worker.js once compiled). */
const WORKER_ENTRY = fileURLToPath(
  new URL(`./worker${extname(fileURLToPath(import.meta.url))}`, import.meta.url),
);
/** tsx's loader resolved from here, so workers load TypeScript whatever their cwd. */
const TSX_LOADER = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

/**
 * Limit on a worker's init phase. Lambda allows 10 s with a CPU per environment; here every
 * worker shares the machine's cores, so a burst of cold starts gets more room.
 */
const INIT_TIMEOUT_MS = 60_000;

/** What an invocation answers: the payload's JSON text, and whether it is a function error. */
interface Outcome {
  readonly payload: string;
  readonly functionError: boolean;
}

/** Starts the service on 127.0.0.1; workers start on demand. */
export async function startLocalLambda(options: LocalLambdaOptions): Promise<LocalLambda> {
  const { port = 0, functions, env = {}, workerEntry = WORKER_ENTRY } = options;
  const pools = new Map<string, FunctionPool>();
  for (const fn of functions) {
    validateFunction(fn);
    validateCommand(fn, workerEntry);
    if (pools.has(fn.name)) throw new TypeError(`startLocalLambda: duplicate function ${fn.name}`);
    pools.set(fn.name, new FunctionPool(fn, workerEnv(env, fn), workerEntry));
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
    stats: () => Object.fromEntries([...pools].map(([name, pool]) => [name, pool.stats()])),
    workerPids: (name) => pools.get(name)?.pids() ?? [],
    stop() {
      stopped ??= (async () => {
        stopping = true;
        const closed = new Promise<void>((resolve, reject) => {
          server.close((err) => (err ? reject(err) : resolve()));
        });
        // In-flight invocations fail with Runtime.ExitError; their responses are written in the
        // microtasks that follow, so one turn of the event loop lets them out before the close.
        await Promise.all([...pools.values()].map((pool) => pool.stop()));
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
  const url = new URL(req.url ?? "/", `http://${HOST}`);
  const match = req.method === "POST" ? INVOKE_PATH.exec(url.pathname) : null;
  if (!match?.[1]) {
    sendError(res, 404, "UnknownOperationException", {
      Type: "User",
      message: "Unknown operation",
    });
    return;
  }
  // The SDK percent-encodes the name; `?Qualifier=` is accepted and ignored (one version here).
  const name = safeDecode(match[1]);
  const pool = name === undefined ? undefined : pools.get(name);
  if (!pool) {
    const Message = `Function not found: arn:aws:lambda:us-east-1:000000000000:function:${name}`;
    sendError(res, 404, "ResourceNotFoundException", { Type: "User", Message });
    return;
  }
  const invocationType = req.headers["x-amz-invocation-type"] ?? "RequestResponse";
  if (invocationType !== "RequestResponse") {
    const message = `Only RequestResponse invocations are served locally, not ${invocationType}`;
    sendError(res, 400, "InvalidParameterValueException", { Type: "User", message });
    return;
  }
  const body = await readBody(req);
  if (body === undefined) {
    const message = `Request must be smaller than ${MAX_PAYLOAD_BYTES} bytes for the InvokeFunction operation`;
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

  // Checked in the same tick as a worker spawn (in pool.invoke), so none starts after stop().
  if (stopping()) {
    sendError(res, 503, "ServiceException", {
      Type: "Service",
      Message: "The service is stopping",
    });
    return;
  }
  const requestId = randomUUID();
  const outcome = await pool.invoke(requestId, event);
  if (outcome === undefined) {
    sendError(res, 429, "TooManyRequestsException", {
      Reason: "ReservedFunctionConcurrentInvocationLimitExceeded",
      Type: "User",
      message: "Rate Exceeded.",
    });
  } else {
    sendJson(res, 200, outcome.payload, {
      "x-amzn-RequestId": requestId,
      "X-Amz-Executed-Version": "$LATEST",
      ...(outcome.functionError ? { "X-Amz-Function-Error": "Unhandled" } : {}),
    });
  }
}

/**
 * The request body, or `undefined` when it is over the payload limit. An oversized body is not
 * kept: the rest of it is discarded as it arrives (by Node once the 413 is sent), so that the
 * client, still writing, reads the 413 instead of a reset connection.
 */
function readBody(req: IncomingMessage): Promise<Buffer | undefined> {
  if (Number(req.headers["content-length"]) > MAX_PAYLOAD_BYTES) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_PAYLOAD_BYTES) {
        chunks.push(chunk);
        return;
      }
      // Without a `data` listener the stream keeps flowing and drops what it reads.
      req.off("data", onData).off("end", onEnd);
      resolve(undefined);
    };
    const onEnd = () => resolve(Buffer.concat(chunks));
    req.on("data", onData).on("end", onEnd).on("error", reject);
  });
}

function safeDecode(component: string): string | undefined {
  try {
    return decodeURIComponent(component);
  } catch {
    return undefined;
  }
}

function sendJson(
  res: ServerResponse,
  status: number,
  body: string,
  headers: Record<string, string> = {},
): void {
  res
    .writeHead(status, {
      "Content-Type": "application/json",
      "Content-Length": Buffer.byteLength(body),
      ...headers,
    })
    .end(body);
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
  for (const [key, value] of [
    ["concurrency", fn.concurrency],
    ["timeoutMs", fn.timeoutMs],
  ] as const) {
    if (value !== undefined && !(Number.isSafeInteger(value) && value > 0)) {
      throw new RangeError(`startLocalLambda: ${fn.name}: ${key} must be a positive integer`);
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
    // No credential lookups against instance metadata: nothing may leave 127.0.0.1.
    AWS_EC2_METADATA_DISABLED: "true",
  };
}

function unhandled(error: LambdaError): Outcome {
  return { payload: JSON.stringify(error), functionError: true };
}

/** The workers of one function. */
class FunctionPool {
  readonly #entry: string;
  readonly #module: string;
  readonly #command: readonly string[] | undefined;
  readonly #env: Record<string, string>;
  readonly #concurrency: number;
  readonly #timeoutMs: number;
  readonly #live = new Set<Worker>();
  #idle: Worker[] = [];
  #busy = 0;
  #invocations = 0;
  #crashes = 0;

  constructor(fn: LocalFunction, env: Record<string, string>, entry: string) {
    this.#entry = entry;
    this.#module = fn.module;
    this.#command = fn.command;
    this.#env = env;
    this.#concurrency = fn.concurrency ?? 4;
    this.#timeoutMs = fn.timeoutMs ?? 30_000;
  }

  stats(): FunctionStats {
    const { size: workers } = this.#live;
    return { workers, busy: this.#busy, invocations: this.#invocations, crashes: this.#crashes };
  }

  pids(): number[] {
    return [...this.#live].flatMap((worker) => (worker.pid === undefined ? [] : [worker.pid]));
  }

  /** `undefined` when all workers are busy: Lambda throttles rather than queues. */
  async invoke(requestId: string, event: string): Promise<Outcome | undefined> {
    if (this.#busy >= this.#concurrency) return undefined;
    this.#busy++;
    this.#invocations++;
    try {
      return await this.#run(requestId, event);
    } finally {
      this.#busy--;
    }
  }

  async stop(): Promise<void> {
    await Promise.all([...this.#live].map((worker) => worker.kill()));
  }

  async #run(id: string, event: string): Promise<Outcome> {
    const worker = this.#idle.pop() ?? this.#spawn();
    // Like Lambda, the init phase (importing the handler) has its own limit and does not count
    // against the function's timeout.
    const init = await Promise.race([
      worker.ready.then(() => "ready" as const),
      worker.exited.then(() => "exited" as const),
      new Promise<"timeout">((resolve) => setTimeout(resolve, INIT_TIMEOUT_MS, "timeout").unref()),
    ]);
    if (init === "timeout") {
      await worker.kill();
      return unhandled({
        errorType: "Runtime.InitError",
        errorMessage: `RequestId: ${id} Init did not finish within ${INIT_TIMEOUT_MS / 1000} seconds`,
        trace: [],
      });
    }
    const deadline = Date.now() + this.#timeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      worker.invoke({ id, event, deadline }),
      worker.exited.then((reason) => ({ type: "exit", reason }) as const),
      new Promise<{ type: "timeout" }>((resolve) => {
        timer = setTimeout(resolve, this.#timeoutMs, { type: "timeout" });
      }),
    ]).finally(() => clearTimeout(timer));

    switch (outcome.type) {
      case "result":
      case "error":
        // Unless it exited right after answering, the worker stays warm for the next invocation.
        if (this.#live.has(worker)) this.#idle.push(worker);
        if (outcome.type === "error") return unhandled(outcome.error);
        if (Buffer.byteLength(outcome.payload) > MAX_PAYLOAD_BYTES) {
          return unhandled({
            errorType: "Function.ResponseSizeTooLarge",
            errorMessage: `Response payload size exceeded maximum allowed payload size (${MAX_PAYLOAD_BYTES} bytes).`,
            trace: [],
          });
        }
        return { payload: outcome.payload, functionError: false };
      case "exit":
        return unhandled({
          errorType: "Runtime.ExitError",
          errorMessage: `RequestId: ${id} Error: Runtime exited with error: ${outcome.reason}`,
          trace: [],
        });
      case "timeout": {
        await worker.kill();
        const seconds = (this.#timeoutMs / 1000).toFixed(2);
        return unhandled({
          errorType: "Sandbox.Timedout",
          errorMessage: `${new Date().toISOString()} ${id} Task timed out after ${seconds} seconds`,
          trace: [],
        });
      }
    }
  }

  #spawn(): Worker {
    const worker = new Worker(this.#entry, this.#module, this.#env, this.#command);
    this.#live.add(worker);
    void worker.exited.then(() => {
      this.#live.delete(worker);
      this.#idle = this.#idle.filter((idle) => idle !== worker);
      if (!worker.killed) this.#crashes++;
    });
    return worker;
  }
}

/** One worker process. */
class Worker {
  readonly #child: ChildProcess;
  /** Settles once the worker has imported its handler (or failed to). */
  readonly ready: Promise<void>;
  #reply: ((reply: InvokeReply) => void) | undefined;
  #killed = false;
  /** Resolves once the process is gone, with Lambda's wording of why ("exit status 1"). */
  readonly exited: Promise<string>;

  constructor(
    entry: string,
    module: string,
    env: Record<string, string>,
    [program, ...args]: readonly string[] = [process.execPath],
  ) {
    const typescript = entry.endsWith(".ts") || module.endsWith(".ts");
    const child = fork(entry, [module], {
      env,
      execPath: program,
      // Bundled JavaScript starts in half the time of TypeScript under tsx.
      execArgv: [...args, ...(typescript ? ["--import", TSX_LOADER] : [])],
      // Structured clone passes the JSON texts as they are, instead of JSON-escaping them again.
      serialization: "advanced",
    });
    this.#child = child;
    this.exited = new Promise((resolve) => {
      child.once("exit", (code, signal) => {
        resolve(signal ? `signal: ${signal}` : `exit status ${code}`);
      });
      // Only a failed spawn has no pid and no `exit`; other errors (a failed send) precede `exit`.
      child.on("error", (err) => {
        if (child.pid === undefined) resolve(`spawn failed: ${err.message}`);
      });
    });
    this.ready = new Promise((resolve) => {
      child.on("message", (message: WorkerMessage) => {
        if (message.type === "ready") resolve();
        else this.#reply?.(message);
      });
    });
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** Whether the pool killed it (a timeout or stop), as opposed to a crash. */
  get killed(): boolean {
    return this.#killed;
  }

  /** Never settles if the worker dies: callers race it with {@link exited}. */
  async invoke(message: InvokeMessage): Promise<InvokeReply> {
    await this.ready;
    return new Promise((resolve) => {
      this.#reply = resolve;
      // A failed send means the worker is exiting, which `exited` reports.
      this.#child.send(message, () => undefined);
    });
  }

  kill(): Promise<string> {
    this.#killed = true;
    this.#child.kill("SIGKILL");
    return this.exited;
  }
}
