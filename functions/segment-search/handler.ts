/**
 * The segment-search function: one task, one lancedb search over the group's segment view; or,
 * for `fanout prepare`, one view built and loaded before a query needs it, or a typical query's
 * views loaded in this environment. Answers the task's candidates (or what preparing did), or
 * an error body for a failure it understands. A search answers first and loads its view's index
 * after, through an internal Lambda extension registered at init (functions/common/extension.ts).
 */
import { setTimeout } from "node:timers/promises";
import { defaultRuntime } from "../../shared/runtime.js";
import { prepareView, searchSegments, warmViews } from "../../shared/segment-search.js";
import {
  type SegmentTask,
  segmentTaskSchema,
  type ViewTask,
  viewTaskSchema,
  type WarmTask,
  warmTaskSchema,
} from "../../shared/tasks.js";
import { answer, type Parsed } from "../common/answer.js";
import { registerAfterAnswer } from "../common/extension.js";

const afterAnswer = await registerAfterAnswer("lance-fanout-after-answer");

/**
 * How long a warm task keeps this environment busy at least. Prepare sends its warm tasks at
 * once to reach as many environments; one answered sooner (its views already open) would take
 * another of them, and an environment would stay cold.
 */
const WARM_HOLD_MS = 500;

type Task = SegmentTask | ViewTask | WarmTask;

/** The three kinds of event, told apart by their marker field. */
function parseTask(event: unknown): Parsed<Task> {
  const marked = (event ?? {}) as { prepare?: unknown; warm?: unknown };
  if (marked.warm !== undefined) return warmTaskSchema.safeParse(event);
  if (marked.prepare === true) return viewTaskSchema.safeParse(event);
  return segmentTaskSchema.safeParse(event);
}

async function run(event: unknown) {
  const runtime = afterAnswer
    ? { ...defaultRuntime(), afterAnswer: (work: Promise<unknown>) => afterAnswer.hold(work) }
    : defaultRuntime();
  return answer(
    "segment-search",
    parseTask(event),
    async (task: Task) =>
      "warm" in task
        ? (await Promise.all([warmViews(task, runtime), setTimeout(WARM_HOLD_MS)]))[0]
        : "prepare" in task
          ? prepareView(task, runtime)
          : searchSegments(task, runtime),
    (result, task) => ({
      ...("group" in task ? { group: task.group } : { prepared: result }),
      ...("segments" in task ? { segments: task.segments.length } : {}),
      viewCacheHits: runtime.views.hits,
      prewarmedBytes: runtime.views.prewarmedBytes,
      cachedBytes: runtime.views.cachedBytes,
      rssBytes: process.memoryUsage.rss(),
    }),
  );
}

export const handler = afterAnswer ? afterAnswer.wrap(run) : run;
