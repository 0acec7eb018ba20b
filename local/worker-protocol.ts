/**
 * What `local/lambda.ts` and a worker process (`local/worker.ts`) say to each other over IPC and
 * through the worker's stdout and stderr. Kept apart from worker.ts, which runs on import.
 * @module
 */

/** Parent → worker: one invocation. `event` is the payload's JSON text. */
export interface InvokeMessage {
  readonly id: string;
  readonly event: string;
  /** Epoch milliseconds at which the parent kills this worker. */
  readonly deadline: number;
}

/**
 * The error shape of Lambda's Node.js runtime, sent back as the invocation's payload. Errors the
 * platform itself reports (a timeout, an exit, running out of memory) have no `trace`.
 */
export interface LambdaError {
  readonly errorType: string;
  readonly errorMessage: string;
  readonly trace?: readonly string[];
}

/** Worker → parent: the outcome of one invocation. `payload` is the result's JSON text. */
export type InvokeReply =
  | { readonly type: "result"; readonly id: string; readonly payload: string }
  | { readonly type: "error"; readonly id: string; readonly error: LambdaError };

/**
 * Worker → parent: `ready` once the init phase is over, with the number of extensions the
 * handler registered in it; an invocation's reply, then, with extensions, `idle` once its
 * post-invocation phase is over (they wait for their next event).
 */
export type WorkerMessage =
  | { readonly type: "ready"; readonly extensions: number }
  | { readonly type: "idle"; readonly id: string }
  | InvokeReply;

/**
 * Written by the worker to stdout and to stderr once invocation `id` has finished, before its
 * reply: the parent knows where that invocation's output ends on each stream (the streams and the
 * IPC channel are read independently), cuts the marker out and passes the rest on.
 */
export function endOfOutput(id: string): string {
  return `\u001eend of ${id}\u001e`;
}
