/**
 * API Gateway HTTP API (payload format 2.0) events in and responses out. Declares the few event
 * fields it reads instead of depending on `aws-lambda` types.
 * @module
 */

import type { Schema } from "apache-arrow";
import { ARROW_STREAM, resultsToIpc } from "../../shared/arrow.js";
import { FanoutError, toFanoutError } from "../../shared/errors.js";
import { MAX_PAYLOAD_BYTES, withinPayloadLimit } from "../../shared/payload.js";
import type { SearchResponse } from "../../shared/search.js";
import { preferredMediaType } from "./accept.js";

export interface HttpEvent {
  readonly version: "2.0";
  readonly body?: string;
  readonly isBase64Encoded?: boolean;
  readonly headers?: Readonly<Record<string, string | undefined>>;
  readonly requestContext: {
    readonly http: { readonly method: string; readonly path: string };
    /** When API Gateway received the request (epoch ms). */
    readonly timeEpoch?: number;
  };
}

export interface HttpResponse {
  readonly statusCode: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  readonly isBase64Encoded?: boolean;
}

export function isHttpEvent(event: unknown): event is HttpEvent {
  return (
    typeof event === "object" &&
    event !== null &&
    (event as { version?: unknown }).version === "2.0" &&
    typeof (event as { requestContext?: { http?: unknown } }).requestContext?.http === "object"
  );
}

/** The JSON body of an HTTP event. @throws FanoutError 413 or 400. */
export function parseHttpBody(event: HttpEvent): unknown {
  const raw = Buffer.from(event.body ?? "", event.isBase64Encoded ? "base64" : "utf8");
  if (raw.length > MAX_PAYLOAD_BYTES) {
    throw new FanoutError(
      "PAYLOAD_TOO_LARGE",
      `the request body is over ${MAX_PAYLOAD_BYTES} bytes`,
    );
  }
  let body: unknown;
  try {
    body = JSON.parse(raw.toString("utf8"));
  } catch {
    throw new FanoutError("INVALID_REQUEST", "the request body is not valid JSON");
  }
  const timeoutMs = (body as { timeoutMs?: unknown } | null)?.timeoutMs;
  if (typeof timeoutMs === "number" && timeoutMs > HTTP_MAX_TIMEOUT_MS) {
    throw new FanoutError(
      "INVALID_REQUEST",
      `timeoutMs: at most ${HTTP_MAX_TIMEOUT_MS} over HTTP (API Gateway ends a request at 30 s); ` +
        "invoke the planner directly or use the library for longer searches",
    );
  }
  return body;
}

/** The longest deadline an HTTP search may ask for: API Gateway gives up after 30 s, and the planner (29 s) must still answer TIMEOUT before its own timeout. */
export const HTTP_MAX_TIMEOUT_MS = 28_000;

/**
 * The latest time an HTTP search may answer: {@link HTTP_MAX_TIMEOUT_MS} from the request's
 * arrival at API Gateway, so time spent waiting for a planner counts against it.
 */
export function httpDeadline(event: HttpEvent): number {
  const arrived = event.requestContext.timeEpoch;
  return (
    (typeof arrived === "number" && Number.isFinite(arrived) ? arrived : Date.now()) +
    HTTP_MAX_TIMEOUT_MS
  );
}

/**
 * `result`, if its JSON (what Lambda sends back) fits a synchronous invocation's 6 MB response.
 * @throws FanoutError `PAYLOAD_TOO_LARGE` naming the size, instead of Lambda's own error.
 */
export function withinResponseLimit<T>(result: T, what = "the answer"): T {
  const hint = "; ask for fewer rows (k, queries) or columns, or search through the library";
  return withinPayloadLimit(result, what, MAX_PAYLOAD_BYTES, hint);
}

export function jsonResponse(
  statusCode: number,
  body: unknown,
  headers: Readonly<Record<string, string>> = {},
): HttpResponse {
  return {
    statusCode,
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  };
}

/** An answer chosen by `Accept`, for caches. */
export const NEGOTIATED = { vary: "accept" } as const;

/**
 * Whether `Accept` prefers an Arrow IPC stream to JSON, by q-value (see
 * {@link preferredMediaType}): JSON on a tie, with no `Accept`, or when it accepts neither.
 */
export function wantsArrow(event: HttpEvent): boolean {
  return (
    preferredMediaType(event.headers?.accept, ["application/json", ARROW_STREAM]) === ARROW_STREAM
  );
}

/**
 * The results as an Arrow IPC stream, `select` columns typed by `schema` (the dataset's, at the
 * answer's version); the version and plan travel in headers.
 */
export function arrowResponse(
  response: SearchResponse,
  select?: readonly string[],
  schema?: Schema,
): HttpResponse {
  return {
    statusCode: 200,
    headers: {
      "content-type": ARROW_STREAM,
      ...NEGOTIATED,
      "x-lance-fanout-version": String(response.version),
      "x-lance-fanout-tasks": String(response.plan.tasks),
    },
    body: Buffer.from(resultsToIpc(response.results, select, schema)).toString("base64"),
    isBase64Encoded: true,
  };
}

export function errorResponse(err: unknown): HttpResponse {
  const error = toFanoutError(err);
  return jsonResponse(error.status, error.toBody());
}
