/**
 * Memory size and timeout of each function unless the stack's props say otherwise: what
 * `infra/fanout-functions.ts` deploys and what the local stack (`local/stack.ts`) runs with, so
 * what was tested locally is what runs on AWS. No CDK here: the local stack imports it.
 * @module
 */
export const FUNCTION_DEFAULTS = {
  /** 29 s: above the query deadline (25 s), under API Gateway's 30 s. */
  planner: { memorySize: 1024, timeoutSeconds: 29 },
  /** The planner's timeout less 1 s: the planner stops waiting at its own. */
  segmentSearch: { memorySize: 2048, timeoutSeconds: 28 },
  merge: { memorySize: 1024, timeoutSeconds: 28 },
  gc: { memorySize: 1024, timeoutSeconds: 300 },
} as const;
