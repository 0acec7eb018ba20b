/**
 * `lance-fanout-cdk`: the LanceFanout construct for an app of your own, and what its props and
 * members are made of (docs/deploy.md, "In your own CDK app").
 * @module
 */
export type { DatasetAccess } from "./dataset-access.js";
export type { FanoutFunctions, FunctionSettings } from "./fanout-functions.js";
export type { FanoutMetricName, FanoutMetrics } from "./fanout-metrics.js";
export { LanceFanout, type LanceFanoutProps } from "./lance-fanout.js";
export { LanceFanoutStack, type LanceFanoutStackProps } from "./lance-fanout-stack.js";
export type { SearchApi, SearchApiAuth, SearchApiThrottle } from "./search-api.js";
export type { ViewUpkeep } from "./view-upkeep.js";
