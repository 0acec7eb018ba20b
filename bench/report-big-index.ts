/**
 * The report's `big-index` section and goals (bench/big-index.ts): where fan-out wins, what each
 * mode costs per query at Lambda's and S3's prices and S3 Vectors' query price for the same
 * vectors (bench/README.md); each pass, the largest worker and how much of the stack's time is two
 * cores shared by every worker (bench/results/README.md).
 * @module
 */
import type { CpuPerQuery } from "./big-index.js";
import type { PlanRecord } from "./modes.js";
import {
  fmt,
  type Goal,
  planText,
  planTwin,
  type Rec,
  tasksText,
  twinVerdict,
} from "./report-format.js";

interface BigIndexRecord extends Rec {
  readonly dataset: string;
  readonly latencyMs: number;
  readonly cacheMb: number;
  readonly functionMb: number;
  /** `native`, `stack` or `in-process`; absent in runs before commit e374491 (native or the stack). */
  readonly path?: string;
  readonly mode: string;
  readonly tasks: number;
  readonly queries: number;
  readonly p50: number;
  readonly p99: number;
  /** Through the stack: each pass's p50 (in order, then reversed); absent in earlier runs. */
  readonly blockP50s?: readonly number[];
  readonly coldMs?: number;
  readonly getsPerQuery: number;
  readonly kbPerQuery?: number;
  readonly cpuMsPerQuery?: CpuPerQuery;
  readonly recall: number;
  readonly plans?: readonly PlanRecord[];
}

/**
 * Published prices, us-east-1 (aws.amazon.com/lambda/pricing, aws.amazon.com/s3/pricing):
 * Lambda per GB-second (x86_64, arm64) and per request, S3 Standard per GET.
 */
const PRICES = { x86GbS: 0.0000166667, armGbS: 0.0000133334, request: 0.2e-6, get: 0.0004e-3 };
/**
 * S3 Vectors' query price (aws.amazon.com/s3/pricing, "S3 Vectors"), not reachable from this
 * machine: the per-call price as secondary sources quote it, and the per-TB price of the data a
 * query processes (every vector of the index, with its key) as a range, unverified.
 */
const S3_VECTORS = { perCall: 2.5e-6, perTbLow: 0.002, perTbHigh: 0.004, keyBytes: 64 };
/** The planner's and the merge's memory (functions/defaults.ts), in GB. */
const PLANNER_GB = 1;
const BOUNDED = "native, one function's cache";
const UNBOUNDED = "native, unbounded cache";
/** This machine's cores: the workers, the local S3 and the harness share them. */
const CORES = 2;

const records = (all: readonly Rec[]) =>
  all.filter((r): r is BigIndexRecord => r.type === "big-index");

const pathOf = (r: BigIndexRecord) => r.path ?? (r.mode.startsWith("native") ? "native" : "stack");

/**
 * A mode's cost per query, estimated: every function billed for the query's p50 (an upper bound
 * of each; per-function durations are not recorded). One function: one invoke of the
 * segment-search's size. Fan-out: the planner, `tasks` segment-searches and, above one task, a merge.
 */
function cost(r: BigIndexRecord) {
  const seconds = r.p50 / 1000;
  const fnGb = r.functionMb / 1024;
  const one = pathOf(r) !== "stack";
  const merge = !one && r.tasks > 1;
  const gbS = one
    ? fnGb * seconds
    : (PLANNER_GB + r.tasks * fnGb + (merge ? PLANNER_GB : 0)) * seconds;
  const requests = one ? 1 : 1 + r.tasks + (merge ? 1 : 0);
  const lambda = (price: number) => gbS * price + requests * PRICES.request;
  return {
    gbS,
    requests,
    x86: lambda(PRICES.x86GbS),
    arm: lambda(PRICES.armGbS),
    s3: r.getsPerQuery * PRICES.get,
  };
}

/**
 * The part of a stack query's time that is its functions waiting for one of this machine's
 * cores: the query needs at least its CPU over the cores, while on Lambda, where each
 * environment has its own, only the critical path (planner, the busiest task, merge) is CPU.
 * A lower bound of the contention: scheduling delays beyond it are not counted.
 */
function contention(r: BigIndexRecord) {
  const c = r.cpuMsPerQuery;
  if (!c) return undefined;
  const total = c.planner + c.segmentSearch + c.merge + c.harness;
  const critical = c.planner + c.busiestSlot + c.merge;
  const ms = Math.max(0, total / CORES - critical);
  return { total, critical, ms, ownCoresP50: r.p50 - ms };
}

const perMillion = (dollars: number) => `$${(dollars * 1e6).toFixed(2)}`;

function byLatency(all: readonly Rec[]): Map<number, BigIndexRecord[]> {
  const out = new Map<number, BigIndexRecord[]>();
  for (const r of records(all)) out.set(r.latencyMs, [...(out.get(r.latencyMs) ?? []), r]);
  return out;
}

const on = (rows: readonly BigIndexRecord[], path: string) =>
  rows.filter((r) => pathOf(r) === path);
const fastest = (rows: readonly BigIndexRecord[]) => [...rows].sort((a, b) => a.p50 - b.p50)[0];

/** The peak RSS of the largest segment-search worker in a big-index run at `latencyMs`, MiB. */
function largestWorker(all: readonly Rec[], latencyMs: number): number | undefined {
  const res = all.find((r) => r.type === "resources" && r.path === `big-index+s3-${latencyMs}ms`);
  const procs = (res?.processes ?? []) as { role: string; peakRssMiB: number }[];
  const rss = procs.filter((p) => p.role.includes("segment-search")).map((p) => p.peakRssMiB);
  return rss.length ? Math.max(...rss) : undefined;
}

export function bigIndexGoals(all: readonly Rec[]): Goal[] {
  const out: Goal[] = [];
  for (const [latency, rows] of byLatency(all)) {
    const bounded = rows.find((r) => r.mode === BOUNDED);
    const stack = on(rows, "stack");
    const best = fastest(stack.filter((r) => r.mode !== "auto"));
    const auto = stack.find((r) => r.mode === "auto");
    if (!bounded || !best || !auto) continue;
    const at = `big-index, ${latency} ms latency, warm, through the local stack`;
    const ratio = best.p50 / bounded.p50;
    out.push({
      goal: `${at}: best fan-out p50 <= 0.35x native with one function's cache`,
      measured: `${best.mode} ${fmt(best.p50, 1)} ms vs ${fmt(bounded.p50, 1)} ms = ${fmt(ratio)}x`,
      verdict: ratio <= 0.35 ? "met" : `missed: ${fmt(ratio)}x`,
    });
    const share = best.getsPerQuery / Math.max(bounded.getsPerQuery, 1e-9);
    out.push({
      goal: `${at}: fan-out S3 GETs per warm query <= 10% of native with one function's cache`,
      measured: `${fmt(best.getsPerQuery, 1)} vs ${fmt(bounded.getsPerQuery, 1)} = ${fmt(share * 100, 1)}%`,
      verdict: share <= 0.1 ? "met" : `missed: ${fmt(share * 100, 1)}%`,
    });
    out.push({
      goal: `${at}: auto within 1.1x of the best mode`,
      ...autoAgainst(auto, stack, best),
    });
    const [fan, one] = [cost(fastest(stack) as BigIndexRecord), cost(bounded)];
    const costRatio = fan.x86 / one.x86;
    out.push({
      goal: `${at}: cost per query of the best fan-out (GB-s + requests) <= 1.5x one function's`,
      measured: `${perMillion(fan.x86)} vs ${perMillion(one.x86)} per million queries (x86_64, estimated) = ${fmt(costRatio)}x; S3 GETs ${perMillion(fan.s3)} vs ${perMillion(one.s3)}`,
      verdict: costRatio <= 1.5 ? "met" : `missed: ${fmt(costRatio)}x`,
    });
    const rss = largestWorker(all, latency);
    if (rss !== undefined) {
      out.push({
        goal: `big-index, ${latency} ms latency: every segment-search worker's peak RSS under its memory size`,
        measured: `largest ${rss} MiB of ${bounded.functionMb} MB`,
        verdict: rss < bounded.functionMb ? "met" : `missed: ${rss} MiB`,
      });
    }
    const inProcess = on(rows, "in-process");
    const ipAuto = inProcess.find((r) => r.mode === "auto");
    const ipBest = fastest(inProcess.filter((r) => r.mode !== "auto"));
    if (ipAuto && ipBest) {
      out.push({
        goal: `big-index, ${latency} ms latency, in-process (one cache for every task): auto within 1.1x of the best mode`,
        ...autoAgainst(ipAuto, inProcess, ipBest),
      });
    }
  }
  return out;
}

/** `auto` against the best fixed mode of one path: within 1.1x, or the plan of a mode that is. */
function autoAgainst(
  auto: BigIndexRecord,
  path: readonly BigIndexRecord[],
  best: BigIndexRecord,
): Omit<Goal, "goal"> {
  const ratio = auto.p50 / Math.min(best.p50, auto.p50);
  const twin = planTwin(
    auto,
    path.filter((r) => r.mode !== "auto"),
    best.p50,
  );
  const plan = planText(auto);
  return {
    measured: `auto (${tasksText(auto.tasks)}${plan ? `: ${plan}` : ""}) ${fmt(auto.p50, 1)} ms vs ${best.mode} (${tasksText(best.tasks)}) ${fmt(best.p50, 1)} ms = ${fmt(auto.p50 / best.p50)}x`,
    verdict:
      ratio <= 1.1
        ? "met"
        : twin
          ? twinVerdict(twin.mode, fmt(twin.p50, 1), ratio)
          : `missed: ${fmt(ratio)}x`,
  };
}

export function bigIndexSection(
  all: readonly Rec[],
  marker: (runId: string) => string = () => "",
): string[] {
  const groups = byLatency(all);
  const first = records(all)[0];
  if (!first) return [];
  const lines = [
    `## big-index: an index no single function's cache holds${marker(first.runId)}`,
    "",
    `Run \`${first.runId}\` (\`npm run bench -- --dataset big-index --paths big-index\`, bench/big-index.ts): ` +
      `${first.queries} queries, each once then timed; native lancedb in the harness with a ${first.cacheMb} MB index cache ` +
      `(one segment-search's) and with an 8 GiB one; lance-fanout through the local stack, one segment-search slot per group, ` +
      `each worker ${first.functionMb} MB with a ${first.cacheMb} MB index cache, frozen between invocations, views prepared first; ` +
      `and lance-fanout in the harness with one ${first.cacheMb} MB cache for every task (a prefix of the queries). ` +
      "Cold: the median of 3 first queries, each after every function's workers were replaced by fresh processes " +
      "(started, caches empty, no prewarm; the planner reads the manifest again), or for native in a new lancedb session and connection (open included). " +
      "Costs per million queries are estimates: every function billed for the query's p50 (an upper bound; per-function " +
      "durations are not recorded), at the published us-east-1 prices (Lambda x86_64 $0.0000166667 and arm64 $0.0000133334 " +
      "per GB-s, $0.20 per million requests; S3 Standard GET $0.0004 per 1,000); `in-process` is billed as one function. " +
      "Each pass's p50, the largest worker's memory and the CPU of two shared cores: [results/README.md](results/README.md).",
    "",
  ];
  for (const [latency, rows] of groups) lines.push(...latencyTable(latency, rows));
  lines.push(...s3VectorsTable(all));
  return lines;
}

/** The modes at one latency: time, S3 requests and cost per query, against one function. */
function latencyTable(latency: number, rows: readonly BigIndexRecord[]): string[] {
  const bounded = rows.find((r) => r.mode === BOUNDED);
  const lines = [
    `### ${latency} ms first-byte latency`,
    "",
    "| where | mode | tasks | cold ms | warm p50 ms | p99 ms | vs one function | GETs / query | KB / query | recall@10 | GB-s | invokes | Lambda x86_64 | Lambda arm64 | S3 GETs |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const r of rows) {
    const c = cost(r);
    lines.push(
      `| ${pathOf(r)} | ${r.mode} | ${r.tasks} | ${fmt(r.coldMs, 0)} | ${fmt(r.p50, 1)} | ${fmt(r.p99, 1)} | ${bounded ? `${fmt(r.p50 / bounded.p50)}x` : "–"} | ` +
        `${fmt(r.getsPerQuery, 1)} | ${fmt(r.kbPerQuery, 0)} | ${fmt(r.recall, 3)} | ${fmt(c.gbS, 3)} | ${c.requests} | ${perMillion(c.x86)} | ${perMillion(c.arm)} | ${perMillion(c.s3)} |`,
    );
  }
  lines.push("");
  return lines;
}

/**
 * The rest of the `big-index` runs, for bench/results/README.md: each pass's p50 through the
 * stack, the largest worker's memory, and how much of the stack's time is two shared cores.
 */
export function bigIndexDetails(all: readonly Rec[]): string[] {
  const groups = byLatency(all);
  if (groups.size === 0) return [];
  const lines = ["## big-index: passes, memory and shared cores", ""];
  for (const [latency, rows] of groups) lines.push(...latencyDetails(all, latency, rows));
  return lines;
}

function latencyDetails(all: readonly Rec[], latency: number, rows: BigIndexRecord[]): string[] {
  const lines = [`### ${latency} ms first-byte latency`, ""];
  const blocks = on(rows, "stack").filter((r) => r.blockP50s);
  if (blocks.length > 0) {
    const each = blocks.map((r) => `${r.mode} ${r.blockP50s?.map((p) => fmt(p, 1)).join(" / ")}`);
    lines.push(
      `Through the stack, the modes ran in two passes, in order and reversed, over half the queries each (p50 of each pass, ms): ${each.join("; ")}.`,
      "",
    );
  }
  const rss = largestWorker(all, latency);
  if (rss !== undefined) {
    lines.push(
      `Largest segment-search worker: peak RSS ${rss} MiB (memory size ${rows[0]?.functionMb} MB).`,
      "",
    );
  }
  return [...lines, ...contentionTable(rows)];
}

/** CPU per query through the stack, and the p50 without the wait for one of the shared cores. */
function contentionTable(rows: readonly BigIndexRecord[]): string[] {
  const unbounded = rows.find((r) => r.mode === UNBOUNDED);
  const stack = on(rows, "stack").filter((r) => r.cpuMsPerQuery);
  if (stack.length === 0 || !unbounded) return [];
  const lines = [
    `Two cores shared, through the local stack: CPU milliseconds per timed query (from /proc of every worker and the harness, which serves the local S3), ` +
      `the contention that sharing ${CORES} cores adds at least (CPU / ${CORES} - the critical path's CPU: planner, busiest task, merge), ` +
      `and the p50 without it, which estimates a deployment where every function has its own cores; native with an unbounded cache ${fmt(unbounded.p50, 1)} ms is the best one process does here.`,
    "",
    "| mode | tasks | p50 ms | CPU: planner / segment-search (all) / busiest task / merge / harness | critical path CPU | contention (at least) | p50 without it | vs native unbounded |",
    "|---|---|---|---|---|---|---|---|",
  ];
  for (const r of stack) {
    const c = r.cpuMsPerQuery as CpuPerQuery;
    const k = contention(r);
    if (!k) continue;
    lines.push(
      `| ${r.mode} | ${r.tasks} | ${fmt(r.p50, 1)} | ${fmt(c.planner, 1)} / ${fmt(c.segmentSearch, 1)} / ${fmt(c.busiestSlot, 1)} / ${fmt(c.merge, 1)} / ${fmt(c.harness, 1)} | ` +
        `${fmt(k.critical, 1)} | ${fmt(k.ms, 1)} (${fmt((k.ms / r.p50) * 100, 0)}%) | ${fmt(k.ownCoresP50, 1)} | ${fmt(k.ownCoresP50 / unbounded.p50, 1)}x |`,
    );
  }
  lines.push("");
  return lines;
}

/** S3 Vectors' price for the same vectors, beside the best fan-out's at each latency. */
function s3VectorsTable(all: readonly Rec[]): string[] {
  const info = all.find((r) => r.type === "dataset" && r.dataset === "big-index")?.info as
    | { rows?: number; spec?: { dimension?: number } }
    | undefined;
  const rows = info?.rows;
  const dimension = info?.spec?.dimension;
  if (!rows || !dimension) return [];
  const tb = (rows * (4 * dimension + S3_VECTORS.keyBytes)) / 1e12;
  const price = (perTb: number) => S3_VECTORS.perCall + tb * perTb;
  const lines = [
    "### Against S3 Vectors, per million queries",
    "",
    `S3 Vectors bills each QueryVectors call ($2.50 per million) and the data it processes: every vector of the index with its key ` +
      `(here ${rows.toLocaleString("en-US")} x (${4 * dimension} + ~${S3_VECTORS.keyBytes}) bytes = ${fmt(tb * 1000, 2)} GB per query), ` +
      `at a per-TB price of $${S3_VECTORS.perTbLow}-$${S3_VECTORS.perTbHigh} for indexes of this size. Source: aws.amazon.com/s3/pricing (S3 Vectors), ` +
      "not reachable from this machine; the figures are as dev.classmethod.jp/en/articles/20260616-s3-vectors-query-charges and " +
      "www.oflight.co.jp/en/columns/aws-s3-vectors-ai-rag-cost-reduction-guide-2026 describe the page, so **estimates**; " +
      "AWS quotes ~100 ms for frequent queries (the same sources). Fan-out: the fastest stack mode above (Lambda only; its S3 GETs are in the tables).",
    "",
    "| | latency | Lambda x86_64 | Lambda arm64 | S3 Vectors (estimate) |",
    "|---|---|---|---|---|",
  ];
  for (const [latency, group] of byLatency(all)) {
    const best = fastest(on(group, "stack"));
    if (!best) continue;
    const c = cost(best);
    lines.push(
      `| fan-out ${best.mode}, ${latency} ms S3 latency | ${fmt(best.p50, 1)} ms p50 here | ${perMillion(c.x86)} | ${perMillion(c.arm)} | ` +
        `${perMillion(price(S3_VECTORS.perTbLow))}-${perMillion(price(S3_VECTORS.perTbHigh))} at ~100 ms |`,
    );
  }
  lines.push("");
  return lines;
}
