/**
 * The `big-index` path (issue #23): an index several segment-search caches large. On one
 * version and one query set, behind each S3 first-byte latency of {@link LATENCIES_MS}: native
 * lancedb in this process with one segment-search's index cache (what one function can do) and
 * with an unbounded one (the best this machine can do); lance-fanout through the local stack at
 * G = 1, 2, 4, 8 and `auto`, one segment-search slot per group, each worker bounded like a
 * function (memory size and index cache), views prepared first; and lance-fanout in this process
 * with one function's cache (one environment holds every group: fanning out holds no more of
 * the index, only overlaps the tasks' reads).
 * Cold: the first query of fresh processes (or a fresh lancedb session). Warm: every query once,
 * then every query timed, with the S3 requests, bytes and CPU time of each function counted;
 * through the stack in two passes over the modes, forward over half the queries and reversed
 * over the other half, pooled, so that no mode is always measured last.
 *   npm run bench -- --dataset big-index --paths big-index
 * @module
 */
import { join } from "node:path";
import * as lancedb from "@lancedb/lancedb";
import { localEnv } from "../local/stack.js";
import { loadConfig } from "../shared/config.js";
import { inProcessInvoker } from "../shared/invoker.js";
import type { SearchRequest } from "../shared/request.js";
import { createRuntime } from "../shared/runtime.js";
import { type SearchResponse, vectorSearch } from "../shared/search.js";
import type { DatasetContext } from "./context.js";
import { CACHE_DIR, recallAtK, TABLE } from "./datasets.js";
import { selfResources } from "./env.js";
import {
  distinctPlans,
  invokePlanner,
  nativeSearch,
  type PlanRecord,
  planRecordOf,
} from "./modes.js";
import {
  type BenchStack,
  BUCKET,
  loopbackLambdaClient,
  startBenchStack,
  uploadDataset,
} from "./stack.js";
import { percentile, round, twoPasses } from "./stats.js";

/** S3's typical first-byte latencies: the goals are judged at both. */
const LATENCIES_MS = [20, 60];
const WIDTHS = [1, 2, 4, 8] as const;
/** In this process every task shares one cache: two widths and `auto` show what that does. */
const IN_PROCESS_WIDTHS = [1, 8] as const;
/** In-process queries (a prefix of the query set): at one cache they take what native does. */
const IN_PROCESS_QUERIES = 30;
const COLD_SAMPLES = 3;
/** One segment-search, scaled to this machine: its memory size and its index cache. */
const FUNCTION_MB = 512;
const CACHE_MB = 128;
const MB = 1024 * 1024;

type Width = (typeof WIDTHS)[number] | "auto";
type Search = (query: number[]) => Promise<{ ids: string[]; tasks: number; plan?: PlanRecord }>;

/** One timed block of queries and what it cost. */
interface Sample {
  readonly tasks: number;
  /** The distinct plans its queries ran. */
  readonly plans: readonly PlanRecord[];
  readonly ms: readonly number[];
  readonly answers: readonly string[][];
  readonly truth: readonly string[][];
  readonly gets: number;
  readonly bytes: number;
  /** CPU milliseconds of each role during the block. */
  readonly cpu: ReadonlyMap<string, number>;
}

/** CPU milliseconds per timed query: each function's workers, the busiest slot, this process. */
export interface CpuPerQuery {
  readonly planner: number;
  readonly segmentSearch: number;
  readonly busiestSlot: number;
  readonly merge: number;
  /** The harness: the caller's SDK client, the local S3 and the latency proxy. */
  readonly harness: number;
}

export async function measureBigIndex(ctx: DatasetContext): Promise<void> {
  for (const latencyMs of LATENCIES_MS) await atLatency(ctx, latencyMs);
}

async function atLatency(ctx: DatasetContext, latencyMs: number): Promise<void> {
  const { info, options } = ctx;
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
  const meter = () => ({ gets, bytes: stack.proxy.stats().bytes, cpu: cpuByRole(stack) });
  const emit = (path: string, mode: string, figures: Record<string, unknown>) => {
    options.log(`big-index ${latencyMs} ms ${path}: ${mode} ${JSON.stringify(figures)}`);
    return ctx.emit({
      type: "big-index",
      dataset: info.name,
      latencyMs,
      cacheMb: CACHE_MB,
      functionMb: FUNCTION_MB,
      path,
      mode,
      ...figures,
    });
  };
  /** Every query once (warm-up), then every query timed, with what the timed ones cost. */
  const sample = async (search: Search, queries = ctx.queries, truth = ctx.truth) => {
    for (const q of queries) await search(q);
    const before = meter();
    const timed = await timeQueries(search, queries);
    const after = meter();
    const cpu = new Map([...after.cpu].map(([role, t]) => [role, t - (before.cpu.get(role) ?? 0)]));
    const [gets, bytes] = [after.gets - before.gets, after.bytes - before.bytes];
    return { ...timed, truth: truth.slice(0, queries.length), gets, bytes, cpu };
  };
  const measure = async (search: Search, queries?: number[][]) =>
    figuresOf([await sample(search, queries)]);
  /** The first query of each of {@link COLD_SAMPLES} fresh starts (`fresh` before each). */
  const cold = async (fresh: () => Promise<Search>) => {
    const ms: number[] = [];
    for (let s = 0; s < COLD_SAMPLES; s++) {
      const search = await fresh();
      const started = performance.now();
      await search(ctx.queries[s] as number[]);
      ms.push(performance.now() - started);
    }
    return { coldMs: round(percentile(ms, 0.5), 1), coldSamples: ms.map((m) => round(m, 1)) };
  };
  try {
    const uri = await uploadDataset(stack, info);
    await measureNative(ctx, stack, uri, { measure, cold, emit });
    const client = loopbackLambdaClient(stack.lambdaEndpoint);
    const viaStack = (width: Width): Search => {
      const request = requestFor(ctx, uri, width);
      return async (q) => {
        const response = await invokePlanner<SearchResponse>(client, { ...request, query: q });
        return answerOf(response);
      };
    };
    const modes = [...WIDTHS, "auto"] as const;
    // Half the queries in order, the rest reversed: each mode is measured early and late.
    const passes = twoPasses(modes, 0, ctx.queries.length).map((pass) => ({
      order: pass.order,
      queries: ctx.queries.slice(pass.from, pass.to),
      truth: ctx.truth.slice(pass.from, pass.to),
    }));
    const coldFigures = new Map<Width, Record<string, unknown>>();
    const samples = new Map<Width, Sample[]>(modes.map((width) => [width, []]));
    for (const [p, pass] of passes.entries()) {
      for (const width of pass.order) {
        // Cold means one first query: a prewarm started by it would only compete for the local S3.
        if (p === 0) {
          const figures = await cold(async () => {
            await stack.freshWorkers("off");
            return viaStack(width);
          });
          coldFigures.set(width, figures);
        }
        await stack.freshWorkers("background");
        await invokePlanner(client, { prepare: { dataset: uri, version: info.version } });
        samples.get(width)?.push(await sample(viaStack(width), pass.queries, pass.truth));
      }
    }
    for (const width of modes) {
      const pooled = figuresOf(samples.get(width) ?? []);
      await emit("stack", modeOf(width), { ...coldFigures.get(width), ...pooled });
    }
    client.destroy();
    await measureInProcess(ctx, stack, uri, { measure, emit });
    await ctx.emit({
      type: "resources",
      dataset: info.name,
      path: `big-index+s3-${latencyMs}ms`,
      processes: [selfResources("harness"), ...stack.resources()],
      s3: stack.proxy.stats(),
    });
  } finally {
    await stack.stop();
  }
}

interface Harness {
  measure: (search: Search, queries?: number[][]) => Promise<Record<string, unknown>>;
  cold: (fresh: () => Promise<Search>) => Promise<Record<string, unknown>>;
  emit: (path: string, mode: string, figures: Record<string, unknown>) => Promise<void>;
}

/** Native lancedb in this process, one function's cache (cold and warm) and an unbounded one. */
async function measureNative(
  ctx: DatasetContext,
  stack: BenchStack,
  uri: string,
  { measure, cold, emit }: Harness,
): Promise<void> {
  const dbUri = uri.slice(0, uri.lastIndexOf("/"));
  const open = async (cacheBytes: number) => {
    const session = new lancedb.Session(BigInt(cacheBytes), BigInt(256 * MB));
    const db = await lancedb.connect(dbUri, { storageOptions: stack.storageOptions(), session });
    const table = await db.openTable(TABLE);
    await table.checkout(ctx.info.version);
    return table;
  };
  const searchOf =
    (table: lancedb.Table): Search =>
    async (q) => ({ ids: (await nativeSearch(table, ctx.spec.search, [q]))[0] ?? [], tasks: 1 });
  const opened: lancedb.Table[] = [];
  // Cold: a new session and connection each time (empty index and metadata caches), open included.
  const coldFigures = await cold(async () => async (q) => {
    const table = await open(CACHE_MB * MB);
    opened.push(table);
    return searchOf(table)(q);
  });
  for (const table of opened) table.close();
  for (const [mode, cacheBytes, extra] of [
    ["native, one function's cache", CACHE_MB * MB, coldFigures],
    ["native, unbounded cache", 8 * 1024 * MB, {}],
  ] as const) {
    const table = await open(cacheBytes);
    await emit("native", mode, { ...extra, ...(await measure(searchOf(table))) });
    table.close();
  }
}

/**
 * lance-fanout with the in-process invoker and one function's cache, the data behind the same
 * latency: every task shares this process's cache, as every group of one slot shares one
 * environment's, so a wider plan misses as often and gains only its tasks' overlapping reads.
 */
async function measureInProcess(
  ctx: DatasetContext,
  stack: BenchStack,
  uri: string,
  { measure, emit }: Omit<Harness, "cold">,
): Promise<void> {
  const runtime = createRuntime(
    loadConfig({
      ...localEnv(stack.proxy.endpoint, "", BUCKET),
      LANCE_FANOUT_LOG: "off",
      LANCE_FANOUT_MAX_TASKS: "1000",
      LANCE_FANOUT_INDEX_CACHE_MB: String(CACHE_MB),
      LANCE_FANOUT_PREWARM: "background",
    }),
  );
  const invoker = inProcessInvoker(runtime);
  const queries = ctx.queries.slice(0, IN_PROCESS_QUERIES);
  for (const width of [...IN_PROCESS_WIDTHS, "auto"] as const) {
    const request = requestFor(ctx, uri, width);
    const search: Search = async (q) => {
      const response = await vectorSearch({ ...request, query: [q] } as SearchRequest, {
        runtime,
        invoker,
      });
      return answerOf(response);
    };
    await emit("in-process", modeOf(width), await measure(search, queries));
  }
}

function requestFor(ctx: DatasetContext, uri: string, width: Width) {
  return {
    dataset: uri,
    version: ctx.info.version,
    k: ctx.spec.search.k,
    nprobes: ctx.spec.search.nprobes,
    strategy: width === "auto" ? "auto" : width === 1 ? "single" : "segments",
    ...(width === "auto" ? {} : { maxTasks: width }),
  };
}

const answerOf = (response: SearchResponse) => ({
  ids: response.results.map((r) => r._rowid),
  tasks: response.plan.tasks,
  plan: planRecordOf(response),
});

/** Each query timed in turn: the durations, the answers, and what the product ran. */
export async function timeQueries(search: Search, queries: readonly number[][]) {
  const ms: number[] = [];
  const answers: string[][] = [];
  const plans: (PlanRecord | undefined)[] = [];
  let tasks = 0;
  for (const q of queries) {
    const started = performance.now();
    const answer = await search(q);
    ms.push(performance.now() - started);
    answers.push(answer.ids);
    plans.push(answer.plan);
    tasks = answer.tasks;
  }
  return { tasks, plans: distinctPlans(plans), ms, answers };
}

const modeOf = (width: Width) => (width === "auto" ? "auto" : `G=${width}`);

/** The figures of one mode, its blocks pooled (each block's p50 beside them when there are several). */
function figuresOf(samples: readonly Sample[]) {
  const ms = samples.flatMap((s) => s.ms);
  const n = ms.length;
  const sum = (f: (s: Sample) => number) => samples.reduce((a, s) => a + f(s), 0);
  const cpu = new Map<string, number>();
  for (const s of samples) for (const [role, t] of s.cpu) cpu.set(role, (cpu.get(role) ?? 0) + t);
  const plans = distinctPlans(samples.flatMap((s) => s.plans));
  return {
    tasks: samples.at(-1)?.tasks ?? 0,
    ...(plans.length > 0 ? { plans } : {}),
    queries: n,
    p50: round(percentile(ms, 0.5), 1),
    p99: round(percentile(ms, 0.99), 1),
    ...(samples.length > 1
      ? { blockP50s: samples.map((s) => round(percentile(s.ms, 0.5), 1)) }
      : {}),
    getsPerQuery: round(sum((s) => s.gets) / n, 1),
    kbPerQuery: round(sum((s) => s.bytes) / 1024 / n, 1),
    cpuMsPerQuery: cpuPerQuery(cpu, n),
    recall: round(
      recallAtK(
        samples.flatMap((s) => s.answers),
        samples.flatMap((s) => s.truth),
      ),
      3,
    ),
  };
}

/** CPU milliseconds so far of each role (function name, or `harness`), retired workers included. */
function cpuByRole(stack: BenchStack): Map<string, number> {
  const out = new Map<string, number>();
  for (const p of [selfResources("harness"), ...stack.resources()]) {
    out.set(p.role, (out.get(p.role) ?? 0) + p.userCpuMs + p.systemCpuMs);
  }
  return out;
}

/** Per query, from each role's CPU milliseconds over `queries` timed queries. */
function cpuPerQuery(cpu: ReadonlyMap<string, number>, queries: number): CpuPerQuery {
  const delta = (role: string) => (cpu.get(role) ?? 0) / queries;
  const slots = [...cpu.keys()].filter((role) => role.includes("segment-search")).map(delta);
  const planner = [...cpu.keys()].find((role) => role.endsWith("planner")) ?? "";
  const merge = [...cpu.keys()].find((role) => role.endsWith("merge")) ?? "";
  return {
    planner: round(delta(planner), 1),
    segmentSearch: round(
      slots.reduce((a, b) => a + b, 0),
      1,
    ),
    busiestSlot: round(Math.max(0, ...slots), 1),
    merge: round(delta(merge), 1),
    harness: round(delta("harness"), 1),
  };
}
