/**
 * Memory size and timeout of each function unless the stack's props say otherwise: what
 * `infra/fanout-functions.ts` deploys and what the local stack (`local/stack.ts`) runs with, so
 * what was tested locally is what runs on AWS. No CDK here: the local stack imports it.
 * @module
 */

/** Above the query deadline (25 s), under API Gateway's 30 s. */
const PLANNER_TIMEOUT_SECONDS = 29;
/** What the planner waits for stops before the planner does (infra derives it the same way). */
const WAITED_FOR_SECONDS = PLANNER_TIMEOUT_SECONDS - 1;

export const FUNCTION_DEFAULTS = {
  planner: { memorySize: 1024, timeoutSeconds: PLANNER_TIMEOUT_SECONDS },
  segmentSearch: { memorySize: 2048, timeoutSeconds: WAITED_FOR_SECONDS },
  merge: { memorySize: 1024, timeoutSeconds: WAITED_FOR_SECONDS },
  gc: { memorySize: 1024, timeoutSeconds: 300 },
} as const;
