/**
 * The `big-index` path (issue #23): an index several segment-search caches large. On one
 * version and one query set, behind each S3 first-byte latency of {@link LATENCIES_MS}: native
 * lancedb in this process with one segment-search's index cache (what one function can do) and
 * with an unbounded one (the best this machine can do), and lance-fanout through the local stack
 * at G = 1, 2, 4, 8 and `auto`, one segment-search slot per group, each worker bounded like a
 * function (memory size and index cache), views prepared first. Warm: every query once, then
 * every query timed.
 *   npm run bench -- --dataset big-index --paths big-index
 * @module
 */
import { join } from "node:path";
import * as lancedb from "@lancedb/lancedb";
import type { SearchResponse } from "../shared/search.js";
import type { DatasetContext } from "./context.js";
import { CACHE_DIR, recallAtK, TABLE } from "./datasets.js";
import { invokePlanner, nativeSearch } from "./modes.js";
import { loopbackLambdaClient, startBenchStack, uploadDataset } from "./stack.js";
import { percentile, round } from "./stats.js";

/** S3's typical first-byte latencies: the goals are judged at both. */
const LATENCIES_MS = [20, 60];
const WIDTHS = [1, 2, 4, 8];
/** One segment-search, scaled to this machine: its memory size and its index cache. */
const FUNCTION_MB = 512;
const CACHE_MB = 128;
const MB = 1024 * 1024;

export async function measureBigIndex(ctx: DatasetContext): Promise<void> {
  for (const latencyMs of LATENCIES_MS) await atLatency(ctx, latencyMs);
}

async function atLatency(ctx: DatasetContext, latencyMs: number): Promise<void> {
  const { info, spec, options } = ctx;
  let gets = 0;
  const stack = await startBenchStack({
    dataDir: join(CACHE_DIR, `s3-${info.name}`),
    latencyMs,
    bandwidthMBps: options.bandwidthMBps,
    workers: 1,
    slots: Math.max(...WIDTHS),
    segmentSearchMemorySize: FUNCTION_MB,
    prewarm: "background",
    workerEnv: {
      LANCE_FANOUT_INDEX_CACHE_MB: String(CACHE_MB),
      LANCE_FANOUT_TASK_INDEX_CACHE_MB: String(CACHE_MB),
    },
    onRequest: (method) => {
      if (method === "GET") gets++;
    },
  });
  /** Every query once (warm-up), then every query timed; S3 GETs per timed query. */
  const measure = async (search: (q: number[]) => Promise<string[]>) => {
    for (const q of ctx.queries) await search(q);
    const before = gets;
    const ms: number[] = [];
    const answers: string[][] = [];
    for (const q of ctx.queries) {
      const started = performance.now();
      answers.push(await search(q));
      ms.push(performance.now() - started);
    }
    return {
      p50: round(percentile(ms, 0.5), 1),
      p99: round(percentile(ms, 0.99), 1),
      getsPerQuery: round((gets - before) / ctx.queries.length, 1),
      recall: round(recallAtK(answers, ctx.truth), 3),
    };
  };
  const emit = (mode: string, tasks: number, figures: Awaited<ReturnType<typeof measure>>) => {
    options.log(
      `big-index ${latencyMs} ms: ${mode} p50 ${figures.p50} ms, ${figures.getsPerQuery} GETs`,
    );
    return ctx.emit({
      type: "big-index",
      dataset: info.name,
      latencyMs,
      cacheMb: CACHE_MB,
      functionMb: FUNCTION_MB,
      mode,
      tasks,
      queries: ctx.queries.length,
      ...figures,
    });
  };
  try {
    const uri = await uploadDataset(stack, info);
    const dbUri = uri.slice(0, uri.lastIndexOf("/"));
    for (const [mode, cacheBytes] of [
      ["native, one function's cache", CACHE_MB * MB],
      ["native, unbounded cache", 8 * 1024 * MB],
    ] as const) {
      const session = new lancedb.Session(BigInt(cacheBytes), BigInt(256 * MB));
      const db = await lancedb.connect(dbUri, { storageOptions: stack.storageOptions(), session });
      const table = await db.openTable(TABLE);
      await table.checkout(info.version);
      await emit(
        mode,
        1,
        await measure(async (q) => (await nativeSearch(table, spec.search, [q]))[0] ?? []),
      );
      table.close();
    }
    const client = loopbackLambdaClient(stack.lambdaEndpoint);
    await invokePlanner(client, { prepare: { dataset: uri, version: info.version } });
    for (const width of [...WIDTHS, "auto"] as const) {
      const request = {
        dataset: uri,
        version: info.version,
        k: spec.search.k,
        nprobes: spec.search.nprobes,
        strategy: width === "auto" ? "auto" : width === 1 ? "single" : "segments",
        ...(width === "auto" ? {} : { maxTasks: width }),
      };
      let tasks = 0;
      const mode = width === "auto" ? "auto" : `G=${width}`;
      const figures = await measure(async (q) => {
        const response = await invokePlanner<SearchResponse>(client, { ...request, query: q });
        tasks = response.plan.tasks;
        return response.results.map((r) => r._rowid);
      });
      await emit(mode, tasks, figures);
    }
    client.destroy();
  } finally {
    await stack.stop();
  }
}
