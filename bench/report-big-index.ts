/**
 * The report's `big-index` section and goals (bench/big-index.ts): where fan-out wins, with what
 * each mode costs per query at Lambda's and S3's prices.
 * @module
 */
import { fmt, type Goal, type Rec } from "./report-format.js";

interface BigIndexRecord extends Rec {
  readonly dataset: string;
  readonly latencyMs: number;
  readonly cacheMb: number;
  readonly functionMb: number;
  readonly mode: string;
  readonly tasks: number;
  readonly p50: number;
  readonly p99: number;
  readonly getsPerQuery: number;
  readonly recall: number;
}

/**
 * Published prices, us-east-1 (aws.amazon.com/lambda/pricing, aws.amazon.com/s3/pricing):
 * Lambda per GB-second (x86_64, arm64) and per request, S3 Standard per GET.
 */
const PRICES = { x86GbS: 0.0000166667, armGbS: 0.0000133334, request: 0.2e-6, get: 0.0004e-3 };
/** The planner's and the merge's memory (functions/defaults.ts), in GB. */
const PLANNER_GB = 1;
const BOUNDED = "native, one function's cache";

const records = (all: readonly Rec[]) =>
  all.filter((r): r is BigIndexRecord => r.type === "big-index");

/**
 * A mode's cost per query, estimated: every function billed for the query's p50 (an upper bound
 * of each; per-function durations are not recorded). One function: one invoke of the
 * segment-search's size. Fan-out: the planner, `tasks` segment-searches and, above one task, a merge.
 */
function cost(r: BigIndexRecord) {
  const seconds = r.p50 / 1000;
  const fnGb = r.functionMb / 1024;
  const native = r.mode.startsWith("native");
  const merge = !native && r.tasks > 1;
  const gbS = native
    ? fnGb * seconds
    : (PLANNER_GB + r.tasks * fnGb + (merge ? PLANNER_GB : 0)) * seconds;
  const requests = native ? 1 : 1 + r.tasks + (merge ? 1 : 0);
  const lambda = (price: number) => gbS * price + requests * PRICES.request;
  return {
    gbS,
    requests,
    x86: lambda(PRICES.x86GbS),
    arm: lambda(PRICES.armGbS),
    s3: r.getsPerQuery * PRICES.get,
  };
}

const perMillion = (dollars: number) => `$${(dollars * 1e6).toFixed(2)}`;

function byLatency(all: readonly Rec[]): Map<number, BigIndexRecord[]> {
  const out = new Map<number, BigIndexRecord[]>();
  for (const r of records(all)) out.set(r.latencyMs, [...(out.get(r.latencyMs) ?? []), r]);
  return out;
}

function fanOut(rows: readonly BigIndexRecord[]): BigIndexRecord[] {
  return rows.filter((r) => !r.mode.startsWith("native"));
}

export function bigIndexGoals(all: readonly Rec[]): Goal[] {
  const out: Goal[] = [];
  for (const [latency, rows] of byLatency(all)) {
    const bounded = rows.find((r) => r.mode === BOUNDED);
    const best = fanOut(rows).sort((a, b) => a.p50 - b.p50)[0];
    const auto = rows.find((r) => r.mode === "auto");
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
    const autoRatio = auto.p50 / best.p50;
    out.push({
      goal: `${at}: auto within 1.1x of the best mode`,
      measured: `auto (${auto.tasks} tasks) ${fmt(auto.p50, 1)} ms vs ${best.mode} ${fmt(best.p50, 1)} ms = ${fmt(autoRatio)}x`,
      verdict: autoRatio <= 1.1 ? "met" : `missed: ${fmt(autoRatio)}x`,
    });
    const [fan, one] = [cost(best), cost(bounded)];
    const costRatio = fan.x86 / one.x86;
    out.push({
      goal: `${at}: cost per query of the best fan-out (GB-s + requests) <= 1.5x one function's`,
      measured: `${perMillion(fan.x86)} vs ${perMillion(one.x86)} per million queries (x86_64, estimated) = ${fmt(costRatio)}x; S3 GETs ${perMillion(fan.s3)} vs ${perMillion(one.s3)}`,
      verdict: costRatio <= 1.5 ? "met" : `missed: ${fmt(costRatio)}x`,
    });
  }
  return out;
}

export function bigIndexSection(all: readonly Rec[]): string[] {
  const groups = byLatency(all);
  const first = records(all)[0];
  if (!first) return [];
  const lines = [
    "## big-index: an index no single function's cache holds",
    "",
    `Run \`${first.runId}\` (\`npm run bench -- --dataset big-index --paths big-index\`, bench/big-index.ts): ` +
      `${first.queries} queries, each once then timed; native lancedb in the harness with a ${first.cacheMb} MB index cache ` +
      `(one segment-search's) and with an 8 GiB one; lance-fanout through the local stack, one segment-search slot per group, ` +
      `each worker ${first.functionMb} MB with a ${first.cacheMb} MB index cache, frozen between invocations, views prepared first. ` +
      "Costs per million queries are estimates: every function billed for the query's p50 (an upper bound; per-function " +
      "durations are not recorded), at the published us-east-1 prices (Lambda x86_64 $0.0000166667 and arm64 $0.0000133334 " +
      "per GB-s, $0.20 per million requests; S3 Standard GET $0.0004 per 1,000).",
    "",
  ];
  for (const [latency, rows] of groups) {
    const bounded = rows.find((r) => r.mode === BOUNDED);
    lines.push(
      `### ${latency} ms first-byte latency`,
      "",
      "| mode | tasks | p50 ms | p99 ms | vs one function | GETs per query | recall@10 | GB-s | invokes | Lambda x86_64 | Lambda arm64 | S3 GETs |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|",
    );
    for (const r of rows) {
      const c = cost(r);
      lines.push(
        `| ${r.mode} | ${r.tasks} | ${fmt(r.p50, 1)} | ${fmt(r.p99, 1)} | ${bounded ? `${fmt(r.p50 / bounded.p50)}x` : "–"} | ` +
          `${fmt(r.getsPerQuery, 1)} | ${fmt(r.recall, 3)} | ${fmt(c.gbS, 3)} | ${c.requests} | ${perMillion(c.x86)} | ${perMillion(c.arm)} | ${perMillion(c.s3)} |`,
      );
    }
    lines.push("");
  }
  lines.push(
    "Not in this table yet: the share of the stack's p50 that is CPU contention of the workers on two cores, and S3 Vectors' query prices for comparison.",
    "",
  );
  return lines;
}
