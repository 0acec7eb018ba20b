/**
 * What each `fanout` subcommand does; scripts/fanout.ts only parses arguments.
 * @module
 */
import { readFileSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { InvokeCommand, LambdaClient } from "@aws-sdk/client-lambda";
import { ensureDemoDataset } from "../local/demo-dataset.js";
import { exampleSearch, prepareDemo } from "../local/demo-stack.js";
import { isAlive } from "../local/loopback.js";
import { FUNCTIONS, localEnv, startStack } from "../local/stack.js";
import { loadConfig } from "../shared/config.js";
import { storageOptions } from "../shared/dataset.js";
import { isErrorBody } from "../shared/errors.js";
import {
  planSearch,
  type SearchRequest,
  type SearchResponse,
  vectorSearch,
} from "../shared/index.js";

interface RequestOptions {
  dataset: string;
  query?: string;
  k: number;
  column?: string;
  indexName?: string;
  version?: number;
  filter?: string;
  nprobes?: number;
  refineFactor?: number;
  maxTasks?: number;
  select?: string;
  coverage?: "require" | "fallback" | "indexed-only";
  strategy?: "auto" | "single" | "segments" | "queries" | "hybrid";
  offset?: number;
}

/**
 * Points every SDK and lancedb call of this process at the local stack (its default ports, or
 * `LANCE_FANOUT_S3_PORT` / `LANCE_FANOUT_LAMBDA_PORT`), unless the environment already names
 * endpoints: nothing falls back to AWS by accident.
 */
export function useLocalStack(): void {
  if (process.env.AWS_ENDPOINT_URL_S3 || process.env.AWS_ENDPOINT_URL) return;
  const s3 = `http://127.0.0.1:${process.env.LANCE_FANOUT_S3_PORT ?? 4569}`;
  const lambda = `http://127.0.0.1:${process.env.LANCE_FANOUT_LAMBDA_PORT ?? 9001}`;
  Object.assign(process.env, localEnv(s3, lambda));
}

function toRequest(o: RequestOptions, dimension = 64): SearchRequest {
  const query = o.query
    ? JSON.parse(o.query.startsWith("@") ? readFileSync(o.query.slice(1), "utf8") : o.query)
    : Array.from({ length: dimension }, () => Math.random());
  return {
    dataset: o.dataset,
    query,
    k: o.k,
    column: o.column,
    indexName: o.indexName,
    version: o.version,
    filter: o.filter,
    nprobes: o.nprobes,
    refineFactor: o.refineFactor,
    maxTasks: o.maxTasks,
    select: o.select?.split(",").map((s) => s.trim()),
    coverage: o.coverage,
    strategy: o.strategy,
    offset: o.offset,
  };
}

export async function serveCommand(o: {
  port: number;
  s3Port: number;
  lambdaPort: number;
  dataDir: string;
  rows: number;
}): Promise<void> {
  await claimPidFile(o.dataDir);
  const stack = await startStack({
    dataDir: o.dataDir,
    apiPort: o.port,
    s3Port: o.s3Port,
    lambdaPort: o.lambdaPort,
    starting: "starting the local stack",
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
  const { demo, warmUpMs } = await prepareDemo(stack, {
    rows: o.rows,
    progress: (line) => console.log(`demo dataset: ${line}`),
  });
  console.log(`warm-up search (segment views ready) in ${warmUpMs} ms`);
  const example = exampleSearch(demo.uri);
  console.log(`
lance-fanout local stack
  HTTP API       ${stack.api.url}  (POST /search, GET /health)
  Lambda invoke  ${stack.lambda.endpoint}  (${Object.values(FUNCTIONS).join(", ")})
  S3             ${stack.s3.endpoint}  (bucket ${stack.bucket}, credentials S3RVER/S3RVER)
  demo dataset   ${demo.uri}  (${demo.rows} rows, ${demo.segments} index segments)

Try a filtered search:
  curl -s ${stack.api.url}/search -H 'content-type: application/json' \\
    -d '${JSON.stringify(example)}'

Ctrl-C stops everything.`);
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

export async function searchCommand(
  o: RequestOptions & { via: string; url: string; function: string; json?: boolean },
): Promise<void> {
  const request = toRequest(o);
  const response = await searchVia(o.via, request, o);
  if (o.json) {
    console.log(JSON.stringify(response, null, 2));
    return;
  }
  console.log(
    `version ${response.version}, index ${response.index.name}, ${response.plan.tasks} task(s)`,
  );
  console.table(response.results);
}

async function searchVia(
  via: string,
  request: SearchRequest,
  o: { url: string; function: string },
): Promise<SearchResponse> {
  let body: unknown;
  if (via === "local") return vectorSearch(request);
  if (via === "http") {
    const res = await fetch(`${o.url.replace(/\/$/, "")}/search`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(request),
    });
    body = await res.json();
  } else if (via === "lambda") {
    const client = new LambdaClient({ endpoint: process.env.AWS_ENDPOINT_URL_LAMBDA || undefined });
    const out = await client.send(
      new InvokeCommand({ FunctionName: o.function, Payload: JSON.stringify(request) }),
    );
    body = JSON.parse(Buffer.from(out.Payload ?? []).toString("utf8") || "null");
  } else {
    throw new Error(`--via must be local, http or lambda, got ${via}`);
  }
  if (isErrorBody(body)) throw new Error(`${body.error.code}: ${body.error.message}`);
  return body as SearchResponse;
}

export async function planCommand(o: RequestOptions): Promise<void> {
  const plan = await planSearch(toRequest(o));
  const costs = plan.plan.groups.map((g) => g.cost);
  const mean = costs.reduce((a, b) => a + b, 0) / Math.max(1, costs.length);
  console.log(
    `version ${plan.version}, index ${plan.index.name} on ${plan.index.column} (${plan.index.metric}), ` +
      `${plan.index.segments} segments -> ${plan.plan.tasks} task(s)`,
  );
  console.table(
    plan.plan.groups.map((g, i) => ({
      group: i,
      segments: g.segments.length,
      rows: g.rows,
      cost: g.cost,
    })),
  );
  console.log(`balance (max cost / mean cost): ${(Math.max(...costs) / mean).toFixed(2)}`);
}

export async function makeDatasetCommand(o: {
  db: string;
  table: string;
  rows: number;
  dimension: number;
  segments: number;
}): Promise<void> {
  const kind = o.db.startsWith("s3://") ? "s3" : "local";
  const dataset = await ensureDemoDataset({
    db: o.db,
    table: o.table,
    rows: o.rows,
    dimension: o.dimension,
    segments: o.segments,
    storageOptions: storageOptions({ kind }, loadConfig().s3),
    progress: (line) => console.log(line),
  });
  console.log(JSON.stringify(dataset));
}
