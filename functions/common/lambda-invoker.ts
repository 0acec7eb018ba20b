/**
 * The planner's {@link Invoker} over AWS Lambda: synchronous invokes of the segment-search and
 * merge functions with `@aws-sdk/client-lambda` (the local stack serves the same API).
 * @module
 */
import { InvokeCommand, LambdaClient } from "@aws-sdk/client-lambda";
import { FanoutError, fromErrorBody, isErrorBody } from "../../shared/errors.js";
import type { Invoker } from "../../shared/invoker.js";
import type { MergeOutput, TaskCandidates } from "../../shared/tasks.js";

export interface LambdaInvokerOptions {
  /** Name or ARN of the segment-search function. */
  readonly segmentSearchFunction: string;
  /** Name or ARN of the merge function. */
  readonly mergeFunction: string;
  /** @default a client configured from the environment (`AWS_ENDPOINT_URL_LAMBDA` honoured) */
  readonly client?: LambdaClient;
}

/** Reads the function names from `LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION` and `LANCE_FANOUT_MERGE_FUNCTION`. */
export function lambdaInvokerFromEnv(env = process.env): Invoker {
  const required = (name: string) => {
    const value = env[name]?.trim();
    if (!value) throw new TypeError(`Environment variable ${name} is required`);
    return value;
  };
  return lambdaInvoker({
    segmentSearchFunction: required("LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION"),
    mergeFunction: required("LANCE_FANOUT_MERGE_FUNCTION"),
  });
}

export function lambdaInvoker(options: LambdaInvokerOptions): Invoker {
  const client =
    options.client ??
    new LambdaClient({ endpoint: process.env.AWS_ENDPOINT_URL_LAMBDA || undefined });
  const invoke = async <T>(
    functionName: string,
    payload: unknown,
    failure: FanoutError["code"],
  ) => {
    const out = await client
      .send(new InvokeCommand({ FunctionName: functionName, Payload: JSON.stringify(payload) }))
      .catch((err: unknown) => {
        throw new FanoutError(failure, `invoking ${functionName} failed: ${String(err)}`, {
          cause: err,
        });
      });
    const text = out.Payload ? Buffer.from(out.Payload).toString("utf8") : "null";
    const body: unknown = JSON.parse(text);
    if (out.FunctionError) {
      const message = (body as { errorMessage?: string } | null)?.errorMessage ?? text;
      throw new FanoutError(failure, `${functionName} failed (${out.FunctionError}): ${message}`);
    }
    if (isErrorBody(body)) throw fromErrorBody(body);
    return body as T;
  };
  return {
    searchSegments: (task) =>
      invoke<TaskCandidates>(options.segmentSearchFunction, task, "SEGMENT_SEARCH_FAILED"),
    merge: (input) => invoke<MergeOutput>(options.mergeFunction, input, "INTERNAL"),
  };
}
