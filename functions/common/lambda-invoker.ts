/**
 * The planner's {@link Invoker} over AWS Lambda: synchronous invokes of the segment-search and
 * merge functions with `@aws-sdk/client-lambda` (the local stack serves the same API).
 * @module
 */
import { InvokeCommand, LambdaClient, TooManyRequestsException } from "@aws-sdk/client-lambda";
import pRetry from "p-retry";
import { loadConfig } from "../../shared/config.js";
import { FanoutError, fromErrorBody, isErrorBody } from "../../shared/errors.js";
import type { Invoker } from "../../shared/invoker.js";
import { MAX_PAYLOAD_BYTES } from "../../shared/search.js";
import type { ExecutionProfile } from "../../shared/strategy.js";
import {
  type MergeOutput,
  preparedViewSchema,
  taskCandidatesSchema,
  warmedSchema,
} from "../../shared/tasks.js";

export interface LambdaInvokerOptions {
  /** Name or ARN of the segment-search function. */
  readonly segmentSearchFunction: string;
  /** Name or ARN of the merge function. */
  readonly mergeFunction: string;
  /** @default a client configured from the environment (`AWS_ENDPOINT_URL_LAMBDA` honoured) */
  readonly client?: LambdaClient;
  /** @default from `LANCE_FANOUT_PARALLELISM` (256) and `LANCE_FANOUT_INVOKE_MS` (15) */
  readonly profile?: ExecutionProfile;
  /** Tasks one query may invoke at once (`LANCE_FANOUT_MAX_TASKS`): sizes the socket pool. */
  readonly maxTasks?: number;
}

/**
 * On Lambda every task gets its own execution environment, so tasks run truly in parallel up to
 * the account's concurrency; a warm invoke costs roughly 10-30 ms.
 */
export function lambdaProfile(env: NodeJS.ProcessEnv = process.env): ExecutionProfile {
  return {
    parallelism: Number(env.LANCE_FANOUT_PARALLELISM) || 256,
    invokeMs: Number(env.LANCE_FANOUT_INVOKE_MS) || 15,
    maxPayloadBytes: MAX_PAYLOAD_BYTES,
  };
}

/** Reads the function names from `LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION` and `LANCE_FANOUT_MERGE_FUNCTION`. */
export function lambdaInvokerFromEnv(env = process.env): Invoker {
  const required = (name: string) => {
    const value = env[name]?.trim();
    if (!value) throw new TypeError(`Environment variable ${name} is required`);
    return value;
  };
  // Read on first use, so a request is validated (and a bad one answered 400) before this can fail.
  let invoker: Invoker | undefined;
  const get = () =>
    (invoker ??= lambdaInvoker({
      segmentSearchFunction: required("LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION"),
      mergeFunction: required("LANCE_FANOUT_MERGE_FUNCTION"),
      maxTasks: loadConfig(env).maxTasks,
    }));
  return {
    profile: lambdaProfile(env),
    searchSegments: (task, signal) => get().searchSegments(task, signal),
    merge: (input, signal) => get().merge(input, signal),
    prepareView: (task) => get().prepareView(task),
    warmViews: (task) => get().warmViews(task),
  };
}

/** An invocation that crashed or timed out (Lambda's FunctionError), as opposed to a handled error. */
class FunctionFailure extends Error {
  override readonly name = "FunctionFailure";
}

/** Crashed or timed-out tasks get this many more tries; searches are reads, so a rerun is safe. */
const FUNCTION_FAILURE_RETRIES = 2;

/**
 * A throttled task (429: the function's concurrency is used up) is retried soon, with jitter,
 * rather than with the SDK's throttling backoff of seconds, and so is a reset connection; a crash
 * or timeout is retried twice. The query's deadline bounds it all.
 */
const RETRY = {
  retries: 12,
  minTimeout: 20,
  maxTimeout: 1_000,
  factor: 1.6,
  randomize: true,
  shouldRetry: ({ error, attemptNumber }: { error: unknown; attemptNumber: number }) =>
    error instanceof TooManyRequestsException ||
    isTransportError(error) ||
    (error instanceof FunctionFailure && attemptNumber <= FUNCTION_FAILURE_RETRIES),
};

/** No HTTP response at all (a reset socket): searches are reads, so running one twice is safe. */
function isTransportError(error: unknown): boolean {
  const metadata = (error as { $metadata?: { httpStatusCode?: number } }).$metadata;
  const code = (error as { code?: string }).code ?? "";
  return (
    metadata?.httpStatusCode === undefined &&
    /ECONNRESET|EPIPE|ECONNREFUSED|socket hang up/i.test(`${code} ${String(error)}`)
  );
}

export function lambdaInvoker(options: LambdaInvokerOptions): Invoker {
  // Every task of a query and its merges at once (the SDK's agent stops at 50 sockets).
  const sockets = { keepAlive: true, maxSockets: Math.max(50, 2 * (options.maxTasks ?? 16) + 1) };
  const client =
    options.client ??
    // Retries are ours (RETRY): the SDK's would wait seconds on a 429.
    new LambdaClient({
      endpoint: process.env.AWS_ENDPOINT_URL_LAMBDA || undefined,
      maxAttempts: 1,
      requestHandler: { httpAgent: sockets, httpsAgent: sockets },
    });
  const invoke = async <T>(
    functionName: string,
    payload: unknown,
    failure: FanoutError["code"],
    signal?: AbortSignal,
  ) => {
    const command = new InvokeCommand({
      FunctionName: functionName,
      Payload: JSON.stringify(payload),
    });
    const attempt = async () => {
      const out = await client.send(command, { abortSignal: signal });
      const text = out.Payload ? Buffer.from(out.Payload).toString("utf8") : "null";
      const body: unknown = JSON.parse(text);
      if (out.FunctionError) {
        const message = (body as { errorMessage?: string } | null)?.errorMessage ?? text;
        throw new FunctionFailure(`${functionName} failed (${out.FunctionError}): ${message}`);
      }
      return body;
    };
    const body = await pRetry(attempt, { ...RETRY, signal }).catch((err: unknown) => {
      const message =
        err instanceof FunctionFailure
          ? err.message
          : `invoking ${functionName} failed: ${String(err)}`;
      throw new FanoutError(failure, message, { cause: err });
    });
    if (isErrorBody(body)) throw fromErrorBody(body);
    return body as T;
  };
  return {
    profile: options.profile ?? lambdaProfile(),
    searchSegments: async (task, signal) => {
      const body = await invoke<unknown>(
        options.segmentSearchFunction,
        task,
        "SEGMENT_SEARCH_FAILED",
        signal,
      );
      // Candidates are checked at the boundary: a malformed answer must not reach the merge.
      const parsed = taskCandidatesSchema.safeParse(body);
      if (!parsed.success) {
        throw new FanoutError(
          "SEGMENT_SEARCH_FAILED",
          `malformed task answer: ${parsed.error.message}`,
        );
      }
      return parsed.data;
    },
    merge: (input, signal) => invoke<MergeOutput>(options.mergeFunction, input, "INTERNAL", signal),
    prepareView: async (task) =>
      preparedViewSchema.parse(
        await invoke<unknown>(options.segmentSearchFunction, task, "SEGMENT_SEARCH_FAILED"),
      ),
    warmViews: async (task) =>
      warmedSchema.parse(
        await invoke<unknown>(options.segmentSearchFunction, task, "SEGMENT_SEARCH_FAILED"),
      ),
  };
}
