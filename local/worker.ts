/**
 * One execution environment of the local Lambda service: a child process that
 * `local/lambda.ts` forks under tsx with the handler module's path as its only argument.
 *
 * Like a Lambda environment it serves one invocation at a time and keeps module state between
 * invocations. The handler module is imported on the first invocation (the cold start), so an
 * import failure is reported as that invocation's error, as Lambda reports init errors. It serves
 * the handler the Extensions API (`local/extensions-api.ts`): after each answer it reports the
 * invocation `idle` only once the handler's extensions ask for their next event.
 * @module
 */
import { pathToFileURL } from "node:url";
import { startExtensionsApi } from "./extensions-api.js";
import {
  endOfOutput,
  type InvokeMessage,
  type InvokeReply,
  type LambdaError,
  type WorkerMessage,
} from "./worker-protocol.js";

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
const extensions = await startExtensionsApi(functionName);
process.env.AWS_LAMBDA_RUNTIME_API = extensions.address;

process.on("message", (message: InvokeMessage) => {
  extensions.invoke(message.id, message.deadline);
  void invoke(message, modulePath).then(async (reply) => {
    await markEndOfOutput(message.id);
    send(reply);
    if (extensions.registered === 0) return;
    // The post-invocation phase: the extensions finish what the handler left them.
    await extensions.settled();
    send({ type: "idle", id: message.id } satisfies WorkerMessage);
  });
});
// Never outlive the service: if the parent dies without killing us, the IPC channel closes. A
// frozen worker notices nothing; the service's reaper (local/reaper.ts) kills it then.
process.on("disconnect", () => process.exit(0));
// Like Lambda's init phase: import the handler before the first invocation, outside its timeout.
// A failed import is reported by the first invocation. Messages that arrive before the listener
// above exists are lost, so the parent waits for this. The init phase ends once the extensions
// the handler registered wait for their first event.
handler = loadHandler(modulePath);
const initialized = () =>
  extensions
    .settled()
    .then(() => send({ type: "ready", extensions: extensions.registered } satisfies WorkerMessage));
handler.then(initialized, initialized);

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

/** Resolves once the marker is handed to both pipes, after everything written before it. */
function markEndOfOutput(id: string): Promise<unknown> {
  const marker = endOfOutput(id);
  const write = (stream: NodeJS.WriteStream) =>
    new Promise((resolve) => stream.write(marker, resolve));
  return Promise.all([write(process.stdout), write(process.stderr)]);
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
