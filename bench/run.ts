/**
 * `npm run bench`: native Lance vs one task vs segment fan-out vs query fan-out, on the same
 * dataset version, index, k, nprobes and refineFactor, in-process and through the local stack.
 * Writes JSON lines under bench/results/ and (unless --no-report) bench/README.md with plots
 * and bench/results/README.md.
 * `tsx bench/run.ts --help` lists the options.
 * @module
 */

import { spawn, spawnSync } from "node:child_process";
import { appendFile, mkdir, mkdtemp } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { Command, Option } from "commander";
import { keepOnLoopback } from "../local/loopback.js";
import { loadConfig } from "../shared/config.js";
import { inProcessInvoker } from "../shared/invoker.js";
import { readManifest } from "../shared/manifest-store.js";
import { createObjectStore } from "../shared/objects.js";
import { plan, tasksOf } from "../shared/planner.js";
import { parseSearchRequest, type SearchRequest } from "../shared/request.js";
import { createRuntime, type Runtime } from "../shared/runtime.js";
import { searchSegments } from "../shared/segment-search.js";
import { measureBigIndex } from "./big-index.js";
import {
  BENCH_PATHS,
  type BenchOptions,
  type BenchRecord,
  type DatasetContext,
  DEFAULT_PATHS,
  FALLBACK_PATHS,
  type FallbackPath,
  LIVING_PATHS,
  type LivingOptions,
} from "./context.js";
import {
  BENCH_DIR,
  CACHE_DIR,
  DATASETS,
  type DatasetInfo,
  ensureDataset,
  groundTruth,
  loadQueries,
  random,
  recallAtK,
} from "./datasets.js";
import { environment, type ProcessResources, selfResources, sources, threadEnv } from "./env.js";
import { measureFallback } from "./fallback-cost.js";
import { measureLiving } from "./living.js";
import { COMMIT_KINDS, parseCycle } from "./living-writer.js";
import { fitTasks, type TaskPoint } from "./model.js";
import {
  ALL_MODES,
  type Answer,
  distinctPlans,
  inProcessTarget,
  type Mode,
  type ModeName,
  modeId,
  type Phases,
  type PlanRecord,
  PRODUCT_HAS_STRATEGY,
  stackTarget,
  type Target,
} from "./modes.js";
import { writeReport } from "./report.js";
import { measureS3Reads } from "./s3-reads.js";
import { type BenchStack, invokeProbe, startBenchStack, uploadDataset } from "./stack.js";
import { percentile, round, shuffled, summarize, twoPasses } from "./stats.js";

export async function runBench(
  options: BenchOptions,
): Promise<{ file: string; records: BenchRecord[] }> {
  const runId = `${new Date().toISOString().replace(/[:.]/g, "-")}-${options.datasets.join("+")}`;
  await mkdir(options.out, { recursive: true });
  const file = join(options.out, `${runId}.jsonl`);
  const records: BenchRecord[] = [];
  const emit = async (record: Omit<BenchRecord, "runId">) => {
    const full = { ...record, runId } as BenchRecord;
    records.push(full);
    await appendFile(file, `${JSON.stringify(full)}\n`);
  };
  const log = options.log;
  await emit({
    type: "run",
    startedAt: new Date().toISOString(),
    environment: environment(),
    sources: sources(),
    productHasStrategy: PRODUCT_HAS_STRATEGY,
    options: { ...options, log: undefined },
  });

  for (const name of options.datasets) {
    const spec = DATASETS[name];
    if (!spec)
      throw new Error(`unknown dataset ${name}; known: ${Object.keys(DATASETS).join(", ")}`);
    const info = await ensureDataset(spec, log);
    const indexBytes = (
      await readManifest(createObjectStore({ region: "us-east-1" }), info.uri, info.version)
    ).segments.reduce((sum, s) => sum + (s.sizeBytes ?? 0), 0);
    await emit({ type: "dataset", dataset: name, info: { ...info, spec, indexBytes } });
    const batchMax = Math.max(...options.batches);
    const queries = await loadQueries(info, Math.max(options.queries, batchMax));
    const truth = await groundTruth(info, queries, spec.search.k, log);
    const widths = options.widths ?? defaultWidths(info.segments);
    const ctx: DatasetContext = { info, spec, queries, truth, widths, options, emit };

    if (options.paths.includes("in-process")) {
      const runtime = benchRuntime();
      const target = await inProcessTarget(info, runtime);
      await measureWorkloads(ctx, target);
      await taskProfile(ctx, runtime);
      await target.close();
      await emit({
        type: "resources",
        dataset: name,
        path: "in-process",
        processes: [selfResources("harness")],
      });
    }
    if (options.paths.includes("stack") || options.paths.includes("cold")) {
      await stackPhases(ctx);
    }
    if (options.paths.includes("reads") || options.paths.includes("stack-reads")) {
      await measureS3Reads(ctx);
    }
    for (const path of LIVING_PATHS)
      if (options.paths.includes(path)) await measureLiving(ctx, path);
    for (const path of Object.keys(FALLBACK_PATHS) as FallbackPath[]) {
      if (options.paths.includes(path)) await measureFallback(ctx, path);
    }
    if (options.paths.includes("big-index")) await measureBigIndex(ctx);
  }
  await emit({ type: "end", finishedAt: new Date().toISOString(), loadAverage: loadavg() });
  if (options.report) await writeReport(options.out, log);
  return { file, records };
}

/**
 * `--all`: every cell of the report, each part its own run of one commit, then the report; 158
 * min on this machine (2 cores) at 8c2bc4c. The parts, in order: big-index (31.2 min), the
 * static matrix of each dataset on every default path with batches of 1 and 100 (112.0 min for
 * the three: synth-1m 33.8, fashion-mnist 17.1, synth-many 61.1), the living dataset prepared
 * (60 commits, a reindex among them; 5.7 min) and not (30; 2.5 min), the cost of unindexed rows
 * (6.2 min). `--parts` runs some of them: a rerun split over sittings, each of
 * the same commit (the report takes every cell from that commit).
 */
export function allRuns(base: BenchOptions): { name: AllPart; options: BenchOptions }[] {
  const living = (prepare: boolean, commits: number) => ({ ...base.living, prepare, commits });
  const static_ = (dataset: string) => ({
    datasets: [dataset],
    paths: [...DEFAULT_PATHS],
    cold: 3,
  });
  const parts: Record<AllPart, Partial<BenchOptions>> = {
    "big-index": { datasets: ["big-index"], paths: ["big-index"], batches: [1] },
    "fashion-mnist": static_("fashion-mnist"),
    "synth-1m": static_("synth-1m"),
    "synth-many": static_("synth-many"),
    living: {
      datasets: ["living"],
      paths: [...LIVING_PATHS],
      workers: 4,
      living: living(true, 60),
    },
    "living-unprepared": {
      datasets: ["living"],
      paths: [...LIVING_PATHS],
      workers: 4,
      living: living(false, 30),
    },
    fallback: {
      datasets: ["living"],
      paths: Object.keys(FALLBACK_PATHS) as FallbackPath[],
      workers: 4,
    },
  };
  return ALL_PARTS.map((name) => ({ name, options: { ...base, ...parts[name], report: false } }));
}

export const ALL_PARTS = [
  "big-index",
  "fashion-mnist",
  "synth-1m",
  "synth-many",
  "living",
  "living-unprepared",
  "fallback",
] as const;
export type AllPart = (typeof ALL_PARTS)[number];

/** G = 1, 2, 4, ... and the number of segments itself. */
export function defaultWidths(segments: number): number[] {
  const out: number[] = [];
  for (let g = 1; g < segments; g *= 2) out.push(g);
  out.push(segments);
  return out;
}

function benchRuntime(): Runtime {
  return createRuntime(
    loadConfig({
      ...process.env,
      LANCE_FANOUT_VIEW_ROOT: join(CACHE_DIR, "views"),
      LANCE_FANOUT_MAX_TASKS: "1000",
      LANCE_FANOUT_VIEW_CACHE_SIZE: "256",
      // Warm means warm: views load their index once, as native does below (openNative).
      LANCE_FANOUT_PREWARM: "eager",
    }),
  );
}

/**
 * Batches run segment fan-out up to this width: wider plans of a batch were 2-5x slower than
 * one task in every run (bench/README.md), and one sample of one takes up to a minute.
 */
const BATCH_MAX_WIDTH = 8;
/** Warm-up samples of a batch: one batch already touches what a hundred single queries do. */
const BATCH_WARMUP = 1;

function modesFor(ctx: DatasetContext, batch: number): Mode[] {
  const out: Mode[] = [];
  const widths = batch === 1 ? ctx.widths : ctx.widths.filter((g) => g <= BATCH_MAX_WIDTH);
  for (const name of ctx.options.modes) {
    if (name === "native" || name === "single") out.push({ name, width: 1 });
    if (name === "segments") for (const g of widths) out.push({ name, width: g });
    if (name === "queries" && batch > 1) {
      for (const c of ctx.options.queryWidths) if (c <= batch) out.push({ name, width: c });
    }
    if (name === "auto" && PRODUCT_HAS_STRATEGY) out.push({ name, width: 1 });
  }
  return out;
}

/** Sample i of a workload: one query, or a batch of `batch` queries from the same query set. */
function sampleQueries(queries: readonly number[][], batch: number, i: number): number[][] {
  const start = (i * batch) % queries.length;
  return Array.from({ length: batch }, (_, j) => queries[(start + j) % queries.length] as number[]);
}

function truthFor(ctx: DatasetContext, batch: number, i: number): string[][] {
  const start = (i * batch) % ctx.queries.length;
  return Array.from({ length: batch }, (_, j) => ctx.truth[(start + j) % ctx.queries.length] ?? []);
}

interface Series {
  durations: number[];
  /** Where each block's durations start in `durations` (one block per pass, stats.ts twoPasses). */
  blocks: number[];
  answers: string[][];
  truth: string[][];
  tasks: number;
  /** The distinct plans the product answered with (one, unless the plan changed during the run). */
  plans: PlanRecord[];
  phases: Phases[];
  errors: string[];
}

function newSeries(): Series {
  return {
    durations: [],
    blocks: [],
    answers: [],
    truth: [],
    tasks: 0,
    plans: [],
    phases: [],
    errors: [],
  };
}

/** Keeps `answer`'s plan in `entry` if it is a new one. */
function notePlan(entry: Series, answer: Answer): void {
  entry.plans = distinctPlans([...entry.plans, answer.plan]);
}

async function timed(target: Target, mode: Mode, queries: number[][]): Promise<[number, Answer]> {
  const t0 = performance.now();
  const answer = await target.search(mode, queries);
  return [performance.now() - t0, answer];
}

/** Warm (and first-call) measurements of every mode and batch size on one target. */
async function measureWorkloads(
  ctx: DatasetContext,
  target: Target,
  label: string = target.path,
): Promise<void> {
  const { options } = ctx;
  const next = random(options.seed);
  for (const batch of options.batches) {
    const modes = modesFor(ctx, batch);
    const samples = batch === 1 ? options.queries : options.batchRepeats;
    const warmup = batch === 1 ? options.warmup : Math.min(options.warmup, BATCH_WARMUP);
    const series = new Map<string, Series>(modes.map((m) => [modeId(m), newSeries()]));
    options.log(
      `${ctx.info.name} ${label} batch ${batch}: ${modes.map(modeId).join(" ")} x ${samples}`,
    );
    const loadStart = loadavg();
    // First call of each mode: this process's first use of its views (recorded as cold).
    for (const mode of modes) {
      const [ms] = await timed(target, mode, sampleQueries(ctx.queries, batch, 0)).catch(
        (err: unknown) => [Number.NaN, String(err)] as const,
      );
      await ctx.emit({
        type: "first-call",
        dataset: ctx.info.name,
        path: label,
        batch,
        mode: mode.name,
        width: mode.width,
        ms: round(ms),
      });
    }
    // One query per mode: its plan opens the views a batch's does (the same groups), where a
    // batch sent to every worker at once (16 copies on 2 cores) outlasts a worker's timeout.
    if (target.warmUp) {
      for (const mode of modes) await target.warmUp(mode, sampleQueries(ctx.queries, 1, 0));
    }
    // Each mode runs its samples in blocks, in a seeded random order and then reversed: interleaved
    // per sample, a wide plan's 8-20 tasks on two cores left work behind that slowed the next
    // mode's query (synth-1m through the stack: single 228 ms p50 among every mode, 80 ms beside
    // G=20 alone, 53 ms alone), a contention no deployment has: there each request has its own
    // functions. Two passes (stats.ts twoPasses) keep drift over the run off the ranking.
    for (const pass of twoPasses(shuffled(modes, next), warmup, samples)) {
      for (const mode of pass.order) {
        const entry = series.get(modeId(mode)) as Series;
        entry.blocks.push(entry.durations.length);
        for (let s = pass.from - pass.discard; s < pass.to; s++) {
          await sampleInto(ctx, target, mode, batch, s, s >= pass.from, entry);
        }
      }
    }
    await emitSeries(ctx, label, batch, "warm", modes, series, loadStart);
  }
}

/** One sample of `mode`: timed into `entry` when `kept`, otherwise only run (a warm-up). */
async function sampleInto(
  ctx: DatasetContext,
  target: Target,
  mode: Mode,
  batch: number,
  s: number,
  kept: boolean,
  entry: Series,
): Promise<void> {
  const queries = sampleQueries(ctx.queries, batch, s);
  try {
    const [ms, answer] = await timed(target, mode, queries);
    if (!kept) return;
    entry.durations.push(ms);
    entry.answers.push(...answer.ids);
    entry.truth.push(...truthFor(ctx, batch, s));
    entry.tasks = answer.tasks;
    notePlan(entry, answer);
    if (answer.phases) entry.phases.push(answer.phases);
  } catch (err) {
    entry.errors.push(String(err));
    if (entry.errors.length > 3) throw err;
  }
}

async function emitSeries(
  ctx: DatasetContext,
  path: string,
  batch: number,
  phase: string,
  modes: Mode[],
  series: Map<string, Series>,
  loadStart: number[],
  extra: Record<string, unknown> = {},
): Promise<void> {
  const recallOf = (s: Series | undefined) => (s ? recallAtK(s.answers, s.truth) : 0);
  const nativeRecall = recallOf(series.get("native"));
  const threshold = ctx.options.recallThreshold ?? nativeRecall - ctx.options.recallSlack;
  for (const mode of modes) {
    const s = series.get(modeId(mode));
    if (!s) continue;
    const recall = round(recallOf(s), 4);
    const base = {
      dataset: ctx.info.name,
      path,
      batch,
      phase,
      mode: mode.name,
      width: mode.width,
      tasks: s.tasks,
      ...(s.plans.length > 0 ? { plans: s.plans } : {}),
      recall,
      nativeRecall: round(nativeRecall, 4),
      recallThreshold: round(threshold, 4),
      k: ctx.spec.search.k,
      nprobes: ctx.spec.search.nprobes,
      refineFactor: ctx.spec.search.refineFactor,
      version: ctx.info.version,
      segments: ctx.info.segments,
      manifestHash: ctx.info.manifestHash,
      ...extra,
    };
    if (s.errors.length > 0 && s.durations.length === 0) {
      await ctx.emit({ type: "failed", ...base, errors: s.errors.slice(0, 3) });
      continue;
    }
    if (recall < threshold) {
      await ctx.emit({
        type: "rejected",
        ...base,
        reason: `recall@${ctx.spec.search.k} ${recall} is below the threshold ${round(threshold, 4)} (native ${round(nativeRecall, 4)} - ${ctx.options.recallSlack}${ctx.options.recallThreshold === undefined ? "" : ", forced"}): no performance record written`,
      });
      ctx.options.log(`  ${modeId(mode)}: REJECTED, recall ${recall} < ${round(threshold, 4)}`);
      continue;
    }
    const summary = summarize(s.durations);
    const phaseP50 = (key: "plan" | "views" | "search" | "merge") =>
      round(
        percentile(
          s.phases.map((p) => p[key]),
          0.5,
        ),
      );
    const phases = s.phases.length
      ? {
          plan: phaseP50("plan"),
          views: phaseP50("views"),
          search: phaseP50("search"),
          merge: phaseP50("merge"),
        }
      : undefined;
    await ctx.emit({
      type: "measurement",
      ...base,
      ...summary,
      durationsMs: s.durations.map((d) => round(d)),
      blockP50s: blockP50s(s),
      phasesP50: phases,
      errors: s.errors.length,
      loadAverage: { start: loadStart, end: loadavg() },
    });
    ctx.options.log(
      `  ${modeId(mode).padEnd(14)} p50 ${summary.p50.toFixed(2).padStart(8)} ms  p95 ${summary.p95.toFixed(2).padStart(8)} ms  recall ${recall}  n ${summary.n}`,
    );
  }
}

/** Each block's p50: how far drift over the run moved this mode's samples. */
function blockP50s(s: Series): number[] {
  return s.blocks.map((start, i) =>
    round(percentile(s.durations.slice(start, s.blocks[i + 1] ?? s.durations.length), 0.5)),
  );
}

/**
 * Every group shape the planner makes (each G), each task searched alone and warm: the points
 * of the per-row / per-segment cost fit (shared/grouping.ts SEGMENT_COST).
 */
async function taskProfile(ctx: DatasetContext, runtime: Runtime): Promise<void> {
  const points: TaskPoint[] = [];
  const reps = ctx.options.smoke ? 3 : 7;
  const profile = inProcessInvoker(runtime).profile;
  for (const [g, queryCount] of ctx.widths.flatMap(
    (g) =>
      [
        [g, 1],
        [g, 8],
      ] as const,
  )) {
    const request = parseSearchRequest({
      dataset: ctx.info.uri,
      query: ctx.queries.slice(0, queryCount),
      k: ctx.spec.search.k,
      nprobes: ctx.spec.search.nprobes,
      refineFactor: ctx.spec.search.refineFactor,
      version: ctx.info.version,
      maxTasks: g,
      ...(PRODUCT_HAS_STRATEGY ? { strategy: "segments" } : {}),
    } as SearchRequest);
    const searchPlan = await plan(request, runtime, profile);
    const tasks = tasksOf(searchPlan, request, "bench");
    for (const [i, task] of tasks.entries()) {
      await searchSegments(task, runtime);
      const times: number[] = [];
      for (let r = 0; r < reps; r++) {
        const t0 = performance.now();
        await searchSegments(task, runtime);
        times.push(performance.now() - t0);
      }
      const group = searchPlan.groups[i];
      points.push({
        dataset: ctx.info.name,
        rows: group?.rows ?? 0,
        segments: group?.segments.length ?? 0,
        queries: queryCount,
        dimension: ctx.spec.dimension,
        ms: round(percentile(times, 0.5)),
      });
    }
  }
  const fit = fitTasks(points);
  await ctx.emit({ type: "task-profile", dataset: ctx.info.name, points, fit });
  ctx.options.log(
    `${ctx.info.name} task fit: ${fit.a.toFixed(3)} ms + ${(fit.perRowMs * 1e6).toFixed(3)} ms/M rows + ${fit.perSegmentMs.toFixed(3)} ms/segment (perSegment = ${fit.perSegmentRows} rows, r2 ${fit.r2}, ${fit.points} tasks)`,
  );
}

async function stackPhases(ctx: DatasetContext): Promise<void> {
  const { options, info } = ctx;
  const dataDir = join(CACHE_DIR, "s3");
  const stackOptions = {
    dataDir,
    workers: options.workers,
    workerEnv: threadEnv(),
    freeze: options.freeze ?? true,
  };
  // Warm, no injected latency: the overhead of the real invoke path.
  if (options.paths.includes("stack")) {
    const stack = await startBenchStack({
      ...stackOptions,
      latencyMs: 0,
      bandwidthMBps: 0,
      prewarm: "eager",
    });
    try {
      const uri = await uploadDataset(stack, info);
      await stack.freshWorkers();
      const target = await stackTarget(info, uri, stack);
      const probe = await invokeProbe(stack.lambdaEndpoint, 30);
      const bare = summarize(probe.slice(5));
      await ctx.emit({
        type: "invoke-probe",
        dataset: info.name,
        path: "stack",
        durationsMs: probe.map((d) => round(d)),
        ...bare,
      });
      options.log(`${info.name} stack: one bare invoke p50 ${bare.p50} ms`);
      const stackRun = {
        ...options,
        queries: options.stackQueries,
        batchRepeats: options.stackBatchRepeats,
      };
      await measureWorkloads({ ...ctx, options: stackRun }, target, "stack");
      await target.close();
      await emitResources(ctx, "stack", stack);
    } finally {
      await stack.stop();
    }
  }
  if (options.paths.includes("cold") && options.cold > 0) await coldPhase(ctx, stackOptions);
}

async function emitResources(
  ctx: DatasetContext,
  path: string,
  stack: BenchStack,
  extra: ProcessResources[] = [],
) {
  await ctx.emit({
    type: "resources",
    dataset: ctx.info.name,
    path,
    processes: [selfResources("harness"), ...stack.resources(), ...extra],
    s3: stack.proxy.stats(),
  });
}

/**
 * Cold runs through the stack with the injected S3 latency and bandwidth: each sample replaces
 * every worker by a fresh process (empty caches; process start excluded) before one query, and
 * native runs in a fresh process. Then the same modes warm (prewarmed), the latency still injected.
 */
async function coldPhase(
  ctx: DatasetContext,
  stackOptions: {
    dataDir: string;
    workers: number;
    workerEnv: Record<string, string>;
    freeze: boolean;
  },
): Promise<void> {
  const { options, info } = ctx;
  const stack = await startBenchStack({
    ...stackOptions,
    latencyMs: options.latencyMs,
    bandwidthMBps: options.bandwidthMBps,
    // Cold means one first query; a prewarm after it would only load S3 during the next mode.
    prewarm: "off",
  });
  const label = `stack+s3-${options.latencyMs}ms`;
  try {
    const uri = await uploadDataset(stack, info);
    const dbUri = uri.slice(0, uri.lastIndexOf("/"));
    const modes = modesFor(ctx, 1).filter((m) => m.name !== "queries");
    const series = new Map<string, Series>(modes.map((m) => [modeId(m), newSeries()]));
    const childResources: ProcessResources[] = [];
    const next = random(options.seed + 1);
    const loadStart = loadavg();
    options.log(`${info.name} ${label} cold: ${modes.map(modeId).join(" ")} x ${options.cold}`);
    // One untimed pass creates any missing views (a one-time cost per dataset version).
    {
      await stack.freshWorkers();
      const target = await stackTarget(info, uri, stack);
      for (const mode of modes)
        if (mode.name !== "native") await target.search(mode, [ctx.queries[0] as number[]]);
      await target.close();
    }
    for (let s = 0; s < options.cold; s++) {
      const query = [ctx.queries[(s + 1) % ctx.queries.length] as number[]];
      for (const mode of shuffled(modes, next)) {
        const entry = series.get(modeId(mode)) as Series;
        try {
          let ms: number;
          let ids: string[][];
          if (mode.name === "native") {
            const out = await nativeCold(dbUri, stack.storageOptions(), info, query);
            ms = out.ms;
            ids = out.ids;
            childResources.push({
              role: "native-cold",
              pid: out.pid,
              peakRssMiB: out.peakRssMiB,
              userCpuMs: out.userCpuMs,
              systemCpuMs: out.systemCpuMs,
            });
          } else {
            await stack.freshWorkers();
            const target = await stackTarget(info, uri, stack);
            const [t, answer] = await timed(target, mode, query);
            await target.close();
            ms = t;
            ids = answer.ids;
            entry.tasks = answer.tasks;
            notePlan(entry, answer);
          }
          entry.durations.push(ms);
          entry.answers.push(...ids);
          entry.truth.push(ctx.truth[(s + 1) % ctx.queries.length] ?? []);
        } catch (err) {
          entry.errors.push(String(err));
        }
      }
    }
    await emitSeries(ctx, label, 1, "cold", modes, series, loadStart, {
      s3LatencyMs: options.latencyMs,
      bandwidthMBps: options.bandwidthMBps,
      workers: options.workers,
    });
    await emitResources(ctx, label, stack, childResources);
    // Warm with the latency still there, in the same steady state as the warm phase: fresh
    // workers that prewarm, every view on every worker, native's index prewarmed. (Warm by use
    // only, each mode's p50 measured which index partitions earlier queries had happened to load.)
    await stack.freshWorkers("eager");
    const target = await stackTarget(info, uri, stack);
    const warmOptions = {
      ...options,
      batches: [1],
      queries: Math.min(options.stackQueries, 20),
      modes: options.modes.filter((m) => m !== "queries"),
    };
    await measureWorkloads({ ...ctx, options: warmOptions }, target, label);
    await target.close();
  } finally {
    await stack.stop();
  }
}

async function nativeCold(
  dbUri: string,
  storageOptions: Record<string, string>,
  info: DatasetInfo,
  queries: number[][],
): Promise<{
  ms: number;
  ids: string[][];
  pid: number;
  peakRssMiB: number;
  userCpuMs: number;
  systemCpuMs: number;
}> {
  const input = JSON.stringify({
    dbUri,
    storageOptions,
    version: info.version,
    params: info.spec.search,
    queries,
  });
  const child = spawn(
    process.execPath,
    [...process.execArgv, join(BENCH_DIR, "native-cold.ts"), input],
    {
      env: { ...process.env, LANCEDB_LOG: "error" },
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  let out = "";
  child.stdout.on("data", (chunk: Buffer) => {
    out += chunk.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
  if (code !== 0) throw new Error(`native cold child exited with ${code}`);
  return JSON.parse(out.trim().split("\n").at(-1) ?? "{}");
}

// ---------------------------------------------------------------------------------------------
// CLI

const list = (value: string) =>
  value
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
const numbers = (value: string) => list(value).map(Number);

export function cli(argv: string[] = process.argv): Command {
  const program = new Command()
    .name("bench")
    .description("native Lance vs one task vs segment fan-out vs query fan-out, same snapshot")
    .option("--dataset <names>", `datasets (${Object.keys(DATASETS).join(", ")})`, list, [
      "fashion-mnist",
      "synth-1m",
      "synth-many",
    ])
    .option("--modes <modes>", `modes (${ALL_MODES.join(", ")})`, list, [
      "native",
      "single",
      "segments",
      "queries",
      "auto",
    ])
    .option(
      "--widths <G>",
      "segment fan-out widths (default 1,2,4,... and the segment count)",
      numbers,
    )
    .option("--query-widths <C>", "query fan-out chunk counts", numbers, [2, 4, 8])
    .option("--batch <sizes>", "batch sizes (queries per request)", numbers, [1, 100])
    .option(
      "--paths <paths>",
      "in-process,stack,cold,reads,stack-reads,living,stack-living,fallback,stack-fallback " +
        "(cold: the stack with injected S3 latency; reads: S3 requests per query on the local " +
        "S3, in-process and through the stack; living: commits while queries run; fallback: " +
        "the cost of unindexed rows; the last four only when named)",
      list,
      [...DEFAULT_PATHS],
    )
    .option("--queries <n>", "single-query samples per mode", Number, 100)
    .option("--warmup <n>", "warm-up samples per mode (excluded from warm stats)", Number, 5)
    // 20: in two blocks of 5, a mode's block p50s at batch 100 differed by up to 25% (d300dda).
    .option("--batch-repeats <n>", "samples per mode for batches", Number, 20)
    .option("--stack-queries <n>", "single-query samples per mode through the stack", Number, 30)
    .option("--stack-batch-repeats <n>", "batch samples per mode through the stack", Number, 5)
    .option(
      "--cold <n>",
      "cold samples per mode through the stack with injected S3 latency (0: none)",
      Number,
      5,
    )
    .option("--latency-ms <ms>", "injected S3 first-byte latency for the cold phase", Number, 20)
    .option(
      "--bandwidth-mbps <MBps>",
      "injected per-connection S3 bandwidth cap (MB/s, 0: none)",
      Number,
      90,
    )
    .option("--workers <n>", "segment-search worker processes in the stack", Number, 16)
    .option("--no-freeze", "leave the stack's idle workers running (Lambda freezes them)")
    .option(
      "--unindexed <rows>",
      "fallback: unindexed rows to measure against the same rows indexed",
      numbers,
      [0, 10_000, 100_000],
    )
    .option("--commits <n>", "living: commits of the writer", Number, 50)
    .option("--interval <s>", "living: T, seconds between commit starts", Number, 1)
    .option("--cycle <kinds>", `living: commit kinds in turn (${COMMIT_KINDS.join(", ")})`, list, [
      ...COMMIT_KINDS.filter((k) => k !== "reindex"),
    ])
    .option(
      "--reindex-every <n>",
      "living: every n-th commit rebuilds the index (0: never)",
      Number,
      40,
    )
    .option("--prepare <on|off>", "living: prepare each version before its first query", "on")
    .option("--gc-every <K>", "living: gc every K commits (0: never)", Number, 5)
    .option("--gc-keep <n>", "living: gc keeps the views of the newest n versions", Number, 2)
    .option("--steady <n>", "living: queries per side after each first query", Number, 5)
    .option("--append-rows <n>", "living: rows per append", Number, 1000)
    .option(
      "--delete-rows <n>",
      "living: oldest rows each delete removes (default: what a cycle appends, a steady size)",
      Number,
    )
    .option("--lance-cpu-threads <n>", "LANCE_CPU_THREADS for every process")
    .option("--lance-io-threads <n>", "LANCE_IO_THREADS for every process")
    .option("--tokio-threads <n>", "TOKIO_WORKER_THREADS for every process")
    .option("--recall-threshold <r>", "fixed recall gate (default: native recall - slack)", Number)
    .option("--recall-slack <d>", "gate = native recall - this", Number, 0.01)
    .option("--out <dir>", "results directory", join(BENCH_DIR, "results"))
    .option("--no-report", "do not regenerate bench/README.md and bench/results/README.md")
    .option("--seed <n>", "seed of the order modes run in", Number, 1)
    .addOption(new Option("--smoke", "tiny dataset, few queries, < 60 s; no report"))
    .addOption(
      new Option(
        "--calibrate",
        "fit task-cost constants from bench/results into shared/calibration.json",
      ),
    )
    .addOption(
      new Option(
        "--report-only",
        "regenerate bench/README.md and bench/results/README.md from bench/results",
      ),
    )
    .addOption(
      new Option(
        "--all",
        "every part of the report, one run each, then the report (~160 min; other options are the parts' defaults)",
      ),
    )
    .option(
      "--parts <names>",
      `with --all: only these parts, in this order (${ALL_PARTS.join(", ")})`,
      list,
      [...ALL_PARTS],
    );
  program.parse(argv);
  return program;
}

function livingOptions(o: Record<string, unknown>, smoke: boolean): LivingOptions {
  const cycle = parseCycle(o.cycle as string[]);
  const appendRows = smoke ? 200 : (o.appendRows as number);
  const appends = cycle.filter((k) => k === "append" || k === "optimize").length;
  if (o.prepare !== "on" && o.prepare !== "off") throw new Error("--prepare: on or off");
  return {
    commits: smoke ? Math.min(o.commits as number, cycle.length) : (o.commits as number),
    intervalMs: (o.interval as number) * 1000,
    cycle,
    reindexEvery: smoke ? 0 : (o.reindexEvery as number),
    prepare: o.prepare === "on",
    gcEvery: o.gcEvery as number,
    gcKeep: o.gcKeep as number,
    steady: smoke ? Math.min(o.steady as number, 2) : (o.steady as number),
    appendRows,
    deleteRows: (o.deleteRows as number | undefined) ?? appendRows * appends,
  };
}

async function main(): Promise<void> {
  keepOnLoopback();
  const program = cli();
  const o = program.opts();
  // Thread counts are read by lancedb when it loads: re-run this process with them set.
  const wanted: Record<string, string | undefined> = {
    LANCE_CPU_THREADS: o.lanceCpuThreads,
    LANCE_IO_THREADS: o.lanceIoThreads,
    TOKIO_WORKER_THREADS: o.tokioThreads,
  };
  const differs = Object.entries(wanted).filter(
    ([k, v]) => v !== undefined && process.env[k] !== v,
  );
  if (differs.length > 0) {
    const env = { ...process.env, ...Object.fromEntries(differs) };
    const r = spawnSync(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
      env,
      stdio: "inherit",
    });
    process.exit(r.status ?? 1);
  }
  if (o.reportOnly) {
    await writeReport(o.out);
    return;
  }
  if (o.calibrate) {
    const { calibrate } = await import("./report.js");
    await calibrate(o.out);
    return;
  }
  const smoke = Boolean(o.smoke);
  const options: BenchOptions = {
    datasets: smoke ? ["smoke"] : o.dataset,
    modes: o.modes as ModeName[],
    widths: o.widths,
    queryWidths: smoke ? [2, 4] : o.queryWidths,
    batches: smoke ? [1, 10] : o.batch,
    // The smoke run stays in-process (< 60 s) unless --paths asks for the stack too.
    paths: (smoke && program.getOptionValueSource("paths") === "default"
      ? ["in-process"]
      : o.paths) as BenchOptions["paths"],
    queries: smoke ? Math.min(o.queries, 10) : o.queries,
    warmup: smoke ? 1 : o.warmup,
    batchRepeats: smoke ? 3 : o.batchRepeats,
    stackQueries: smoke ? Math.min(o.stackQueries, 10) : o.stackQueries,
    stackBatchRepeats: smoke ? 3 : o.stackBatchRepeats,
    cold: smoke ? Math.min(o.cold, 1) : o.cold,
    latencyMs: o.latencyMs,
    bandwidthMBps: o.bandwidthMbps,
    workers: smoke ? Math.min(o.workers, 4) : o.workers,
    freeze: o.freeze,
    recallThreshold: o.recallThreshold,
    recallSlack: o.recallSlack,
    out:
      smoke && o.out === join(BENCH_DIR, "results")
        ? await mkdtemp(join(tmpdir(), "bench-smoke-"))
        : o.out,
    report: smoke ? false : o.report,
    calibrate: false,
    smoke,
    seed: o.seed,
    living: livingOptions(o, smoke),
    unindexed: o.unindexed,
    log: (line) => console.log(line),
  };
  for (const m of options.modes) {
    if (!ALL_MODES.includes(m))
      throw new Error(`unknown mode ${m}; known: ${ALL_MODES.join(", ")}`);
  }
  for (const p of options.paths) {
    if (!BENCH_PATHS.includes(p))
      throw new Error(`unknown path ${p}; known: ${BENCH_PATHS.join(", ")}`);
  }
  if (options.modes.includes("auto") && !PRODUCT_HAS_STRATEGY) {
    console.log(
      "mode auto: skipped, the product has no `strategy` yet (bench/modes.ts PRODUCT_HAS_STRATEGY)",
    );
  }
  if (o.all) {
    const started = performance.now();
    const failed: string[] = [];
    // A part that fails leaves its cells to older runs (marked so), not the other parts undone.
    const unknown = (o.parts as string[]).filter(
      (p) => !(ALL_PARTS as readonly string[]).includes(p),
    );
    if (unknown.length > 0)
      throw new Error(`unknown part ${unknown.join(", ")}; known: ${ALL_PARTS.join(", ")}`);
    // In the order asked for: a split rerun starts with the parts it needs most.
    const runs = new Map(allRuns(options).map((p) => [p.name as string, p.options]));
    for (const name of o.parts as string[]) {
      const part = runs.get(name) as BenchOptions;
      const result = await runBench(part).catch((err: unknown) => {
        failed.push(name);
        console.error(`part ${name} failed:`, err);
      });
      const minutes = ((performance.now() - started) / 60_000).toFixed(1);
      console.log(`${name}: ${result ? result.file : "FAILED"} (${minutes} min so far)`);
    }
    await writeReport(options.out);
    if (failed.length > 0) console.error(`failed parts: ${failed.join("; ")}`);
    process.exit(failed.length > 0 ? 1 : 0);
  }
  const { file, records } = await runBench(options);
  const counts = records.reduce<Record<string, number>>((acc, r) => {
    acc[r.type] = (acc[r.type] ?? 0) + 1;
    return acc;
  }, {});
  console.log(`results: ${file} ${JSON.stringify(counts)}`);

  // lancedb and the AWS SDK keep handles open: end explicitly.
  process.exit(0);
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
