/**
 * The merge function: global top-k per query over all tasks' candidates, then the `select`
 * columns of the winners from the pinned version.
 */
import { runMerge } from "../../shared/merge.js";
import { defaultRuntime } from "../../shared/runtime.js";
import { mergeInputSchema } from "../../shared/tasks.js";
import { answer } from "../common/answer.js";
import { withinResponseLimit } from "../common/http.js";

export function handler(event: unknown) {
  return answer(
    "merge",
    mergeInputSchema.safeParse(event),
    async (input) => withinResponseLimit(await runMerge(input, defaultRuntime()), "a merge's rows"),
    (output) => ({ rows: output.results.length }),
  );
}
