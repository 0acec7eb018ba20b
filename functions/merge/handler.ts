/**
 * The merge function: global top-k per query over all tasks' candidates, then the `select`
 * columns of the winners from the pinned version.
 */
import { FanoutError, toFanoutError } from "../../shared/errors.js";
import { runMerge } from "../../shared/invoker.js";
import { defaultRuntime } from "../../shared/runtime.js";
import { mergeInputSchema } from "../../shared/tasks.js";
import { withinPayloadLimit } from "../common/http.js";
import { logEvent } from "../common/log.js";

export async function handler(event: unknown) {
  const parsed = mergeInputSchema.safeParse(event);
  if (!parsed.success) {
    return new FanoutError(
      "INVALID_REQUEST",
      `invalid merge input: ${parsed.error.message}`,
    ).toBody();
  }
  const input = parsed.data;
  const started = performance.now();
  try {
    const output = withinPayloadLimit(await runMerge(input, defaultRuntime()), "a merge's rows");
    logEvent({
      requestId: input.requestId,
      fn: "merge",
      rows: output.results.length,
      ms: performance.now() - started,
    });
    return output;
  } catch (err) {
    const error = toFanoutError(err);
    logEvent({
      requestId: input.requestId,
      fn: "merge",
      error: error.code,
      message: error.message,
    });
    return error.toBody();
  }
}
