/**
 * The segment-search function: one task, one lancedb search over the group's segment view; or,
 * for `fanout prepare`, one view built and loaded before a query needs it. Answers the task's
 * candidates (or what preparing did), or an error body for a failure it understands.
 */
import { FanoutError, toFanoutError } from "../../shared/errors.js";
import { defaultRuntime } from "../../shared/runtime.js";
import { prepareView, searchSegments } from "../../shared/segment-search.js";
import { segmentTaskSchema, viewTaskSchema } from "../../shared/tasks.js";
import { logEvent } from "../common/log.js";

export async function handler(event: unknown) {
  const prepare = (event as { prepare?: unknown } | null)?.prepare === true;
  const parsed = (prepare ? viewTaskSchema : segmentTaskSchema).safeParse(event);
  if (!parsed.success) {
    return new FanoutError("INVALID_REQUEST", `invalid task: ${parsed.error.message}`).toBody();
  }
  const task = parsed.data;
  const runtime = defaultRuntime();
  const started = performance.now();
  try {
    const result =
      "prepare" in task ? await prepareView(task, runtime) : await searchSegments(task, runtime);
    logEvent({
      requestId: task.requestId,
      fn: "segment-search",
      ...("prepare" in task ? { prepared: result } : { group: task.group }),
      segments: task.segments.length,
      viewCacheHits: runtime.views.hits,
      prewarmedBytes: runtime.views.prewarmedBytes,
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
