/**
 * The planner function: HTTP (API Gateway payload 2.0) or direct invoke. Plans the search,
 * invokes one segment-search per group and the merge (unless one task answers a query chunk
 * without `select`: see shared/search.ts), and answers the result or an error body. Prepare
 * events (a direct `{ prepare }`, a commit seen by EventBridge, a schedule) build a version's
 * views through segment-search before its first query (shared/prepare.ts).
 */
import { randomUUID } from "node:crypto";
import { CpuPhases } from "../../shared/cpu-phases.js";
import { toFanoutError } from "../../shared/errors.js";
import type { Invoker } from "../../shared/invoker.js";
import { type PrepareRequest, prepare } from "../../shared/prepare.js";
import type { SearchRequest } from "../../shared/request.js";
import { defaultRuntime } from "../../shared/runtime.js";
import { type PlanResponse, type SearchResponse, vectorSearch } from "../../shared/search.js";
import { prepareRequests } from "../common/events.js";
import {
  arrowResponse,
  errorResponse,
  httpDeadline,
  isHttpEvent,
  jsonResponse,
  NEGOTIATED,
  parseHttpBody,
  wantsArrow,
  withinResponseLimit,
} from "../common/http.js";
import { lambdaInvokerOf } from "../common/lambda-invoker.js";
import { logEvent } from "../common/log.js";

let invoker: Invoker | undefined;

async function search(
  request: unknown,
  requestId: string,
  deadline?: number,
): Promise<SearchResponse | PlanResponse> {
  invoker ??= lambdaInvokerOf(defaultRuntime().config);
  const started = performance.now();
  const hedgedBefore = invoker.hedged?.() ?? 0;
  const cpu = new CpuPhases();
  try {
    const response = await vectorSearch(request as SearchRequest, {
      invoker,
      requestId,
      runtime: defaultRuntime(),
      deadline,
      cpu,
    });
    logEvent({
      requestId,
      fn: "planner",
      tasks: response.plan.tasks,
      // Tasks of this query sent again late (this environment runs one query at a time).
      hedged: (invoker.hedged?.() ?? 0) - hedgedBefore,
      // This planner's CPU per phase: parse, plan, encode, tasks (invokes and their answers), merge.
      cpuMs: cpu.report(),
      ms: performance.now() - started,
    });
    return response;
  } catch (err) {
    const error = toFanoutError(err);
    logEvent({ requestId, fn: "planner", error: error.code, message: error.message });
    throw error;
  }
}

/**
 * The dataset's schema at the answer's version, which types the `select` columns of an Arrow
 * answer: read from the table the planner pinned for the search, so nothing is opened again.
 */
async function selectSchema(dataset: string, version: number, select: readonly string[]) {
  if (select.length === 0) return undefined;
  const runtime = defaultRuntime();
  return runtime.tables.schemaAt(runtime.resolveDataset(dataset), version);
}

/** Builds the views of each dataset's version; failures are answered per dataset. */
async function prepareAll(requests: readonly PrepareRequest[]) {
  invoker ??= lambdaInvokerOf(defaultRuntime().config);
  const done = invoker;
  return Promise.all(
    requests.map(async (request) => {
      try {
        const report = await prepare(request, { invoker: done, runtime: defaultRuntime() });
        logEvent({ fn: "planner", prepared: report });
        return report;
      } catch (err) {
        const error = toFanoutError(err);
        // The request may be anything a caller sent (`{"prepare": null}`).
        const dataset = (request as Partial<PrepareRequest> | null)?.dataset;
        logEvent({ fn: "planner", prepare: dataset, error: error.code, message: error.message });
        return { dataset, ...error.toBody() };
      }
    }),
  );
}

export async function handler(event: unknown, context?: { awsRequestId?: string }) {
  const requestId = context?.awsRequestId ?? randomUUID();
  const preparing = prepareRequests(event, () => defaultRuntime().config.prepareDatasets);
  if (preparing) return { prepared: await prepareAll(preparing) };
  if (isHttpEvent(event)) {
    try {
      const request = parseHttpBody(event);
      const response = await search(request, requestId, httpDeadline(event));
      if (!wantsArrow(event) || !("results" in response)) {
        return withinResponseLimit(jsonResponse(200, response, NEGOTIATED));
      }
      const { dataset, select = [] } = request as SearchRequest;
      const schema = await selectSchema(dataset, response.version, select);
      return withinResponseLimit(arrowResponse(response, select, schema), "the Arrow answer");
    } catch (err) {
      return errorResponse(err);
    }
  }
  try {
    return withinResponseLimit(await search(event, requestId));
  } catch (err) {
    return toFanoutError(err).toBody();
  }
}
