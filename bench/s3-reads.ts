/**
 * S3 requests per query, warm: native lancedb and the product's segment fan-out (`segments`,
 * G = the widths), with the dataset's `refineFactor` and without a refine step, the data on the
 * local S3 behind the bench proxy, which sees every request. Views exist and every index is
 * prewarmed before anything is counted, so a query's requests are its refine's reads of raw
 * vectors and whatever planning reads. The refine runs once per query (in the one task of a
 * one-group plan, else in the merge), so these stay flat in G where a refine per task read G
 * times as many. Paths: `reads` (vectorSearch in this process), `stack-reads` (the planner
 * function through the local Lambda endpoint, tasks in worker processes).
 * @module
 */
import { loadavg } from "node:os";
import { join } from "node:path";
import { localEnv } from "../local/stack.js";
import { loadConfig } from "../shared/config.js";
import { createRuntime } from "../shared/runtime.js";
import type { DatasetContext } from "./context.js";
import { CACHE_DIR, random, recallAtK, type SearchParams } from "./datasets.js";
import { threadEnv } from "./env.js";
import { inProcessTarget, type Mode, modeId, stackTarget, type Target } from "./modes.js";
import { type BenchS3, BUCKET, startBenchS3, startBenchStack, uploadDataset } from "./stack.js";
import { round, shuffled, summarize } from "./stats.js";

/** The bench paths this module measures, and the `path` of their records. */
const READS_PATHS = { reads: "in-process+s3", "stack-reads": "stack" } as const;

/** Requests of one kind: GETs by the dataset directory they read, LISTs, other methods. */
function requestKind(method: string, url: string): string {
  if (method !== "GET") return method.toLowerCase();
  const [path = "", query = ""] = url.split("?");
  if (/(^|&)(list-type|prefix|delimiter)=/.test(query)) return "list";
  const dir = ["_indices", "data", "_versions", "_deletions", "_transactions"].find((d) =>
    path.includes(`/${d}/`),
  );
  return dir ?? "other";
}

/** Requests by kind so far (fed by the proxy's `onRequest`) and the bytes the proxy served. */
interface Counts {
  readonly kinds: ReadonlyMap<string, number>;
  readonly bytes: number;
}

/** A counter of requests by kind: its `onRequest` goes to the proxy, `snapshot` reads it. */
function tally(): {
  onRequest: (method: string, url: string) => void;
  snapshot: (bytes: number) => Counts;
} {
  const kinds = new Map<string, number>();
  return {
    onRequest(method, url) {
      const kind = requestKind(method, url);
      kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
    },
    snapshot: (bytes) => ({ kinds: new Map(kinds), bytes }),
  };
}

/** Kinds that are requests but not object GETs: LISTs and the other methods. */
const NOT_GETS = new Set(["list", "head", "put", "post", "delete"]);

function since(before: Counts, after: Counts): Counts {
  const kinds = new Map<string, number>();
  for (const [k, n] of after.kinds) {
    const d = n - (before.kinds.get(k) ?? 0);
    if (d > 0) kinds.set(k, d);
  }
  return { kinds, bytes: after.bytes - before.bytes };
}

interface Cell {
  readonly durations: number[];
  readonly answers: string[][];
  readonly truth: string[][];
  readonly kinds: Map<string, number>;
  bytes: number;
  tasks: number;
}

export async function measureS3Reads(ctx: DatasetContext): Promise<void> {
  const dataDir = join(CACHE_DIR, "s3");
  const counter = tally();
  if (ctx.options.paths.includes("reads")) {
    const storage = await startBenchS3({
      dataDir,
      latencyMs: 0,
      bandwidthMBps: 0,
      onRequest: counter.onRequest,
    });
    const snapshot = () => counter.snapshot(storage.proxy.stats().bytes);
    try {
      const uri = await uploadDataset(storage, ctx.info);
      const runtime = s3Runtime(storage);
      const data = {
        uri,
        dbUri: uri.slice(0, uri.lastIndexOf("/")),
        storageOptions: storage.storageOptions(),
      };
      await measure(ctx, READS_PATHS.reads, snapshot, ctx.options.queries, (params) =>
        inProcessTarget(ctx.info, runtime, data, params),
      );
    } finally {
      await storage.stop();
    }
  }
  if (ctx.options.paths.includes("stack-reads")) {
    const stack = await startBenchStack({
      dataDir,
      latencyMs: 0,
      bandwidthMBps: 0,
      workers: ctx.options.workers,
      workerEnv: threadEnv(),
      prewarm: "eager",
      freeze: ctx.options.freeze ?? true,
      onRequest: counter.onRequest,
    });
    const snapshot = () => counter.snapshot(stack.proxy.stats().bytes);
    try {
      const uri = await uploadDataset(stack, ctx.info);
      await stack.freshWorkers();
      await measure(ctx, READS_PATHS["stack-reads"], snapshot, ctx.options.stackQueries, (params) =>
        stackTarget(ctx.info, uri, stack, params),
      );
    } finally {
      await stack.stop();
    }
  }
}

/** This process as a planner of the local stack sees it (views on the local S3), prewarming. */
function s3Runtime(storage: BenchS3) {
  return createRuntime(
    loadConfig({
      ...localEnv(storage.proxy.endpoint, "", BUCKET),
      LANCE_FANOUT_MAX_TASKS: "1000",
      LANCE_FANOUT_VIEW_CACHE_SIZE: "256",
      LANCE_FANOUT_PREWARM: "eager",
    }),
  );
}

/** The dataset's refine factor, then none (once, if the dataset has none). */
function refineSettings(search: SearchParams): SearchParams[] {
  const bare = { k: search.k, nprobes: search.nprobes };
  return search.refineFactor === undefined ? [bare] : [search, bare];
}

async function measure(
  ctx: DatasetContext,
  path: string,
  snapshot: () => Counts,
  samples: number,
  open: (params: SearchParams) => Promise<Target>,
): Promise<void> {
  const modes: Mode[] = [
    ...(ctx.options.modes.includes("native") ? [{ name: "native", width: 1 } as const] : []),
    ...(ctx.options.modes.includes("segments")
      ? ctx.widths.map((width) => ({ name: "segments", width }) as const)
      : []),
  ];
  for (const params of refineSettings(ctx.spec.search)) {
    ctx.options.log(
      `${ctx.info.name} ${path} S3 requests, refineFactor ${params.refineFactor ?? "none"}: ${modes.map(modeId).join(" ")} x ${samples}`,
    );
    const target = await open(params);
    try {
      const cells = await sample(ctx, target, modes, snapshot, samples);
      for (const mode of modes) {
        await emitCell(ctx, path, params, mode, cells.get(modeId(mode)) as Cell);
      }
    } finally {
      await target.close();
    }
  }
}

/**
 * Views made and indices loaded first (uncounted: first call, warm-up, warm-up samples); then
 * `samples` single queries per mode, modes interleaved, each counted on its own.
 */
async function sample(
  ctx: DatasetContext,
  target: Target,
  modes: readonly Mode[],
  snapshot: () => Counts,
  samples: number,
): Promise<Map<string, Cell>> {
  const query = (s: number) => [ctx.queries[s % ctx.queries.length] as number[]];
  for (const mode of modes) {
    await target.search(mode, query(0));
    await target.warmUp?.(mode, query(0));
  }
  const cells = new Map<string, Cell>(
    modes.map((m) => [
      modeId(m),
      { durations: [], answers: [], truth: [], kinds: new Map(), bytes: 0, tasks: 0 },
    ]),
  );
  const next = random(ctx.options.seed);
  for (let s = 0; s < ctx.options.warmup + samples; s++) {
    for (const mode of shuffled(modes, next)) {
      const before = snapshot();
      const t0 = performance.now();
      const answer = await target.search(mode, query(s));
      const ms = performance.now() - t0;
      const used = since(before, snapshot());
      if (s < ctx.options.warmup) continue;
      const cell = cells.get(modeId(mode)) as Cell;
      cell.durations.push(ms);
      cell.answers.push(...answer.ids);
      cell.truth.push(ctx.truth[s % ctx.queries.length] ?? []);
      for (const [k, n] of used.kinds) cell.kinds.set(k, (cell.kinds.get(k) ?? 0) + n);
      cell.bytes += used.bytes;
      cell.tasks = answer.tasks;
    }
  }
  return cells;
}

async function emitCell(
  ctx: DatasetContext,
  path: string,
  params: SearchParams,
  mode: Mode,
  cell: Cell,
): Promise<void> {
  const n = cell.durations.length;
  const perQuery = (v: number) => round(v / n, 2);
  const gets = [...cell.kinds].filter(([k]) => !NOT_GETS.has(k)).reduce((s, [, v]) => s + v, 0);
  const requests = [...cell.kinds.values()].reduce((s, v) => s + v, 0);
  const summary = summarize(cell.durations);
  const record = {
    type: "s3-reads",
    dataset: ctx.info.name,
    path,
    batch: 1,
    phase: "warm",
    mode: mode.name,
    width: mode.width,
    tasks: cell.tasks,
    k: params.k,
    nprobes: params.nprobes,
    refineFactor: params.refineFactor ?? null,
    version: ctx.info.version,
    segments: ctx.info.segments,
    manifestHash: ctx.info.manifestHash,
    queries: n,
    getsPerQuery: perQuery(gets),
    requestsPerQuery: perQuery(requests),
    bytesPerQuery: Math.round(cell.bytes / n),
    requestsPerQueryByKind: Object.fromEntries([...cell.kinds].map(([k, v]) => [k, perQuery(v)])),
    recall: round(recallAtK(cell.answers, cell.truth), 4),
    ...summary,
    durationsMs: cell.durations.map((d) => round(d)),
    loadAverage: loadavg(),
  };
  await ctx.emit(record);
  ctx.options.log(
    `  ${modeId(mode).padEnd(12)} refine ${String(params.refineFactor ?? "-").padEnd(2)} GETs/query ${record.getsPerQuery.toFixed(2).padStart(7)}  KB/query ${(record.bytesPerQuery / 1024).toFixed(1).padStart(8)}  p50 ${summary.p50.toFixed(2).padStart(8)} ms  recall ${record.recall}  n ${n}  ${JSON.stringify(record.requestsPerQueryByKind)}`,
  );
}
