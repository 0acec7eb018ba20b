/**
 * The segment-search function: one task, one lancedb search over the group's segment view.
 * Answers the task's candidates, or an error body for a failure it understands.
 */
import { FanoutError, toFanoutError } from "../../shared/errors.js";
import { defaultRuntime } from "../../shared/runtime.js";
import { searchSegments } from "../../shared/segment-search.js";
import { segmentTaskSchema } from "../../shared/tasks.js";
import { logEvent } from "../common/log.js";

export async function handler(event: unknown) {
  const parsed = segmentTaskSchema.safeParse(event);
  if (!parsed.success) {
    return new FanoutError("INVALID_REQUEST", `invalid task: ${parsed.error.message}`).toBody();
  }
  const task = parsed.data;
  const started = performance.now();
  try {
    const result = await searchSegments(task, defaultRuntime());
    logEvent({
      requestId: task.requestId,
      fn: "segment-search",
      group: task.group,
      segments: task.segments.length,
      candidates: result.candidates.counts.reduce((sum, n) => sum + n, 0),
      viewCacheHits: defaultRuntime().views.hits,
      prewarmedBytes: defaultRuntime().views.prewarmedBytes,
      ms: performance.now() - started,
    });
    return result;
  } catch (err) {
    const error = toFanoutError(err);
    logEvent({
      requestId: task.requestId,
      fn: "segment-search",
      error: error.code,
      message: error.message,
    });
    return error.toBody();
  }
}
