/**
 * Where fan-out wins, first measurement (issue #23): an index several segment-search caches
 * large. On one version and one query set, behind the same S3 first-byte latency: native
 * lancedb in this process with one segment-search's index cache (what one function can do) and
 * with an unbounded one (the best this machine can do), and lance-fanout through the local stack
 * at G = 1, 2, 4, 8 and `auto`, one segment-search slot per group, each worker bounded like a
 * function (memory size and index cache), views prepared first. Warm: every query once, then
 * every query timed. Prints one JSON line per mode; not part of the report yet.
 *
 *   npx tsx bench/probes/big-index.ts [--latency-ms 20] [--queries 60] [--cache-mb 128]
 */
import { join } from "node:path";
import { parseArgs } from "node:util";
import * as lancedb from "@lancedb/lancedb";
import { keepOnLoopback } from "../../local/loopback.js";
import type { SearchResponse } from "../../shared/search.js";
import {
  CACHE_DIR,
  DATASETS,
  ensureDataset,
  groundTruth,
  loadQueries,
  recallAtK,
  TABLE,
} from "../datasets.js";
import { invokePlanner, nativeSearch } from "../modes.js";
import { loopbackLambdaClient, startBenchStack, uploadDataset } from "../stack.js";
import { percentile } from "../stats.js";

const { values } = parseArgs({
  options: {
    "latency-ms": { type: "string", default: "20" },
    queries: { type: "string", default: "60" },
    "cache-mb": { type: "string", default: "128" },
    "memory-mb": { type: "string", default: "512" },
  },
});
const latencyMs = Number(values["latency-ms"]);
const count = Number(values.queries);
const cacheMb = Number(values["cache-mb"]);
const WIDTHS = [1, 2, 4, 8];
const MB = 1024 * 1024;
const log = (line: string) => console.error(line);

keepOnLoopback();
const spec = DATASETS["big-index"];
if (!spec) throw new Error("no big-index dataset spec");
const info = await ensureDataset(spec, log);
const queries = await loadQueries(info, count);
const truth = await groundTruth(info, queries, spec.search.k, log);
let gets = 0;
const stack = await startBenchStack({
  dataDir: join(CACHE_DIR, "s3-big-index"),
  latencyMs,
  bandwidthMBps: 90,
  workers: 1,
  slots: Math.max(...WIDTHS),
  segmentSearchMemorySize: Number(values["memory-mb"]),
  prewarm: "background",
  workerEnv: {
    LANCE_FANOUT_INDEX_CACHE_MB: String(cacheMb),
    LANCE_FANOUT_TASK_INDEX_CACHE_MB: String(cacheMb),
  },
  onRequest: (method) => {
    if (method === "GET") gets++;
  },
});

/** Every query once (warm-up), then every query timed; GETs per timed query. */
async function measure(mode: string, search: (q: number[]) => Promise<string[]>) {
  for (const q of queries) await search(q);
  const before = gets;
  const ms: number[] = [];
  const answers: string[][] = [];
  for (const q of queries) {
    const started = performance.now();
    answers.push(await search(q));
    ms.push(performance.now() - started);
  }
  const line = {
    mode,
    latencyMs,
    cacheMb,
    p50: round(percentile(ms, 0.5)),
    p99: round(percentile(ms, 0.99)),
    getsPerQuery: round((gets - before) / queries.length),
    recall: round(recallAtK(answers, truth), 3),
  };
  console.log(JSON.stringify(line));
}

const round = (v: number, d = 1) => Math.round(v * 10 ** d) / 10 ** d;

try {
  const uri = await uploadDataset(stack, info);
  const dbUri = uri.slice(0, uri.lastIndexOf("/"));
  log(`big-index: ${info.rows} rows, ${info.segments} segments at ${uri}, ${latencyMs} ms latency`);
  for (const [mode, cacheBytes] of [
    ["native, one function's cache", cacheMb * MB],
    ["native, unbounded cache", 8 * 1024 * MB],
  ] as const) {
    const session = new lancedb.Session(BigInt(cacheBytes), BigInt(256 * MB));
    const db = await lancedb.connect(dbUri, { storageOptions: stack.storageOptions(), session });
    const table = await db.openTable(TABLE);
    await table.checkout(info.version);
    await measure(mode, async (q) => (await nativeSearch(table, spec.search, [q]))[0] ?? []);
    table.close();
  }
  const client = loopbackLambdaClient(stack.lambdaEndpoint);
  await invokePlanner(client, { prepare: { dataset: uri, version: info.version } });
  for (const width of [...WIDTHS, "auto"] as const) {
    const strategy = width === "auto" ? "auto" : width === 1 ? "single" : "segments";
    const request = {
      dataset: uri,
      version: info.version,
      k: spec.search.k,
      nprobes: spec.search.nprobes,
      strategy,
      ...(width === "auto" ? {} : { maxTasks: width }),
    };
    let tasks = 0;
    await measure(`lance-fanout ${width === "auto" ? "auto" : `G=${width}`}`, async (q) => {
      const response = await invokePlanner<SearchResponse>(client, { ...request, query: q });
      tasks = response.plan.tasks;
      return response.results.map((r) => r._rowid);
    });
    log(`  ${width}: ${tasks} task(s)`);
  }
} finally {
  await stack.stop();
}
