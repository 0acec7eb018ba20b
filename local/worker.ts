/**
 * One execution environment of the local Lambda service: a child process that
 * `local/lambda.ts` forks under tsx with the handler module's path as its only argument.
 *
 * Like a Lambda environment it serves one invocation at a time and keeps module state between
 * invocations. The handler module is imported on the first invocation (the cold start), so an
 * import failure is reported as that invocation's error, as Lambda reports init errors.
 * @module
 */
import { pathToFileURL } from "node:url";

/** Parent → worker: one invocation. `event` is the payload's JSON text. */
export interface InvokeMessage {
  readonly id: string;
  readonly event: string;
  /** Epoch milliseconds at which the parent kills this worker. */
  readonly deadline: number;
}

/** The error shape of Lambda's Node.js runtime, sent back as the invocation's payload. */
export interface LambdaError {
  readonly errorType: string;
  readonly errorMessage: string;
  readonly trace: readonly string[];
}

/** Worker → parent: the outcome of one invocation. `payload` is the result's JSON text. */
export type InvokeReply =
  | { readonly type: "result"; readonly id: string; readonly payload: string }
  | { readonly type: "error"; readonly id: string; readonly error: LambdaError };

/** Worker → parent. */
export type WorkerMessage = { readonly type: "ready" } | InvokeReply;

export interface LambdaContext {
  readonly awsRequestId: string;
  readonly functionName: string;
  getRemainingTimeInMillis(): number;
}

type Handler = (event: unknown, context: LambdaContext) => unknown;

const modulePath = process.argv[2];
const send = process.send?.bind(process);
if (!modulePath || !send) {
  throw new Error(
    "local/worker.ts is started by local/lambda.ts (fork with IPC and a module path)",
  );
}
const functionName = process.env.AWS_LAMBDA_FUNCTION_NAME ?? "";
let handler: Promise<Handler> | undefined;

process.on("message", (message: InvokeMessage) => {
  void invoke(message, modulePath).then((reply) => send(reply));
});
// Never outlive the service: if the parent dies without killing us, the IPC channel closes.
process.on("disconnect", () => process.exit(0));
// Like Lambda's init phase: import the handler before the first invocation, outside its timeout.
// A failed import is reported by the first invocation. Messages that arrive before the listener
// above exists are lost, so the parent waits for this.
handler = loadHandler(modulePath);
handler.then(
  () => send({ type: "ready" } satisfies WorkerMessage),
  () => send({ type: "ready" } satisfies WorkerMessage),
);

async function invoke(message: InvokeMessage, path: string): Promise<InvokeReply> {
  const { id, event, deadline } = message;
  const context: LambdaContext = {
    awsRequestId: id,
    functionName,
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
  };
  try {
    handler ??= loadHandler(path);
    const result = await (await handler)(JSON.parse(event), context);
    // Lambda answers `null` for a handler that returns nothing.
    return { type: "result", id, payload: JSON.stringify(result) ?? "null" };
  } catch (err) {
    return { type: "error", id, error: toLambdaError(err) };
  }
}

async function loadHandler(path: string): Promise<Handler> {
  let exports: { handler?: unknown };
  try {
    exports = await import(pathToFileURL(path).href);
  } catch (err) {
    throw runtimeError(
      "Runtime.ImportModuleError",
      err instanceof Error ? err.message : String(err),
    );
  }
  if (typeof exports.handler !== "function") {
    throw runtimeError("Runtime.HandlerNotFound", `${path}: handler is undefined or not exported`);
  }
  return exports.handler as Handler;
}

function runtimeError(errorType: string, message: string): Error {
  return Object.assign(new Error(message), { name: errorType });
}

function toLambdaError(err: unknown): LambdaError {
  if (err instanceof Error) {
    return { errorType: err.name, errorMessage: err.message, trace: err.stack?.split("\n") ?? [] };
  }
  return { errorType: typeof err, errorMessage: String(err), trace: [] };
}
