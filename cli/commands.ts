/**
 * What each `fanout` subcommand does; cli/fanout.ts only parses arguments.
 * @module
 */
import { createWriteStream } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { InvokeCommand, LambdaClient } from "@aws-sdk/client-lambda";
import { readInvokeOutput } from "../functions/common/invoke-output.js";
import { ensureDemoDataset } from "../local/demo-dataset.js";
import { DEMO_STACK, exampleSearch, prepareDemo, type TimedSearch } from "../local/demo-stack.js";
import { isAlive } from "../local/loopback.js";
import { FUNCTIONS, localEnv, startStack } from "../local/stack.js";
import { loadConfig } from "../shared/config.js";
import { storageOptions } from "../shared/dataset.js";
import { FanoutError, fromErrorBody, isErrorBody } from "../shared/errors.js";
import {
  createRuntime,
  gc,
  type PlanResponse,
  planSearch,
  prepare,
  type SearchRequest,
  type SearchResponse,
  vectorSearch,
} from "../shared/index.js";
import { type Format, formatRows } from "./output.js";
import { type RequestOptions, toRequest } from "./request-options.js";

/**
 * Points at the local stack (its default ports, or `LANCE_FANOUT_S3_PORT` /
 * `LANCE_FANOUT_LAMBDA_PORT`) what the environment leaves unset, so nothing falls back to AWS by
 * accident; what the user set wins. `AWS_ENDPOINT_URL` sets every service's endpoint, and
 * credentials go in pairs. The allow-list stays the user's: it guards a deployment from its
 * callers, and here the caller is the user (unset, every local path and every dataset on the
 * local S3 may be searched).
 */
export function useLocalStack(env: NodeJS.ProcessEnv = process.env): void {
  const isSet = (name: string) => Boolean(env[name]?.trim());
  const ports = loadConfig(env).localStack;
  const {
    LANCE_FANOUT_ALLOWED_DATASETS: _,
    AWS_ENDPOINT_URL_S3,
    AWS_ENDPOINT_URL_LAMBDA,
    AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY,
    ...rest
  } = localEnv(`http://127.0.0.1:${ports.s3}`, `http://127.0.0.1:${ports.lambda}`);
  const defaults = {
    ...rest,
    // lancedb re-opens clones without their storage options, reading this variable only.
    AWS_ENDPOINT_URL: env.AWS_ENDPOINT_URL_S3?.trim() || AWS_ENDPOINT_URL_S3,
    ...(isSet("AWS_ENDPOINT_URL") ? {} : { AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL_LAMBDA }),
    ...(isSet("AWS_ACCESS_KEY_ID") || isSet("AWS_SECRET_ACCESS_KEY")
      ? {}
      : { AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY }),
  };
  for (const [name, value] of Object.entries(defaults)) {
    if (!isSet(name)) env[name] = value;
  }
}

export async function serveCommand(o: {
  port?: number;
  s3Port?: number;
  lambdaPort?: number;
  dataDir: string;
  rows: number;
  freeze: boolean;
  logFile?: string;
  s3LatencyMs: number;
}): Promise<void> {
  const ports = loadConfig().localStack;
  await claimPidFile(o.dataDir);
  // The functions' JSON log lines, apart from what this command prints for its user.
  const logFile = o.logFile ?? join(o.dataDir, "functions.log");
  const functionLog = logFile === "-" ? undefined : createWriteStream(logFile, { flags: "a" });
  const stack = await startStack({
    functionLog,
    dataDir: o.dataDir,
    apiPort: o.port ?? ports.http,
    s3Port: o.s3Port ?? ports.s3,
    lambdaPort: o.lambdaPort ?? ports.lambda,
    starting: "starting the local stack",
    freeze: o.freeze,
    ...DEMO_STACK,
  }).catch(async (err: unknown) => {
    await rm(join(o.dataDir, "fanout.pid"), { force: true });
    const busy = (err as NodeJS.ErrnoException).code === "EADDRINUSE";
    throw busy
      ? new Error(`a port is in use (${String(err)}); set PORT or the --*-port options`)
      : err;
  });
  console.log(`local S3 on ${stack.s3.endpoint}, Lambda on ${stack.lambda.endpoint}`);
  const stop = async () => {
    console.log("\nstopping…");
    await stack.stop();
    await rm(join(o.dataDir, "fanout.pid"), { force: true });
    process.exit(0);
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  const { demo, warmUpMs, comparison } = await prepareDemo(stack, {
    rows: o.rows,
    s3LatencyMs: o.s3LatencyMs,
    progress: (line) => console.log(`demo dataset: ${line}`),
  });
  console.log(`warm-up search (segment views ready) in ${warmUpMs} ms`);
  const { auto, oneTask } = comparison;
  const example = exampleSearch(demo.uri);
  console.log(`
lance-fanout local stack
  HTTP API       ${stack.api.url}  (POST /search, GET /health)
  Lambda invoke  ${stack.lambda.endpoint}  (${Object.values(FUNCTIONS).join(", ")})
                 idle workers ${stack.lambda.freeze ? "frozen between invocations, as on Lambda (--no-freeze: left running)" : "left running (--no-freeze)"}
  S3             ${stack.s3.endpoint}  (bucket ${stack.bucket}, credentials S3RVER/S3RVER, first byte after ${stack.s3.latencyMs} ms: --s3-latency-ms)
  segment-search ${DEMO_STACK.segmentSearchSlots} slots, index cache ${stack.env.LANCE_FANOUT_TASK_INDEX_CACHE_MB} MiB each (LANCE_FANOUT_INDEX_CACHE_MB, LANCE_FANOUT_TASK_INDEX_CACHE_MB)
  function logs  ${functionLog ? `${logFile}  (--log-file - prints them here)` : "this terminal"}
  allow-list     ${stack.env.LANCE_FANOUT_ALLOWED_DATASETS ?? "none: every dataset"}  (LANCE_FANOUT_ALLOWED_DATASETS)
  demo dataset   ${demo.uri}  (${demo.rows} rows, ${demo.segments} index segments)

The search below, warm: auto ran ${tasks(auto)} in ${ms(auto)}; one task (strategy "single") ${ms(oneTask)}.
  ${auto.ms < oneTask.ms ? `Fan-out answers ${(oneTask.ms / auto.ms).toFixed(1)}x faster here.` : "Fan-out does not pay here."} Why auto chose its plan:
  ${auto.reason}

Try a filtered search:
  curl -s ${stack.api.url}/search -H 'content-type: application/json' \\
    -d '${JSON.stringify(example)}'

Ctrl-C stops everything.`);
}

function tasks(search: TimedSearch): string {
  return `${search.tasks} task${search.tasks === 1 ? "" : "s"}`;
}

function ms(search: TimedSearch): string {
  return `${search.ms.toLocaleString("en-US")} ms`;
}

/** One stack per data directory: a second `npm start` fails clearly instead of racing. */
async function claimPidFile(dataDir: string): Promise<void> {
  await mkdir(dataDir, { recursive: true });
  const file = join(dataDir, "fanout.pid");
  const pid = Number(await readFile(file, "utf8").catch(() => ""));
  if (pid && pid !== process.pid && isAlive(pid)) {
    throw new Error(
      `lance-fanout is already running (pid ${pid}); stop it first (Ctrl-C in its terminal)`,
    );
  }
  await writeFile(file, String(process.pid));
}

type Via = "local" | "http" | "lambda";

export async function searchCommand(
  o: RequestOptions & {
    via: Via;
    url?: string;
    function: string;
    json?: boolean;
    format: Format;
  },
): Promise<void> {
  const response = await searchVia(o.via, await toRequest(o), o);
  const format = o.json ? "json" : o.format;
  if (format === "json") {
    console.log(JSON.stringify(response, null, 2));
    return;
  }
  if (format === "table") {
    console.log(
      `version ${response.version}, index ${response.index.name}, ${response.plan.tasks} task(s)`,
    );
  }
  console.log(formatRows(response.results, format));
}

interface Remote {
  url?: string;
  function: string;
}

async function searchVia(via: Via, request: SearchRequest, o: Remote): Promise<SearchResponse> {
  return via === "local"
    ? vectorSearch(request)
    : (remote(via, request, o) as Promise<SearchResponse>);
}

/** The plan as the planner of `via` makes it: through the stack, with the stack's slots and caches. */
async function planVia(via: Via, request: SearchRequest, o: Remote): Promise<PlanResponse> {
  return via === "local"
    ? planSearch(request)
    : (remote(via, { ...request, explain: true }, o) as Promise<PlanResponse>);
}

async function remote(via: "http" | "lambda", request: SearchRequest, o: Remote): Promise<unknown> {
  const body =
    via === "http"
      ? await postSearch(o.url ?? `http://127.0.0.1:${loadConfig().localStack.http}`, request)
      : await invokeFunction(o.function, request);
  if (isErrorBody(body)) throw fromErrorBody(body);
  return body;
}

async function postSearch(url: string, request: SearchRequest): Promise<unknown> {
  const endpoint = `${url.replace(/\/$/, "")}/search`;
  const res = await fetch(endpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(request),
  }).catch((err: unknown) => {
    throw new FanoutError(
      "INTERNAL",
      `cannot reach the HTTP API at ${endpoint} (${causeOf(err)}); is it running? (PORT or --url)`,
    );
  });
  const text = await res.text();
  try {
    return JSON.parse(text);
  } catch {
    throw new FanoutError("INTERNAL", `${endpoint} answered ${res.status}: ${text.slice(0, 200)}`);
  }
}

async function invokeFunction(name: string, payload: unknown): Promise<unknown> {
  const { endpoint } = loadConfig().lambda;
  const client = new LambdaClient({ endpoint });
  try {
    const out = await client
      .send(new InvokeCommand({ FunctionName: name, Payload: JSON.stringify(payload) }))
      .catch((err: unknown) => {
        throw new FanoutError(
          "INTERNAL",
          `cannot invoke ${name} at ${endpoint ?? "AWS Lambda"} (${causeOf(err)})`,
        );
      });
    const { body, failure } = readInvokeOutput(out, name);
    if (failure) throw new FanoutError("INTERNAL", failure);
    return body;
  } finally {
    client.destroy();
  }
}

/** The innermost message of an error (fetch hides the socket's reason in `cause`). */
function causeOf(err: unknown): string {
  let inner = err;
  while (inner instanceof Error && inner.cause instanceof Error) inner = inner.cause;
  return inner instanceof Error ? inner.message : String(inner);
}

export async function planCommand(
  o: RequestOptions & Remote & { via: Via; format: Format },
): Promise<void> {
  const plan = await planVia(o.via, await toRequest(o), o);
  if (o.format === "json") {
    console.log(JSON.stringify(plan, null, 2));
    return;
  }
  const groups = plan.plan.groups.map((g, i) => ({
    group: i,
    kind: g.kind,
    segments: g.segments.length,
    rows: g.rows,
    cost: g.cost,
  }));
  if (o.format === "csv") {
    console.log(formatRows(groups, "csv"));
    return;
  }
  const costs = plan.plan.groups.map((g) => g.cost);
  const mean = costs.reduce((a, b) => a + b, 0) / Math.max(1, costs.length);
  const { index } = plan;
  const type = index.type ? `${index.type}, ` : "";
  console.log(
    `version ${plan.version} (written by ${plan.writer ?? "an unrecorded writer"}), ` +
      `index ${index.name || "(none)"} on ${index.column} (${type}${index.metric}), ` +
      `${index.segmentCount} segments, ${index.rows.indexed} rows indexed and ` +
      `${index.rows.unindexed} not -> ${plan.plan.tasks} task(s)`,
  );
  console.log(formatRows(groups, "table"));
  console.log(`balance (max cost / mean cost): ${(Math.max(...costs) / mean).toFixed(2)}`);
  console.log(`why: ${plan.plan.reason}`);
}

/** Builds a version's views before its first query: in this process, or through the planner. */
export async function prepareCommand(o: {
  dataset: string;
  version?: number;
  via: "local" | "lambda";
  function: string;
}): Promise<void> {
  const request = { dataset: o.dataset, version: o.version };
  // A line while it works (stdout keeps the report alone, for scripts).
  if (process.stderr.isTTY) {
    console.error(`preparing the views of ${o.dataset}: a minute or more on a large index…`);
  }
  if (o.via === "local") {
    console.log(JSON.stringify(await prepare(request), null, 2));
    return;
  }
  const body = await invokeFunction(o.function, { prepare: request });
  const [report] = (body as { prepared?: unknown[] } | null)?.prepared ?? [body];
  if (isErrorBody(report)) throw fromErrorBody(report);
  console.log(JSON.stringify(report, null, 2));
}

/** Removes dead views: in this process (one dataset, or every dataset under a view root). */
export async function gcCommand(o: {
  dataset?: string;
  root?: string;
  dryRun?: boolean;
  keepVersions?: number;
  graceMinutes?: number;
  via: "local" | "lambda";
  function: string;
}): Promise<void> {
  if (!o.dataset && !o.root && o.via === "local") {
    throw new FanoutError("INVALID_REQUEST", "gc: give --dataset, or --root s3://bucket or local");
  }
  if (o.via === "lambda") {
    const body = await invokeFunction(o.function, {
      gc: { dataset: o.dataset, dryRun: o.dryRun },
    });
    if (isErrorBody(body)) throw fromErrorBody(body);
    console.log(JSON.stringify(body, null, 2));
    return;
  }
  // The same rules as the deployment's configuration (a grace shorter than any query is refused).
  const config = loadConfig({
    ...process.env,
    ...(o.keepVersions && { LANCE_FANOUT_GC_KEEP_VERSIONS: String(o.keepVersions) }),
    ...(o.graceMinutes && { LANCE_FANOUT_GC_GRACE_MINUTES: String(o.graceMinutes) }),
  });
  const reports = await gc(
    { dataset: o.dataset, root: o.root, dryRun: o.dryRun },
    { runtime: createRuntime(config) },
  );
  console.log(JSON.stringify(reports, null, 2));
}

export async function makeDatasetCommand(o: {
  db: string;
  table: string;
  rows: number;
  dimension: number;
  segments: number;
  overwrite?: boolean;
}): Promise<void> {
  const kind = o.db.startsWith("s3://") ? "s3" : "local";
  const dataset = await ensureDemoDataset({
    db: o.db,
    table: o.table,
    rows: o.rows,
    dimension: o.dimension,
    segments: o.segments,
    overwrite: o.overwrite,
    storageOptions: storageOptions({ kind }, loadConfig().s3),
    progress: (line) => console.log(line),
  });
  console.log(JSON.stringify(dataset));
}
