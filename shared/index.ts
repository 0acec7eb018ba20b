/**
 * lance-fanout: serverless fan-out vector search over a Lance dataset.
 * @module
 */
export { ARROW_STREAM, resultsToArrow, resultsToIpc } from "./arrow.js";
export { type FanoutConfig, loadConfig } from "./config.js";
export { ERROR_STATUS, type ErrorBody, type ErrorCode, FanoutError } from "./errors.js";
export { type GcOptions, type GcReport, gc } from "./gc.js";
export { type Invoker, inProcessInvoker } from "./invoker.js";
export { type PrepareRequest, type PrepareResponse, prepare } from "./prepare.js";
export { type SearchRequest, searchRequestSchema } from "./request.js";
export { createRuntime, type Runtime } from "./runtime.js";
export {
  type PlanResponse,
  planSearch,
  type SearchOptions,
  type SearchResponse,
  vectorSearch,
} from "./search.js";
export type { ResultRow } from "./tasks.js";
