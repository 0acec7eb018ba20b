/**
 * The planner's {@link Invoker} over AWS Lambda: synchronous invokes of the segment-search and
 * merge functions with `@aws-sdk/client-lambda` (the local stack serves the same API).
 * @module
 */
import { InvokeCommand, LambdaClient, TooManyRequestsException } from "@aws-sdk/client-lambda";
import pRetry from "p-retry";
import { type FanoutConfig, type LambdaConfig, loadConfig } from "../../shared/config.js";
import { FanoutError, fromErrorBody, isErrorBody } from "../../shared/errors.js";
import { Hedger } from "../../shared/hedge.js";
import type { Invoker } from "../../shared/invoker.js";
import { MAX_PAYLOAD_BYTES } from "../../shared/payload.js";
import type { ExecutionProfile } from "../../shared/strategy.js";
import {
  type MergeOutput,
  preparedViewSchema,
  taskCandidatesSchema,
  warmedSchema,
} from "../../shared/tasks.js";
import { readInvokeOutput } from "./invoke-output.js";

export interface LambdaInvokerOptions {
  /** Name or ARN of the segment-search function, or of one per slot (see `ExecutionProfile.slots`). */
  readonly segmentSearchFunction: string | readonly string[];
  /** Name or ARN of the merge function. */
  readonly mergeFunction: string;
  /** @default a client of the configuration's endpoint (`AWS_ENDPOINT_URL_LAMBDA`) */
  readonly client?: LambdaClient;
  /** @default the configuration's (`LANCE_FANOUT_PARALLELISM`, `LANCE_FANOUT_INVOKE_MS`) */
  readonly profile?: ExecutionProfile;
  /** Tasks one query may invoke at once (`LANCE_FANOUT_MAX_TASKS`): sizes the socket pool. */
  readonly maxTasks?: number;
  /** Where the client sends its invokes when none is given. @default the configuration's */
  readonly endpoint?: string | undefined;
}

/**
 * On Lambda every task gets its own execution environment, so tasks run truly in parallel up to
 * the account's concurrency; a warm invoke costs roughly 10-30 ms.
 */
export function lambdaProfile(lambda: LambdaConfig): ExecutionProfile {
  return {
    parallelism: lambda.parallelism,
    invokeMs: lambda.invokeMs,
    maxPayloadBytes: MAX_PAYLOAD_BYTES,
    // Each task runs in a segment-search environment of its own slot, with its own index cache.
    indexCacheBytes: lambda.taskIndexCacheBytes,
    slots: Math.max(1, lambda.segmentSearchFunctions.length),
  };
}

/** The invoker of the configured functions (`LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION`, `LANCE_FANOUT_MERGE_FUNCTION`). */
export function lambdaInvokerOf(config: FanoutConfig): Invoker {
  const required = <T extends string | readonly string[]>(value: T | undefined, name: string) => {
    if (!value?.length) throw new TypeError(`Environment variable ${name} is required`);
    return value;
  };
  const { lambda } = config;
  // Made on first use, so a request is validated (and a bad one answered 400) before this can fail.
  let invoker: Invoker | undefined;
  const get = () =>
    (invoker ??= lambdaInvoker({
      segmentSearchFunction: required(
        lambda.segmentSearchFunctions,
        "LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION",
      ),
      mergeFunction: required(lambda.mergeFunction, "LANCE_FANOUT_MERGE_FUNCTION"),
      maxTasks: config.maxTasks,
      endpoint: lambda.endpoint,
      profile: lambdaProfile(lambda),
    }));
  return {
    profile: lambdaProfile(lambda),
    hedged: () => invoker?.hedged?.() ?? 0,
    searchSegments: (task, signal) => get().searchSegments(task, signal),
    merge: (input, signal) => get().merge(input, signal),
    prepareView: (task) => get().prepareView(task),
    warmViews: (task, slot) => get().warmViews(task, slot),
  };
}

/**
 * An invocation that crashed or timed out (Lambda's FunctionError), as opposed to a handled
 * error: its FanoutError carries `details.functionError`.
 */
function isFunctionFailure(error: unknown): boolean {
  const details = error instanceof FanoutError ? error.details : undefined;
  return (details as { functionError?: unknown } | undefined)?.functionError !== undefined;
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
    (isFunctionFailure(error) && attemptNumber <= FUNCTION_FAILURE_RETRIES),
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
      endpoint: options.endpoint ?? loadConfig().lambda.endpoint,
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
    const crashed = (message: string, functionError: string) =>
      new FanoutError(failure, message, { details: { functionError } });
    const attempt = async () => {
      const out = await client.send(command, { abortSignal: signal });
      const answer = readInvokeOutput(out, functionName);
      if (answer.failure) throw crashed(answer.failure, out.FunctionError ?? "");
      if (answer.body === undefined) {
        throw crashed(`${functionName} answered ${answer.text.slice(0, 200)}`, "not JSON");
      }
      return answer.body;
    };
    const body = await pRetry(attempt, { ...RETRY, signal }).catch((err: unknown) => {
      if (err instanceof FanoutError) throw err;
      throw new FanoutError(failure, `invoking ${functionName} failed: ${String(err)}`, {
        cause: err,
      });
    });
    if (isErrorBody(body)) throw fromErrorBody(body);
    return body as T;
  };
  const slots = [options.segmentSearchFunction].flat();
  /** The function of slot `n` (a group's index, or a warm task's slot), wrapping around. */
  const slot = (n: number) => slots[n % slots.length] as string;
  const hedger = new Hedger();
  return {
    profile: options.profile ?? { ...lambdaProfile(loadConfig().lambda), slots: slots.length },
    hedged: () => hedger.hedged,
    searchSegments: async (task, signal) => {
      const fn = slot(task.group);
      // Tasks alike: their times tell when one is late.
      const key = `${task.dataset} ${task.kind} ${fn} ${Math.ceil(Math.log2(task.queries.count))}`;
      const body = await hedger.run(
        key,
        (attempt) => invoke<unknown>(fn, task, "SEGMENT_SEARCH_FAILED", attempt),
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
    // A view's files are shared by every slot; building one loads nothing: any slot will do.
    prepareView: async (task) =>
      preparedViewSchema.parse(await invoke<unknown>(slot(0), task, "SEGMENT_SEARCH_FAILED")),
    warmViews: async (task, n = 0) =>
      warmedSchema.parse(await invoke<unknown>(slot(n), task, "SEGMENT_SEARCH_FAILED")),
  };
}
