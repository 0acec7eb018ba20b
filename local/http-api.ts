/**
 * The HTTP API of the embedded stack: what API Gateway's HTTP API does in front of the planner on
 * AWS, on 127.0.0.1. `POST /search` becomes a payload-format-2.0 event that is invoked through
 * the Lambda Invoke API with the real SDK client (normally against the local Lambda service), and
 * the planner's `{ statusCode, headers, body }` becomes the HTTP response.
 * @module
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  InvokeCommand,
  type InvokeCommandOutput,
  LambdaClient,
  LambdaServiceException,
  TooManyRequestsException,
} from "@aws-sdk/client-lambda";
import pRetry from "p-retry";
import { readInvokeOutput } from "../functions/common/invoke-output.js";
import { HOST, listenOnLoopback, readBody, sendJson } from "./net.js";

export interface HttpApiOptions {
  /** @default 0 = pick a free port */
  readonly port?: number;
  /** Name of the planner function, as the Lambda endpoint knows it. */
  readonly plannerFunction: string;
  /** Where the Invoke API is served, e.g. the local Lambda service's endpoint. */
  readonly lambdaEndpoint: string;
  /**
   * Start in the "starting" state with this reason: GET /health answers 503 until
   * {@link HttpApi.ready}. @default undefined: ready as soon as it listens
   */
  readonly starting?: string;
  /**
   * How long a request may take from its arrival, waiting for a free planner included, before
   * it is answered 504 (API Gateway's integration timeout). @default 29,000
   */
  readonly integrationTimeoutMs?: number;
}

export interface HttpApi {
  /** http://127.0.0.1:PORT */
  readonly url: string;
  readonly port: number;
  /** From now until {@link ready}, GET /health answers 503 `{ status: "starting", reason }`. */
  starting(reason: string): void;
  /** GET /health answers 200 `{ status: "ok" }`. */
  ready(): void;
  stop(): Promise<void>;
}

/** What GET /health answers: `starting` holds the reason while the stack is not ready yet. */
interface Health {
  starting: string | undefined;
}

const ROUTE_KEY = "POST /search";
/** API Gateway's HTTP API ends an integration at 29 s (docs/api.md: `timeoutMs`). */
const INTEGRATION_TIMEOUT_MS = 29_000;
/** The event carries the body, and a synchronous Lambda invoke carries at most 6 MB. */
const MAX_BODY_BYTES = 6 * 1024 * 1024;

/** Starts the HTTP API on 127.0.0.1: `POST /search`, `GET /health`, 404 for anything else. */
export async function startHttpApi(options: HttpApiOptions): Promise<HttpApi> {
  const { port = 0, plannerFunction, lambdaEndpoint } = options;
  const health: Health = { starting: options.starting };
  if (!plannerFunction) throw new TypeError("startHttpApi: plannerFunction is required");
  const client = new LambdaClient({
    endpoint: new URL(lambdaEndpoint).href,
    region: "us-east-1",
    // The local service checks no signature; static keys keep the SDK off every credential source.
    credentials: { accessKeyId: "local", secretAccessKey: "local" },
    maxAttempts: 1,
  });
  // On AWS the planner scales out; here its pool is fixed, so a throttled invoke waits for a free
  // worker (bounded, jittered) instead of passing the 429 on. A 429 after that still reaches the
  // caller.
  const invoke: Invoke = (event, signal) => {
    const command = new InvokeCommand({
      FunctionName: plannerFunction,
      Payload: JSON.stringify(event),
    });
    return pRetry(() => client.send(command, { abortSignal: signal }), {
      retries: 40,
      minTimeout: 25,
      maxTimeout: 1_000,
      randomize: true,
      signal,
      shouldRetry: ({ error }) => error instanceof TooManyRequestsException,
    });
  };
  const timeoutMs = options.integrationTimeoutMs ?? INTEGRATION_TIMEOUT_MS;

  const { server, port: bound } = await listenOnLoopback(port, (req, res) => {
    route(req, res, invoke, health, timeoutMs).catch((err: unknown) => {
      sendError(res, 500, "INTERNAL", err instanceof Error ? err.message : String(err));
    });
  });

  let stopped: Promise<void> | undefined;
  return {
    url: `http://${HOST}:${bound}`,
    port: bound,
    starting(reason) {
      health.starting = reason;
    },
    ready() {
      health.starting = undefined;
    },
    stop() {
      stopped ??= new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
        client.destroy();
      });
      return stopped;
    },
  };
}

type Invoke = (event: unknown, signal: AbortSignal) => Promise<InvokeCommandOutput>;

async function route(
  req: IncomingMessage,
  res: ServerResponse,
  invoke: Invoke,
  health: Health,
  timeoutMs: number,
): Promise<void> {
  const arrived = Date.now();
  const url = new URL(req.url ?? "/", `http://${HOST}`);
  const key = `${req.method} ${url.pathname}`;
  if (key === "GET /health" && health.starting !== undefined) {
    sendJson(res, 503, JSON.stringify({ status: "starting", reason: health.starting }), {
      "retry-after": "1",
    });
  } else if (key === "GET /health") {
    sendJson(res, 200, JSON.stringify({ status: "ok" }));
  } else if (key === ROUTE_KEY) {
    await search(req, res, url, invoke, arrived, arrived + timeoutMs);
  } else {
    sendError(res, 404, "NOT_FOUND", `no route for ${key}`);
  }
}

/**
 * One search: the planner invoked with the request's event, its answer passed on. At `deadline`
 * (from the request's arrival, waiting for a free planner included) the caller gets 504, as
 * from API Gateway, and the invoke is let go.
 */
async function search(
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  invoke: Invoke,
  arrived: number,
  deadline: number,
): Promise<void> {
  const body = await readBody(req, MAX_BODY_BYTES, "pause");
  if (body === undefined) {
    // The rest of the body is never read; closing the connection drops it.
    sendError(res, 413, "PAYLOAD_TOO_LARGE", `the request body is over ${MAX_BODY_BYTES} bytes`, {
      Connection: "close",
    });
    return;
  }
  const requestId = randomUUID();
  const cut = new AbortController();
  const timer = setTimeout(() => cut.abort(), Math.max(0, deadline - Date.now()));
  let out: InvokeCommandOutput;
  try {
    const event = httpEvent(req, url, body.toString("utf8"), requestId, arrived);
    out = await invoke(event, cut.signal);
  } catch (err) {
    if (cut.signal.aborted) {
      sendError(res, 504, "TIMEOUT", "the request did not finish within the API's 29 s");
    } else if (err instanceof TooManyRequestsException) {
      sendError(res, 429, "TOO_MANY_REQUESTS", `the planner is throttled: ${err.message}`);
    } else if (err instanceof LambdaServiceException && err.$metadata.httpStatusCode === 413) {
      // The body fit, but not with the event's envelope around it.
      sendError(res, 413, "PAYLOAD_TOO_LARGE", `the planner event is too large: ${err.message}`);
    } else {
      sendError(res, 500, "INTERNAL", `invoking the planner failed: ${String(err)}`);
    }
    return;
  } finally {
    clearTimeout(timer);
  }
  const answer = readInvokeOutput(out, "the planner");
  if (answer.failure) {
    // As API Gateway answers a Lambda function error: 500.
    sendError(res, 500, "INTERNAL", answer.failure);
    return;
  }
  const response = httpResponse(answer.text);
  res.writeHead(response.statusCode, { ...response.headers, "apigw-requestid": requestId });
  res.end(response.body);
}

/** The API Gateway HTTP API event (payload format 2.0) of a request to {@link ROUTE_KEY}. */
function httpEvent(
  req: IncomingMessage,
  url: URL,
  body: string,
  requestId: string,
  arrived: number,
) {
  const headers: Record<string, string> = {};
  // Node lower-cases header names already; API Gateway joins repeated headers with commas.
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(",") : value;
  }
  const now = new Date(arrived);
  return {
    version: "2.0",
    routeKey: ROUTE_KEY,
    rawPath: url.pathname,
    rawQueryString: url.search.slice(1),
    headers,
    requestContext: {
      http: {
        method: req.method,
        path: url.pathname,
        protocol: `HTTP/${req.httpVersion}`,
        sourceIp: req.socket.remoteAddress ?? "",
        userAgent: req.headers["user-agent"] ?? "",
      },
      requestId,
      routeKey: ROUTE_KEY,
      stage: "$default",
      time: clfTime(now),
      timeEpoch: now.getTime(),
    },
    body,
    isBase64Encoded: false,
  };
}

interface HttpResponse {
  readonly statusCode: number;
  readonly headers: Readonly<Record<string, string>>;
  /** Bytes when the function answered `isBase64Encoded` (binary bodies such as Arrow). */
  readonly body: string | Buffer;
}

/**
 * The HTTP response a payload-2.0 Lambda result stands for: `{ statusCode, headers, body }` as
 * is, or, like API Gateway, a 200 JSON response with the result as body when it has no status.
 */
function httpResponse(payload: string): HttpResponse {
  const result = parseJson(payload) as Partial<HttpResponse> & { isBase64Encoded?: boolean };
  if (typeof result?.statusCode !== "number") {
    return { statusCode: 200, headers: { "content-type": "application/json" }, body: payload };
  }
  const body = result.body ?? "";
  return {
    statusCode: result.statusCode,
    headers: result.headers ?? {},
    body: result.isBase64Encoded ? Buffer.from(String(body), "base64") : body,
  };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** API Gateway's `requestContext.time`: `02/Dec/2026:09:45:13 +0000`. */
function clfTime(date: Date): string {
  // toUTCString() is "Wed, 02 Dec 2026 09:45:13 GMT".
  const [, day, month, year, time] = date.toUTCString().split(" ");
  return `${day}/${month}/${year}:${time} +0000`;
}

/** The error body of the project's API: `{ error: { code, message } }`. */
function sendError(
  res: ServerResponse,
  status: number,
  code: string,
  message: string,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent) return;
  sendJson(res, status, JSON.stringify({ error: { code, message } }), headers);
}
