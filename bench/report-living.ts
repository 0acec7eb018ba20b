/**
 * The report's sections on living datasets (bench/living.ts) and on what coverage `fallback`
 * costs (bench/fallback-cost.ts): the first queries after each commit kind, plots of views and
 * memory over time and the goal lines of issue 14 (bench/README.md); what each commit kind did
 * and the views and memory commit by commit (bench/results/README.md).
 * @module
 */

import { FUNCTION_DEFAULTS } from "../functions/defaults.js";
import { escapeXml, fmt, type Goal, type Rec, svgFrame } from "./report-format.js";
import { requests } from "./s3-phases.js";
import { percentile } from "./stats.js";

interface ViewKinds {
  index: number;
  flat: number;
  other: number;
}

/** In-process product queries: plan / slowest task / merge, ms. */
interface Phases {
  plan: number;
  tasks: number;
  merge: number;
}

/** "plan / task / merge" p50s, or "–" where the path cannot see them. */
function phaseText(list: readonly Phases[]): string {
  if (list.length === 0) return "–";
  const at = (k: keyof Phases) => fmt(p50(list.map((p) => p[k])), 1);
  return `${at("plan")} / ${at("tasks")} / ${at("merge")}`;
}

interface Census {
  views: number;
  objects: number;
  bytes: number;
}

/** One `living-commit` record. */
interface LivingCommit extends Rec {
  dataset: string;
  path: string;
  prepare: boolean;
  commit: number;
  kind: string;
  from: number;
  to: number;
  commitMs: number;
  shape: { rows: number; fragments: number; segments: number; unindexedRows: number };
  change: {
    fragmentsAdded: number;
    fragmentsRemoved: number;
    fragmentsChanged: number;
    segmentsAdded: number;
    segmentsRemoved: number;
  };
  prepared: { ms: number; views: number; created: number } | null;
  viewsCreated: { prepare: ViewKinds; queries: ViewKinds };
  first: {
    product?: { ms: number; tasks: number; version: number; phases?: Phases };
    native?: { ms: number; version: number };
    agreement?: number;
  };
  steady: { productMs: number[]; nativeMs: number[]; productPhases?: Phases[] };
  requests: Record<string, Record<string, number> | undefined>;
  census: Census;
  gc: { before: Census; after: Census; removed: number; ms: number | null } | null;
  memory: { processes: number; sumMiB: number; maxMiB: number; prewarmedMiB?: number };
  errors: string[];
  lagMs: number;
  atS: number;
  loadAverage: number[];
}

/** The commits of one living run (one path, prepare on or off), in order. */
interface LivingRun {
  readonly runId: string;
  readonly path: string;
  readonly prepare: boolean;
  readonly start: Rec | undefined;
  readonly commits: readonly LivingCommit[];
}

const PATH_LABEL: Record<string, string> = {
  living: "in-process",
  "stack-living": "through the local stack",
  fallback: "in-process",
  "stack-fallback": "through the local stack",
};

/** A run's commits reach the gc and memory goals' length. */
const LONG_RUN = 200;
/** The goals' tolerances. */
const FIRST_VS_NATIVE = 1.2;
const FIRST_VS_WARM = 1.2;
const MEMORY_SPREAD = 0.1;
const OBJECTS_SLACK = 0.1;

function runsOf(all: readonly Rec[]): LivingRun[] {
  const commits = all.filter((r): r is LivingCommit => r.type === "living-commit");
  const keys = [...new Set(commits.map((c) => `${c.runId}\t${c.path}\t${c.prepare}`))].sort();
  return keys.map((key) => {
    const [runId = "", path = "", prepare] = key.split("\t");
    const mine = commits
      .filter((c) => c.runId === runId && c.path === path && String(c.prepare) === prepare)
      .sort((a, b) => a.commit - b.commit);
    const start = all.find(
      (r) =>
        r.type === "living-start" &&
        r.runId === runId &&
        r.path === path &&
        String(r.prepare) === prepare,
    );
    return { runId, path, prepare: prepare === "true", start, commits: mine };
  });
}

const p50 = (values: readonly number[]) => percentile(values, 0.5);
const p99 = (values: readonly number[]) => percentile(values, 0.99);
const mean = (values: readonly number[]) =>
  values.length ? values.reduce((s, v) => s + v, 0) / values.length : Number.NaN;
const defined = <T>(values: readonly (T | undefined)[]): T[] =>
  values.filter((v): v is T => v !== undefined);

function label(run: LivingRun): string {
  return `${run.commits[0]?.dataset} ${PATH_LABEL[run.path] ?? run.path}, prepare ${run.prepare ? "on" : "off"}`;
}

/** Per-commit ratios of the product's first query to native's first query. */
function firstRatios(commits: readonly LivingCommit[]): number[] {
  return commits.flatMap((c) =>
    c.first.product && c.first.native ? [c.first.product.ms / c.first.native.ms] : [],
  );
}

function byKind(run: LivingRun): Map<string, LivingCommit[]> {
  const out = new Map<string, LivingCommit[]>();
  for (const c of run.commits) out.set(c.kind, [...(out.get(c.kind) ?? []), c]);
  return out;
}

/** Appends that left the index as it was: no segment added or removed. */
function plainAppends(run: LivingRun): LivingCommit[] {
  return run.commits.filter(
    (c) => c.kind === "append" && c.change.segmentsAdded === 0 && c.change.segmentsRemoved === 0,
  );
}

export function livingGoals(all: readonly Rec[]): Goal[] {
  const out: Goal[] = [];
  for (const run of runsOf(all)) {
    out.push(...appendGoal(run));
    if (run.prepare) out.push(...preparedGoals(run));
    out.push(...objectsGoal(run), ...memoryGoal(run));
  }
  return out;
}

function appendGoal(run: LivingRun): Goal[] {
  const appends = plainAppends(run);
  if (appends.length === 0) return [];
  const index = appends.reduce(
    (s, c) => s + c.viewsCreated.prepare.index + c.viewsCreated.queries.index,
    0,
  );
  const ratio = p50(firstRatios(appends));
  const product = p50(defined(appends.map((c) => c.first.product?.ms)));
  const native = p50(defined(appends.map((c) => c.first.native?.ms)));
  const misses = [
    ...(index > 0 ? [`${index} index views built`] : []),
    ...(ratio > FIRST_VS_NATIVE ? [`first query ${fmt(ratio)}x native's`] : []),
  ];
  return [
    {
      goal: `${label(run)}: after an append without index change, 0 index views and first query <= ${FIRST_VS_NATIVE}x native's first query`,
      measured: `${appends.length} appends: ${index} index views built; first query ${fmt(product, 1)} vs native ${fmt(native, 1)} ms (p50), median per-commit ratio ${fmt(ratio)}x`,
      verdict: misses.length ? `missed: ${misses.join(", ")}` : "met",
    },
  ];
}

function preparedGoals(run: LivingRun): Goal[] {
  return [...byKind(run)].map(([kind, commits]) => {
    const first = defined(commits.map((c) => c.first.product?.ms));
    const warm = p50(commits.flatMap((c) => c.steady.productMs));
    const ratio = p50(first) / warm;
    return {
      goal: `${label(run)}: first query after ${kind} <= ${FIRST_VS_WARM}x the warm p50`,
      measured: `first ${fmt(p50(first), 1)} ms p50 (p99 ${fmt(p99(first), 1)}, n ${first.length}) vs warm ${fmt(warm, 1)} ms (the steady queries on the same versions) = ${fmt(ratio)}x`,
      verdict: ratio <= FIRST_VS_WARM ? "met" : `missed: ${fmt(ratio)}x`,
    };
  });
}

/** View objects after each gc: after the run's first half they must not grow (10% slack). */
function objectsGoal(run: LivingRun): Goal[] {
  const gcs = run.commits.filter((c) => c.gc);
  const goal = `${label(run)}: view objects after ${LONG_RUN} commits with gc on stay bounded`;
  if (gcs.length === 0) return [];
  const n = run.commits.length;
  const half = Math.floor(n / 2);
  const early = gcs.filter((c) => c.commit < half).map((c) => c.gc?.after.objects ?? 0);
  const late = gcs.filter((c) => c.commit >= half).map((c) => c.gc?.after.objects ?? 0);
  const measured = `after gc: max ${Math.max(...early)} objects in commits 1-${half}, max ${Math.max(...late)} in ${half + 1}-${n} (last ${gcs.at(-1)?.gc?.after.objects}; before gc up to ${Math.max(...gcs.map((c) => c.gc?.before.objects ?? 0))})`;
  if (n < LONG_RUN || early.length === 0 || late.length === 0) {
    return [{ goal, measured, verdict: `not judged: ${n} commits (the goal needs ${LONG_RUN})` }];
  }
  const bound = Math.max(...early) * (1 + OBJECTS_SLACK);
  return [
    {
      goal,
      measured,
      verdict: Math.max(...late) <= bound ? "met" : `missed: grew past ${fmt(bound, 0)}`,
    },
  ];
}

/**
 * Segment-search memory through the stack, after the first tenth of the run: at equal index
 * shape (every worker holds the typical plan's views, so memory follows the segment count, and
 * the same count early and late shows what grew besides), and under the function's memory size.
 */
function memoryGoal(run: LivingRun): Goal[] {
  if (run.path !== "stack-living") return [];
  const n = run.commits.length;
  const settled = run.commits.slice(Math.ceil(n / 10));
  if (settled.length < 2) return [];
  const pairs = equalShapePairs(settled, n / 2);
  const worst = pairs.reduce<(typeof pairs)[number] | undefined>(
    (a, p) => (a && a.growth >= p.growth ? a : p),
    undefined,
  );
  const sums = settled.map((c) => c.memory.sumMiB);
  const largest = Math.max(...settled.map((c) => c.memory.maxMiB));
  const segments = settled.map((c) => c.shape.segments);
  const size = FUNCTION_DEFAULTS.segmentSearch.memorySize;
  const judged = (verdict: string) =>
    n < LONG_RUN ? `not judged: ${n} commits (the goal needs ${LONG_RUN})` : verdict;
  const shape = `sum over ${run.commits[0]?.memory.processes} workers ${fmt(Math.min(...sums), 0)}-${fmt(Math.max(...sums), 0)} MiB after commit ${n - settled.length}, index segments ${Math.min(...segments)}-${Math.max(...segments)}`;
  return [
    {
      goal: `${label(run)}: segment-search RSS within ${MEMORY_SPREAD * 100}% at equal index shape (the same segment count >= ${n / 2} commits apart)`,
      measured: worst
        ? `${pairs.length} segment counts seen early and late; worst ${worst.segments} segments: ${fmt(worst.from.memory.sumMiB, 0)} MiB at commit ${worst.from.commit + 1}, ${fmt(worst.to.memory.sumMiB, 0)} at ${worst.to.commit + 1} (${worst.growth >= 0 ? "+" : ""}${fmt(worst.growth * 100, 1)}%); ${shape}`
        : `no segment count seen ${n / 2} commits apart; ${shape}`,
      verdict: judged(
        !worst
          ? "not judged: no equal shape to compare"
          : worst.growth <= MEMORY_SPREAD
            ? "met"
            : `missed: +${fmt(worst.growth * 100, 1)}%`,
      ),
    },
    {
      goal: `${label(run)}: every segment-search under its memory size (${size} MB)`,
      measured: `largest worker ${fmt(largest, 0)} MiB (${fmt((largest / size) * 100, 0)}% of ${size} MB)`,
      verdict: judged(largest < size ? "met" : `missed: ${fmt(largest, 0)} MiB`),
    },
  ];
}

/** For each segment count: its earliest and latest commit, when at least `apart` commits apart. */
function equalShapePairs(commits: readonly LivingCommit[], apart: number) {
  const bySegments = Map.groupBy(commits, (c) => c.shape.segments);
  return [...bySegments].flatMap(([segments, list]) => {
    const from = list[0];
    const to = list.at(-1);
    if (!from || !to || to.commit - from.commit < apart) return [];
    return [{ segments, from, to, growth: to.memory.sumMiB / from.memory.sumMiB - 1 }];
  });
}

/** An SVG file of bench/plots and its name. */
export interface Plot {
  readonly file: string;
  readonly svg: string;
}

/**
 * The section of bench/README.md: each run's first queries after a commit against native's, and
 * its plots of views and memory over the commits.
 */
export function livingSection(
  all: readonly Rec[],
  marker: (runId: string) => string = () => "",
): { lines: string[]; plots: Plot[] } {
  const runs = runsOf(all);
  if (runs.length === 0) return { lines: [], plots: [] };
  const md = [
    "## Living datasets: commits while queries run",
    "",
    "`--paths living,stack-living` (bench/living.ts): a writer commits to a copy of the dataset on the",
    "local S3 while queries run. Each table: the product's first query after a commit against native's",
    "first query after the same commit (ms; GETs are S3 object GETs of that one query; the steady",
    "columns are the queries after it, same version), by commit kind in the order of the cycle; p99",
    "over n samples is close to the maximum when n is small. How a run goes, what each commit kind",
    "did and the views and memory over time: [results/README.md](results/README.md).",
    "",
  ];
  const plots: Plot[] = [];
  for (const run of runs) {
    const runPlots = overTimePlots(run);
    md.push(
      ...runSection(run, marker(run.runId)),
      runPlots.map((p) => `![${p.file}](plots/${p.file})`).join(" "),
      "",
    );
    plots.push(...runPlots);
  }
  return { lines: md, plots };
}

/** How a living run goes, for bench/results/README.md. */
const LIVING_METHOD = [
  "## Living datasets: what each commit did, views and memory over time",
  "",
  "`--paths living,stack-living` (bench/living.ts). A writer (lancedb in the harness) commits to a",
  "fresh copy of the dataset on the local S3 every T seconds (at once when the previous commit's",
  "work took longer), the kinds of `--cycle` in turn: `append` (new rows: an unindexed",
  "fragment), `delete` (the oldest rows still live, one fragment), `optimize` (new rows, then",
  "`optimize()`: compaction and the tail indexed as a delta segment), `compact` (`optimize()`",
  "alone) and `cleanup` (`optimize({ cleanupOlderThan: now })`). lancedb 0.31 has no other",
  "maintenance call. Deletes remove what the appends add, so the row count stays level; the",
  "segment count does not. After each commit, in this order: `prepare` (prepare on: in-process",
  "`shared/prepare.ts`, through the stack the planner invoked with `{prepare:{dataset}}`, as the",
  "commit's EventBridge event would), native's first query (`checkoutLatest()` and a search:",
  "what a reader following the latest must do) and `--steady` more, the product's first query",
  "(it pins the latest version itself) and as many more, a listing of the view prefix, memory,",
  "and every K commits gc (`gc()`, keepVersions n, `now` = wall time + the grace period",
  "+ 1 min: the production grace cannot go under 15 minutes, so gc is told it is later than it",
  "is). The product runs its default configuration (maxTasks 16, coverage `fallback`, prewarm",
  "`background`, 64 open views) with requests without `strategy`; native's index is prewarmed",
  "once at the start and later segments load as its queries touch them. The data is behind the",
  "bench proxy with the injected S3 latency, which counts requests per phase (work left running",
  "in the background counts in the phase it overlaps). Commit kinds are in the order of the",
  "cycle. The first queries after each commit: [bench/README.md](../README.md).",
  "",
];

/** The section of bench/results/README.md: how a run goes, then each run's commits in full. */
export function livingDetails(
  all: readonly Rec[],
  marker: (runId: string) => string = () => "",
): string[] {
  const runs = runsOf(all);
  if (runs.length === 0) return [];
  return [...LIVING_METHOD, ...runs.flatMap((run) => runDetails(run, marker(run.runId)))];
}

/** View objects (after the queries, after gc) and memory, commit by commit. */
function overTimePlots(run: LivingRun): Plot[] {
  const stem = `living-${run.commits[0]?.dataset}-${run.path}-prepare-${run.prepare ? "on" : "off"}`;
  const at = (f: (c: LivingCommit) => number | undefined) =>
    run.commits.flatMap((c) => {
      const y = f(c);
      return y === undefined ? [] : [[c.commit + 1, y] as const];
    });
  const memory = run.path === "stack-living" ? "segment-search RSS" : "harness RSS";
  return [
    {
      file: `${stem}-views.svg`,
      svg: lineChart(`${label(run)}: objects under the view prefix`, "objects", [
        {
          name: "after the queries",
          color: "#1f77b4",
          points: at((c) => c.gc?.before.objects ?? c.census.objects),
        },
        { name: "after gc", color: "#d62728", points: at((c) => c.gc?.after.objects) },
      ]),
    },
    {
      file: `${stem}-memory.svg`,
      svg: lineChart(`${label(run)}: ${memory}`, "MiB", [
        { name: "sum", color: "#2ca02c", points: at((c) => c.memory.sumMiB) },
        ...(run.path === "stack-living"
          ? [{ name: "largest worker", color: "#ff7f0e", points: at((c) => c.memory.maxMiB) }]
          : []),
      ]),
    },
  ];
}

interface Series {
  readonly name: string;
  readonly color: string;
  readonly points: readonly (readonly [number, number])[];
}

/** A small line chart over commits, y from 0. */
function lineChart(title: string, yLabel: string, series: readonly Series[]): string {
  const [W, H, L, R, T, B] = [640, 300, 60, 130, 30, 40];
  const xs = series.flatMap((s) => s.points.map(([x]) => x));
  const xMax = Math.max(1, ...xs);
  const yMax = Math.max(1, ...series.flatMap((s) => s.points.map(([, y]) => y))) * 1.1;
  const x = (v: number) => fmt(L + (v / xMax) * (W - L - R), 1);
  const y = (v: number) => fmt(T + (1 - v / yMax) * (H - T - B), 1);
  const parts = svgFrame(title, { W, H, L, R, T, B }, "commit", yLabel);
  for (let i = 0; i <= 4; i++) {
    const v = Number(((yMax * i) / 4).toPrecision(2));
    parts.push(
      `<line x1="${L - 4}" y1="${y(v)}" x2="${W - R}" y2="${y(v)}" stroke="#ddd"/>`,
      `<text x="${L - 6}" y="${Number(y(v)) + 4}" text-anchor="end">${v}</text>`,
      `<text x="${x((xMax * i) / 4)}" y="${H - B + 14}" text-anchor="middle">${Math.round((xMax * i) / 4)}</text>`,
    );
  }
  series.forEach((s, i) => {
    if (s.points.length === 0) return;
    parts.push(
      `<polyline fill="none" stroke="${s.color}" stroke-width="1.5" points="${s.points.map(([a, b]) => `${x(a)},${y(b)}`).join(" ")}"/>`,
      `<rect x="${W - R + 12}" y="${T + i * 18}" width="12" height="4" fill="${s.color}"/>`,
      `<text x="${W - R + 30}" y="${T + i * 18 + 6}">${escapeXml(s.name)}</text>`,
    );
  });
  parts.push("</svg>");
  return parts.join("\n");
}

/** A run's settings and outcome, its first queries after each commit kind, its steady state. */
function runSection(run: LivingRun, marker: string): string[] {
  const allSteady = run.commits.flatMap((c) => c.steady.productMs);
  const allNative = run.commits.flatMap((c) => c.steady.nativeMs);
  return [
    `### ${label(run)}${marker}`,
    "",
    runLine(run),
    "",
    ...firstQueries(run),
    "",
    `Steady state over the whole run: product p50 ${fmt(p50(allSteady), 1)} ms (n ${allSteady.length}), native p50 ${fmt(p50(allNative), 1)} ms (n ${allNative.length}).`,
    "",
  ];
}

/** The run's settings, the dataset at its start and end, the machine's load and its errors. */
function runLine(run: LivingRun): string {
  const { commits } = run;
  const first = commits[0];
  const last = commits.at(-1);
  const options = (run.start?.options ?? {}) as Record<string, unknown>;
  const startShape = (run.start?.shape ?? {}) as Record<string, number>;
  const loads = commits.map((c) => c.loadAverage[0] ?? 0);
  const span =
    last && first ? (last.atS - first.atS) / Math.max(1, commits.length - 1) : Number.NaN;
  const errors = commits.flatMap((c) => c.errors);
  return (
    `Run \`${run.runId}\`: ${commits.length} commits, T = ${fmt(Number(options.intervalMs) / 1000, 1)} s (a commit started every ${fmt(span, 1)} s on average), ` +
    `cycle ${(options.cycle as string[] | undefined)?.join(", ")}${Number(options.reindexEvery) > 0 ? ` with a reindex every ${options.reindexEvery} commits` : ""}, ${options.appendRows} rows per append, ${options.deleteRows} per delete, ` +
    `S3 first-byte latency ${options.latencyMs} ms${run.path === "stack-living" ? `, ${options.workers} segment-search workers` : ""}, ` +
    `gc every ${options.gcEvery} commits keeping ${options.gcKeep} versions. ` +
    `Dataset at the start: version ${run.start?.version}, ${startShape.rows} rows, ${startShape.segments} segment(s); ` +
    `at the end: version ${last?.to}, ${last?.shape.rows} rows, ${last?.shape.segments} segments, ${last?.shape.fragments} fragments. ` +
    `Load average (1 min) ${fmt(Math.min(...loads), 1)}-${fmt(Math.max(...loads), 1)} during the run.` +
    (errors.length
      ? ` **${errors.length} errors**, e.g. \`${errors[0]?.slice(0, 300)}\`.`
      : " No errors.")
  );
}

/** By commit kind: the product's first query after the commit against native's, and the steady queries. */
function firstQueries(run: LivingRun): string[] {
  const md = [
    "| kind | product first p50 / p99 | native first p50 / p99 | product / native (median per commit) | product steady p50 | native steady p50 | product first / its steady p50 | GETs first: product / native | GETs per steady query: product / native | tasks (first) | product plan / slowest task / merge p50, first; steady | answers = native's |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const [kind, list] of byKind(run)) {
    const pf = defined(list.map((c) => c.first.product?.ms));
    const nf = defined(list.map((c) => c.first.native?.ms));
    const ps = list.flatMap((c) => c.steady.productMs);
    const ns = list.flatMap((c) => c.steady.nativeMs);
    const gets = (key: string, per: (c: LivingCommit) => number) =>
      fmt(mean(list.map((c) => requests(c.requests[key], ["get"]) / per(c))), 1);
    md.push(
      `| ${kind} | ${fmt(p50(pf), 1)} / ${fmt(p99(pf), 1)} | ${fmt(p50(nf), 1)} / ${fmt(p99(nf), 1)} | ${fmt(p50(firstRatios(list)))}x | ` +
        `${fmt(p50(ps), 1)} | ${fmt(p50(ns), 1)} | ${fmt(p50(pf) / p50(ps))}x | ` +
        `${gets("productFirst", () => 1)} / ${gets("nativeFirst", () => 1)} | ` +
        `${gets("productSteady", (c) => Math.max(1, c.steady.productMs.length))} / ${gets("nativeSteady", (c) => Math.max(1, c.steady.nativeMs.length))} | ` +
        `${fmt(mean(defined(list.map((c) => c.first.product?.tasks))), 1)} | ` +
        `${phaseText(defined(list.map((c) => c.first.product?.phases)))}; ${phaseText(list.flatMap((c) => c.steady.productPhases ?? []))} | ` +
        `${fmt(mean(defined(list.map((c) => c.first.agreement))), 3)} |`,
    );
  }
  return md;
}

/** What each commit kind of a run did, then its views and memory over time. */
function runDetails(run: LivingRun, marker: string): string[] {
  return [
    `### ${label(run)}${marker}`,
    "",
    `Run \`${run.runId}\`. What each commit kind did (means per commit; views built are views that appeared under the view prefix, by what they hold):`,
    "",
    ...commitKinds(run),
    "",
    ...overTime(run),
    "",
  ];
}

/** By commit kind, means per commit: versions, fragments and segments changed, the writer's and prepare's work, views built. */
function commitKinds(run: LivingRun): string[] {
  const md = [
    "| kind | n | versions | segments after | fragments + / changed / − | segment uuids + / − | writer ms p50 | writer PUTs | prepare ms p50 | views built by prepare (index / flat) | by queries (index / flat) | PUTs for views |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const [kind, list] of byKind(run)) {
    const segs = list.map((c) => c.shape.segments);
    const m = (f: (c: LivingCommit) => number, d = 1) => fmt(mean(list.map(f)), d);
    md.push(
      `| ${kind} | ${list.length} | ${m((c) => c.to - c.from)} | ${Math.min(...segs)}-${Math.max(...segs)} | ` +
        `${m((c) => c.change.fragmentsAdded)} / ${m((c) => c.change.fragmentsChanged)} / ${m((c) => c.change.fragmentsRemoved)} | ` +
        `${m((c) => c.change.segmentsAdded)} / ${m((c) => c.change.segmentsRemoved)} | ${fmt(p50(list.map((c) => c.commitMs)), 0)} | ` +
        `${m((c) => requests(c.requests.commit, ["put", "post"]))} | ${run.prepare ? fmt(p50(defined(list.map((c) => c.prepared?.ms))), 0) : "–"} | ` +
        `${m((c) => c.viewsCreated.prepare.index)} / ${m((c) => c.viewsCreated.prepare.flat)} | ` +
        `${m((c) => c.viewsCreated.queries.index)} / ${m((c) => c.viewsCreated.queries.flat)} | ` +
        `${m((c) => requests(c.requests.prepare, ["put", "post"], "views") + requests(c.requests.productFirst, ["put", "post"], "views") + requests(c.requests.productSteady, ["put", "post"], "views"))} |`,
    );
  }
  return md;
}

/** About a dozen commits spread over the run (gc commits when gc runs): views and memory. */
function overTime(run: LivingRun): string[] {
  const withGc = run.commits.filter((c) => c.gc);
  const pool = withGc.length ? withGc : run.commits;
  const step = Math.max(1, Math.ceil(pool.length / 12));
  const rows = pool.filter((_, i) => i % step === 0 || i === pool.length - 1);
  const kib = (b: number | undefined) => fmt((b ?? 0) / 1024, 0);
  const memory =
    run.path === "stack-living"
      ? "segment-search RSS sum / max (MiB)"
      : "harness RSS (MiB), prewarmed index (MiB)";
  const lines = [
    `Over time${withGc.length ? " (the commits that ran gc)" : ""}: views under the view prefix after the commit's queries${withGc.length ? ", then after gc" : ""}, and memory:`,
    "",
    `| commit | version | segments | rows | views | objects | KiB |${withGc.length ? " after gc: views | objects | KiB | gc ms |" : ""} ${memory} |`,
    `|---|---|---|---|---|---|---|${withGc.length ? "---|---|---|---|" : ""}---|`,
  ];
  for (const c of rows) {
    const before = c.gc?.before ?? c.census;
    const after = c.gc?.after;
    const mem =
      run.path === "stack-living"
        ? `${fmt(c.memory.sumMiB, 0)} / ${fmt(c.memory.maxMiB, 0)}`
        : `${fmt(c.memory.sumMiB, 0)}, ${fmt(c.memory.prewarmedMiB, 1)}`;
    lines.push(
      `| ${c.commit + 1} | ${c.to} | ${c.shape.segments} | ${c.shape.rows} | ${before.views} | ${before.objects} | ${kib(before.bytes)} |` +
        (withGc.length
          ? ` ${after?.views} | ${after?.objects} | ${kib(after?.bytes)} | ${fmt(c.gc?.ms, 0)} |`
          : "") +
        ` ${mem} |`,
    );
  }
  return lines;
}

/** One `fallback-cost` record. */
interface FallbackCost extends Rec {
  dataset: string;
  path: string;
  unindexedRows: number;
  state: "fallback" | "indexed";
  version: number;
  shape: { rows: number; segments: number; unindexedRows: number };
  latencyMs: number;
  product: {
    p50: number;
    p95: number;
    n: number;
    tasks: number;
    getsPerQuery: number;
    phasesP50?: Phases;
  };
  native: { p50: number; p95: number; n: number; getsPerQuery: number };
  agreement: number;
}

export function fallbackSection(
  all: readonly Rec[],
  marker: (runId: string) => string = () => "",
): string[] {
  const records = all.filter((r): r is FallbackCost => r.type === "fallback-cost");
  if (records.length === 0) return [];
  const md = [
    `## What coverage \`fallback\` costs${[...new Set(records.map((r) => marker(r.runId)))].join("")}`,
    "",
    "`--paths fallback,stack-fallback` (bench/fallback-cost.ts): warm queries on a version with N",
    "unindexed rows (coverage `fallback`, the default: they are searched exactly, one flat task beside",
    "the index's) against the same rows after `optimize()` indexed them, product and native",
    "interleaved, the product's views prepared and prewarmed first, native's index prewarmed; the",
    "data on the local S3 behind the proxy. N = 0 is the dataset as built (nothing unindexed).",
    "",
    "| path | dataset | unindexed rows | product: fallback / indexed p50 ms | x | native: unindexed / indexed p50 ms | x | product / native (unindexed) | GETs per query product / native (unindexed) | tasks (unindexed / indexed) | product plan / slowest task / merge p50 (unindexed; indexed) | answers = native's |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  const cells = [...new Set(records.map((r) => `${r.path}\t${r.dataset}\t${r.unindexedRows}`))];
  for (const cell of cells) {
    const [path = "", dataset, rows] = cell.split("\t");
    const of = (state: string) =>
      records.find(
        (r) =>
          r.path === path &&
          r.dataset === dataset &&
          String(r.unindexedRows) === rows &&
          r.state === state,
      );
    const open = of("fallback");
    const done = of("indexed") ?? open;
    if (!open || !done) continue;
    md.push(
      `| ${PATH_LABEL[path] ?? path}, ${open.latencyMs} ms S3 latency | ${dataset} | ${Number(rows).toLocaleString("en-US")} | ` +
        `${fmt(open.product.p50, 1)} / ${fmt(done.product.p50, 1)} | ${fmt(open.product.p50 / done.product.p50)}x | ` +
        `${fmt(open.native.p50, 1)} / ${fmt(done.native.p50, 1)} | ${fmt(open.native.p50 / done.native.p50)}x | ` +
        `${fmt(open.product.p50 / open.native.p50)}x | ${fmt(open.product.getsPerQuery, 1)} / ${fmt(open.native.getsPerQuery, 1)} | ` +
        `${open.product.tasks} / ${done.product.tasks} | ` +
        `${phaseText(defined([open.product.phasesP50]))}; ${phaseText(defined([done.product.phasesP50]))} | ${fmt(open.agreement, 3)} |`,
    );
  }
  md.push("");
  return md;
}
