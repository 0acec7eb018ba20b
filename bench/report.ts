/**
 * bench/README.md and its SVG plots, generated from the JSON lines in bench/results: for each
 * cell the newest run that measured it, with the summary and the goals; every figure of those
 * runs, the runs before them and the readings go to bench/results/README.md. Also `--calibrate`
 * (the task cost fit) and the Lambda projection.
 * @module
 */
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadConfig } from "../shared/config.js";
import { BENCH_DIR } from "./datasets.js";
import { fitTasks, project, type TaskFit, type TaskPoint } from "./model.js";
import type { PlanRecord } from "./modes.js";
import { bigIndexDetails, bigIndexGoals, bigIndexSection } from "./report-big-index.js";
import {
  fmt,
  type Goal,
  isCurrent,
  planText,
  planTwin,
  type Rec,
  reportCommit,
  svgFrame,
  tasksText,
  twinVerdict,
} from "./report-format.js";
import {
  fallbackSection,
  livingDetails,
  livingGoals,
  livingSection,
  type Plot,
} from "./report-living.js";
import { earlierRuns, HOW_TO_RUN, METHOD, runLines } from "./report-runs.js";
import { round } from "./stats.js";

interface Measurement extends Rec {
  dataset: string;
  path: string;
  batch: number;
  phase: string;
  mode: string;
  width: number;
  tasks: number;
  n: number;
  p50: number;
  p95: number;
  recall: number;
  nativeRecall: number;
  phasesP50?: { plan: number; views: number; search: number; merge: number };
  plans?: PlanRecord[];
}

export async function loadRecords(dir: string): Promise<Rec[]> {
  if (!existsSync(dir)) return [];
  const files = (await readdir(dir)).filter((f) => f.endsWith(".jsonl")).sort();
  const out: Rec[] = [];
  for (const f of files) {
    for (const line of (await readFile(join(dir, f), "utf8")).split("\n")) {
      if (line.trim()) out.push(JSON.parse(line) as Rec);
    }
  }
  return out;
}

/** Record types that make a cell's newest run (the others are kept with that run). */
const CELL_TYPES = new Set([
  "measurement",
  "rejected",
  "task-profile",
  "s3-reads",
  "living-commit",
  "fallback-cost",
  "big-index",
]);

/** The cell a record belongs to; a living run's cell also tells whether it prepared. */
function cellOf(r: Rec): string {
  if (r.type === "task-profile") return `${r.dataset}|tp`;
  if (r.type === "s3-reads") return `${r.dataset}|reads|${r.path}|${r.batch}`;
  if (r.type === "living-commit" || r.type === "living-start") {
    return `${r.dataset}|living|${r.path}|${r.prepare}`;
  }
  if (r.type === "fallback-cost") return `${r.dataset}|fallback|${r.path}`;
  if (r.type === "big-index") return `${r.dataset}|big-index|${r.latencyMs}`;
  return `${r.dataset}|${r.path}|${r.batch}`;
}

/** For each cell (dataset, path, batch, ...), the records of the newest run that measured it. */
function newest(records: Rec[]): Rec[] {
  const cell = cellOf;
  const latest = new Map<string, string>();
  for (const r of records) {
    if (!CELL_TYPES.has(r.type)) continue;
    const key = cell(r);
    const prev = latest.get(key);
    if (!prev || r.runId > prev) latest.set(key, r.runId);
  }
  return records.filter((r) => {
    if (r.type === "run" || r.type === "end") return [...latest.values()].includes(r.runId);
    const key = cell(r);
    return (
      latest.get(key) === r.runId ||
      (r.type === "dataset" ||
      r.type === "resources" ||
      r.type === "first-call" ||
      r.type === "invoke-probe"
        ? [...latest.entries()].some(([k, id]) => k.startsWith(`${r.dataset}|`) && id === r.runId)
        : false)
    );
  });
}

function label(m: { mode: string; width: number }): string {
  return m.mode === "segments" || m.mode === "queries" ? `${m.mode} G=${m.width}` : m.mode;
}

function find(ms: readonly Measurement[], q: Partial<Measurement>): Measurement[] {
  return ms.filter((m) =>
    Object.entries(q).every(([k, v]) => (m as Record<string, unknown>)[k] === v),
  );
}

function bestProduct(ms: Measurement[]): Measurement | undefined {
  return ms.filter((m) => m.mode !== "native").sort((a, b) => a.p50 - b.p50)[0];
}

// ---------------------------------------------------------------------------------------------
// SVG

const COLORS: Record<string, string> = {
  native: "#555555",
  single: "#2ca02c",
  segments: "#1f77b4",
  queries: "#ff7f0e",
  auto: "#9467bd",
};

export function svgPlot(title: string, ms: Measurement[]): string {
  const W = 640;
  const H = 360;
  const L = 60;
  const R = 130;
  const T = 30;
  const B = 45;
  const maxW = Math.max(2, ...ms.map((m) => m.width));
  const ys = ms.map((m) => m.p50).filter((v) => v > 0);
  const yMax = Math.max(...ys) * 1.1;
  const yMin = Math.min(...ys) / 1.1;
  const logY = yMax / yMin > 20;
  const x = (w: number) => round(L + (Math.log2(w) / Math.log2(maxW)) * (W - L - R), 1);
  const y = (v: number) =>
    round(
      logY
        ? T + (1 - Math.log(v / yMin) / Math.log(yMax / yMin)) * (H - T - B)
        : T + (1 - v / yMax) * (H - T - B),
      1,
    );
  const parts = svgFrame(
    title,
    { W, H, L, R, T, B },
    "fan-out width (tasks or query chunks), log2",
    `p50 latency (ms)${logY ? ", log" : ""}`,
  );
  for (let w = 1; w <= maxW; w *= 2) {
    parts.push(`<text x="${x(w)}" y="${H - B + 14}" text-anchor="middle">${w}</text>`);
  }
  if (!Number.isInteger(Math.log2(maxW))) {
    parts.push(`<text x="${x(maxW)}" y="${H - B + 26}" text-anchor="middle">${maxW}</text>`);
  }
  const ticks = logY
    ? [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000].filter(
        (t) => t >= yMin && t <= yMax,
      )
    : Array.from({ length: 6 }, (_, i) => Number(((yMax * i) / 5).toPrecision(2)));
  for (const t of ticks) {
    parts.push(
      `<line x1="${L - 4}" y1="${y(t)}" x2="${W - R}" y2="${y(t)}" stroke="#ddd"/>`,
      `<text x="${L - 6}" y="${y(t) + 4}" text-anchor="end">${t}</text>`,
    );
  }
  let legend = 0;
  for (const mode of ["native", "single", "segments", "queries", "auto"]) {
    const pts = ms.filter((m) => m.mode === mode).sort((a, b) => a.width - b.width);
    if (pts.length === 0) continue;
    const color = COLORS[mode] ?? "black";
    if (mode === "native") {
      const v = pts[0]?.p50 ?? 0;
      parts.push(
        `<line x1="${L}" y1="${y(v)}" x2="${W - R}" y2="${y(v)}" stroke="${color}" stroke-dasharray="6 4" stroke-width="2"/>`,
      );
    } else {
      parts.push(
        `<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts.map((p) => `${x(p.width)},${y(p.p50)}`).join(" ")}"/>`,
        ...pts.map((p) => `<circle cx="${x(p.width)}" cy="${y(p.p50)}" r="3.5" fill="${color}"/>`),
      );
    }
    parts.push(
      `<rect x="${W - R + 12}" y="${T + legend * 18}" width="12" height="4" fill="${color}"/>`,
      `<text x="${W - R + 30}" y="${T + legend * 18 + 6}">${mode}</text>`,
    );
    legend++;
  }
  parts.push("</svg>");
  return parts.join("\n");
}

// ---------------------------------------------------------------------------------------------
// Report

/** The cell the summary compares native and the product modes in, for each dataset. */
const SUMMARY_CELL = { path: "in-process", batch: 1, phase: "warm" } as const;

/**
 * The report's first screen: how many goals were met, which were missed, and per dataset the
 * warm single-query p50 of native against the best product mode, with its plot.
 */
function summary(goalRows: readonly Goal[], ms: readonly Measurement[]): string[] {
  const judged = goalRows.filter((g) => /^(met|missed)/.test(g.verdict));
  const missed = judged.filter((g) => g.verdict.startsWith("missed"));
  const lines = [
    "## Summary",
    "",
    `**${judged.length - missed.length} of ${judged.length} judged goals met**; ` +
      `${goalRows.length - judged.length} not judged (the runs they need are missing or too short). ` +
      "Every goal with its figures: Goals, below.",
    "",
  ];
  if (missed.length > 0) {
    lines.push(
      "Missed:",
      "",
      ...missed.map((g) => `- ${g.goal}: ${g.verdict.replace(/^missed:? */, "")}`),
      "",
    );
  }
  lines.push(
    "Warm single queries, in-process (p50, ms; the best product mode of each dataset):",
    "",
    "| dataset | native | best product mode | product / native |",
    "|---|---|---|---|",
  );
  const plots: string[] = [];
  for (const dataset of [...new Set(ms.map((m) => m.dataset))]) {
    const rows = find(ms, { dataset, ...SUMMARY_CELL });
    const native = find(rows, { mode: "native" })[0];
    const best = bestProduct(rows);
    if (!native || !best) continue;
    lines.push(
      `| ${dataset} | ${fmt(native.p50, 1)} | ${label(best)}: ${fmt(best.p50, 1)} | ${fmt(best.p50 / native.p50)}x |`,
    );
    plots.push(`![${dataset}](plots/${plotFile({ dataset, ...SUMMARY_CELL })})`);
  }
  return [...lines, "", ...(plots.length ? [plots.join(" "), ""] : [])];
}

/**
 * A row whose p95 is over twice its p50 comes from samples that stall (seen through the local
 * S3 under batch bursts: dropped connections waiting out a request timeout); such a p50 judges
 * no goal, whichever way it would go.
 */
const STALL_RATIO = 2;

function judge(rows: readonly Measurement[], verdict: string): string {
  const stalled = rows.filter((m) => m.p95 > STALL_RATIO * m.p50);
  if (stalled.length === 0) return verdict;
  const which = stalled.map((m) => `${label(m)} p95 ${fmt(m.p95 / m.p50, 1)}x its p50`);
  return `not judged: stalled samples (${which.join(", ")})`;
}

function goals(ms: Measurement[]): Goal[] {
  const out: Goal[] = [];
  const warm1 = (ds: string, path: string) =>
    find(ms, { dataset: ds, path, batch: 1, phase: "warm" });
  const datasets = [...new Set(ms.map((m) => m.dataset))];
  for (const ds of datasets) {
    const ip = warm1(ds, "in-process");
    const n = find(ip, { mode: "native" })[0];
    const g1 = find(ip, { mode: "segments", width: 1 })[0];
    if (n && g1) {
      const r = g1.p50 / n.p50;
      out.push({
        goal: `${ds}: segments G=1 in-process <= 1.15x native (p50, warm)`,
        measured: `${fmt(g1.p50)} vs ${fmt(n.p50)} ms = ${fmt(r)}x`,
        verdict: judge([g1, n], r <= 1.15 ? "met" : `missed by ${fmt((r / 1.15 - 1) * 100, 0)}%`),
      });
    }
    const st = warm1(ds, "stack");
    const s1 = find(st, { mode: "segments", width: 1 })[0];
    const sn = find(st, { mode: "native" })[0];
    // The anchor is native on the same storage (the local S3) when it was measured: native
    // in-process reads local files, which no S3 deployment can.
    const anchor = sn ?? n;
    if (s1 && anchor) {
      const d = s1.p50 - anchor.p50;
      out.push({
        goal: `${ds}: segments G=1 through the local stack <= native + 15 ms`,
        measured: `${fmt(s1.p50)} ms vs native ${sn ? "on the same local S3" : "in-process"} ${fmt(anchor.p50)} ms (+${fmt(d)} ms)${sn && n ? `; native in-process on local files ${fmt(n.p50)} ms` : ""}`,
        verdict: judge([s1, anchor], d <= 15 ? "met" : `missed by ${fmt(d - 15)} ms`),
      });
    }
    for (const path of ["in-process", "stack"]) {
      const b = find(ms, { dataset: ds, path, batch: 100, phase: "warm" });
      const bn = find(b, { mode: "native" })[0];
      const best = bestProduct(b);
      if (bn && best) {
        const r = best.p50 / bn.p50;
        out.push({
          goal: `${ds}: batch of 100, best product mode <= 1.1x native (${path})`,
          measured: `${label(best)} ${fmt(best.p50)} ms vs native ${fmt(bn.p50)} ms = ${fmt(r)}x`,
          verdict: judge(
            [best, bn],
            r <= 1.1 ? "met" : `missed by ${fmt((r / 1.1 - 1) * 100, 0)}%`,
          ),
        });
      }
    }
    const segs = ms.find((m) => m.dataset === ds)?.segments as number | undefined;
    if ((segs ?? 0) >= 64) {
      for (const path of ["in-process", "stack"]) {
        const w = warm1(ds, path);
        const wn = find(w, { mode: "native" })[0];
        const best = bestProduct(w.filter((m) => m.recall >= (wn?.recall ?? 1)));
        const bestAny = bestProduct(w);
        if (wn && bestAny) {
          const chosen = best ?? bestAny;
          const r = wn.p50 / chosen.p50;
          out.push({
            goal: `${ds} (${segs} segments): best product mode >= 1.5x faster than native, recall >= native (${path})`,
            measured: `${label(chosen)} ${fmt(chosen.p50)} ms (recall ${chosen.recall}) vs native ${fmt(wn.p50)} ms (recall ${wn.recall}) = ${fmt(r)}x`,
            verdict: judge(
              [chosen, wn],
              best && r >= 1.5
                ? "met"
                : best
                  ? `missed: ${fmt(r)}x of 1.5x`
                  : "missed: no product mode reached native recall",
            ),
          });
        }
      }
    }
    const cold = ms.filter((m) => m.dataset === ds && m.phase === "cold");
    if (cold.length > 0 && (segs ?? 0) >= 16) {
      const cn = find(cold, { mode: "native" })[0];
      const best = bestProduct(cold.filter((m) => m.mode === "segments" && m.width > 1));
      if (cn && best) {
        const r = cn.p50 / best.p50;
        out.push({
          goal: `${ds} (${segs} segments): cold with injected S3 latency, fan-out >= 2x faster than native`,
          measured: `${label(best)} ${fmt(best.p50)} ms vs native ${fmt(cn.p50)} ms = ${fmt(r)}x (${cold[0]?.path})`,
          verdict: judge([best, cn], r >= 2 ? "met" : `missed: ${fmt(r)}x of 2x`),
        });
      }
    }
  }
  return [...out, ...autoGoals(ms)];
}

/** `auto` within 1.1x of the best fixed strategy, for every warm cell (dataset, path, batch). */
function autoGoals(ms: Measurement[]): Goal[] {
  const warm = ms.filter((m) => m.phase === "warm");
  const cells = [...new Set(warm.map((m) => `${m.dataset}\t${m.path}\t${m.batch}`))];
  return cells.flatMap((cell) => {
    const [dataset, path, batch] = cell.split("\t");
    const rows = find(warm, { dataset, path, batch: Number(batch) });
    const auto = find(rows, { mode: "auto" })[0];
    const fixed = rows.filter((m) => m.mode !== "auto" && m.mode !== "native");
    const best = bestProduct(fixed);
    if (!auto || !best) return [];
    const r = auto.p50 / best.p50;
    const twin = planTwin(auto, fixed, best.p50);
    const plan = planText(auto);
    const oneTask: Goal[] =
      batch === "1"
        ? [
            {
              goal: `${dataset}: auto keeps one task (${path}, batch 1; the index fits one cache)`,
              measured: `auto: ${tasksText(auto.tasks)}; fastest fixed mode ${label(best)} (${tasksText(best.tasks)})`,
              verdict: auto.tasks === 1 ? "met" : `missed: ${tasksText(auto.tasks)}`,
            },
          ]
        : [];
    return [
      ...oneTask,
      {
        goal: `${dataset}: auto <= 1.1x the best fixed strategy (${path}, batch ${batch})`,
        measured: `auto (${tasksText(auto.tasks)}${plan ? `: ${plan}` : ""}) ${fmt(auto.p50)} ms vs ${label(best)} ${fmt(best.p50)} ms = ${fmt(r)}x`,
        verdict: judge(
          [auto, best],
          r <= 1.1
            ? "met"
            : twin
              ? twinVerdict(label(twin), fmt(twin.p50), r)
              : `missed by ${fmt((r / 1.1 - 1) * 100, 0)}%`,
        ),
      },
    ];
  });
}

/** One `s3-reads` record (bench/s3-reads.ts). */
interface Reads extends Rec {
  dataset: string;
  path: string;
  mode: string;
  width: number;
  tasks: number;
  refineFactor: number | null;
  queries: number;
  getsPerQuery: number;
  bytesPerQuery: number;
  requestsPerQueryByKind: Record<string, number>;
  p50: number;
  recall: number;
}

const READS_PATH_LABEL: Record<string, string> = {
  "in-process+s3": "in-process, local S3",
  stack: "local stack",
};

function readsTable(rows: readonly Reads[]): string[] {
  const lines = [
    "| path | refineFactor | mode | tasks | queries | GETs / query | data GETs / query | KB / query | p50 ms | recall@k |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ];
  const sorted = [...rows].sort(
    (a, b) =>
      a.path.localeCompare(b.path) ||
      (b.refineFactor ?? 0) - (a.refineFactor ?? 0) ||
      (a.mode === "native" ? -1 : 0) - (b.mode === "native" ? -1 : 0) ||
      a.width - b.width,
  );
  for (const r of sorted) {
    lines.push(
      `| ${READS_PATH_LABEL[r.path] ?? r.path} | ${r.refineFactor ?? "none"} | ${label(r)} | ${r.tasks} | ${r.queries} | ${fmt(r.getsPerQuery, 1)} | ${fmt(r.requestsPerQueryByKind.data ?? 0, 1)} | ${fmt(r.bytesPerQuery / 1024, 1)} | ${fmt(r.p50)} | ${fmt(r.recall, 3)} |`,
    );
  }
  return lines;
}

const MODE_ORDER = ["native", "single", "segments", "queries", "auto"];

const byMode = (a: Measurement, b: Measurement) =>
  MODE_ORDER.indexOf(a.mode) - MODE_ORDER.indexOf(b.mode) || a.width - b.width;

function table(rows: readonly Measurement[]): string[] {
  const nativeP50 = find(rows, { mode: "native" })[0]?.p50;
  const lines = [
    "| mode | tasks | n | p50 ms | p95 ms | x native p50 | recall@k | plan / views / search / merge (p50 ms) |",
    "|---|---|---|---|---|---|---|---|",
  ];
  for (const m of [...rows].sort(byMode)) {
    const ph = m.phasesP50;
    lines.push(
      `| ${label(m)} | ${m.tasks} | ${m.n} | ${fmt(m.p50)} | ${fmt(m.p95)} | ${nativeP50 ? fmt(m.p50 / nativeP50) : "–"} | ${fmt(m.recall, 3)} | ${ph ? `${fmt(ph.plan, 1)} / ${fmt(ph.views, 1)} / ${fmt(ph.search, 1)} / ${fmt(ph.merge, 1)}` : ""} |`,
    );
  }
  return lines;
}

/** The measurements of one dataset on one path, batch and phase: one table, one plot. */
interface Cell {
  readonly dataset: string;
  readonly path: string;
  readonly batch: number;
  readonly phase: string;
  readonly rows: readonly Measurement[];
}

function cellsOf(ms: readonly Measurement[], dataset: string): Cell[] {
  const groups = Map.groupBy(
    ms.filter((m) => m.dataset === dataset),
    (m) => `${m.path}|${m.batch}|${m.phase}`,
  );
  return [...groups.values()].map((rows) => {
    const { path, batch, phase } = rows[0] as Measurement;
    return { dataset, path, batch, phase, rows };
  });
}

const cellName = (c: Pick<Cell, "path" | "batch" | "phase">) =>
  `${c.path}, batch ${c.batch}, ${c.phase}`;

const plotFile = (c: Omit<Cell, "rows">) =>
  `${c.dataset}-${c.path}-b${c.batch}-${c.phase}.svg`.replace(/[^a-zA-Z0-9.+-]/g, "_");

/** One mode's p50 in one cell, with its ratio to native's there. */
function p50Text(cell: Cell, mode: string): string {
  const m = cell.rows.find((r) => label(r) === mode);
  const native = cell.rows.find((r) => r.mode === "native");
  if (!m) return "–";
  return native && m !== native ? `${fmt(m.p50)} (${fmt(m.p50 / native.p50)}x)` : fmt(m.p50);
}

function recallText(rows: readonly Measurement[]): string {
  const recalls = rows.map((m) => m.recall);
  const [lo, hi] = [Math.min(...recalls), Math.max(...recalls)];
  return lo === hi ? fmt(lo, 3) : `${fmt(lo, 3)}-${fmt(hi, 3)}`;
}

/** Every cell of a dataset in one table: each mode's p50 (ms) and its ratio to native's. */
function cellMatrix(cells: readonly Cell[], stale: (c: Cell) => boolean): string[] {
  const rows = cells.flatMap((c) => c.rows).sort(byMode);
  const modes = [...new Set(rows.map(label))];
  const names = cells.map((c) => `${cellName(c)}${stale(c) ? " (older commit: not judged)" : ""}`);
  return [
    `| p50 ms (x native) | ${names.join(" | ")} |`,
    `|---|${cells.map(() => "---|").join("")}`,
    ...modes.map((mode) => `| ${mode} | ${cells.map((c) => p50Text(c, mode)).join(" | ")} |`),
    `| recall@k | ${cells.map((c) => recallText(c.rows)).join(" | ")} |`,
  ];
}

/** What the report is made of: the newest run of each cell and the goals its commit's runs judge. */
interface Report {
  readonly all: Rec[];
  readonly ms: Measurement[];
  readonly reads: Reads[];
  readonly runs: Rec[];
  readonly commit: string | undefined;
  readonly current: (r: Rec) => boolean;
  readonly goals: Goal[];
  readonly datasets: string[];
}

function reportOf(all: Rec[]): Report {
  const ms = all.filter((r): r is Measurement => r.type === "measurement");
  const reads = all.filter((r): r is Reads => r.type === "s3-reads");
  const runs = all.filter((r) => r.type === "run");
  const commit = reportCommit(runs);
  const current = (r: Rec) => isCurrent(runs, commit, r.runId);
  const judged = all.filter(current);
  return {
    all,
    ms,
    reads,
    runs,
    commit,
    current,
    goals: [...goals(ms.filter(current)), ...bigIndexGoals(judged), ...livingGoals(judged)],
    datasets: [...new Set([...ms, ...reads].map((m) => m.dataset))],
  };
}

const staleMarker = (report: Report) => (runId: string) =>
  report.current({ runId } as Rec) ? "" : " (older commit: not judged)";

const staleCell = (report: Report) => (c: Cell) => c.rows.some((m) => !report.current(m));

/** Which commit the report is of, and whether any of its cells comes from another. */
function commitLine(report: Report): string {
  const { commit, runs, current } = report;
  if (!commit) return "No run recorded a clean commit: no goal is judged.";
  const stale = runs.filter((r) => !current(r)).length;
  return (
    `This report is of commit \`${commit.slice(0, 10)}\`: every goal is judged from that commit's runs only.` +
    (stale
      ? ` ${stale} run(s) of other commits (or with uncommitted changes) still hold cells no run of it measured: their sections are marked **older commit** and judge nothing.`
      : " Every cell below comes from it.")
  );
}

/** A dataset in bench/README.md: its shape, every cell's p50 by mode, and the cells' plots. */
function datasetSection(report: Report, dataset: string): string[] {
  const cells = cellsOf(report.ms, dataset);
  const info = `${datasetInfo(report.all, dataset)} Each cell's n, p95 and phase times, S3 requests per query: [results/README.md](results/README.md).`;
  const lines = [`## ${dataset}`, "", info, ""];
  if (cells.length === 0) return lines;
  return [
    ...lines,
    ...cellMatrix(cells, staleCell(report)),
    "",
    cells.map((c) => `![${c.dataset}: ${cellName(c)}](plots/${plotFile(c)})`).join(" "),
    "",
  ];
}

function datasetInfo(all: readonly Rec[], dataset: string): string {
  const info = (all.find((r) => r.type === "dataset" && r.dataset === dataset)?.info ??
    {}) as Record<string, unknown>;
  const spec = (info.spec ?? {}) as Record<string, unknown>;
  const search = (spec.search ?? {}) as Record<string, unknown>;
  return (
    `${info.rows} rows x ${spec.dimension}-d, ${info.segments} index segments (${info.indexType}, ${spec.partitions} partitions), ` +
    `version ${info.version}, manifest sha256 \`${String(info.manifestHash).slice(0, 16)}\`; k=${search.k}, nprobes=${search.nprobes}, refineFactor=${search.refineFactor}. ` +
    `Built in ${info.buildSeconds} s.`
  );
}

/** A dataset in bench/results/README.md: every cell in full, S3 requests, first calls, resources. */
function datasetDetails(report: Report, dataset: string): string[] {
  const stale = staleCell(report);
  return [
    `## ${dataset}`,
    "",
    ...cellsOf(report.ms, dataset).flatMap((c) => [
      `### ${cellName(c)}${stale(c) ? " (older commit: not judged)" : ""}`,
      "",
      ...table(c.rows),
      "",
    ]),
    ...readsSection(report.reads.filter((r) => r.dataset === dataset)),
    ...rejectedLines(report.all, dataset),
    ...firstCallLines(report.all, dataset),
    ...report.all
      .filter((r) => r.type === "resources" && r.dataset === dataset)
      .flatMap((r) => [resourceLine(r), ""]),
  ];
}

function readsSection(rows: readonly Reads[]): string[] {
  if (rows.length === 0) return [];
  const versions = new Set(
    rows.map(
      (r) =>
        `${r.version} (${r.segments} segments, manifest sha256 \`${String(r.manifestHash).slice(0, 16)}\`)`,
    ),
  );
  return [
    "### S3 requests per query, batch 1, warm",
    "",
    `Version ${[...versions].join(", ")}, k=${rows[0]?.k}, nprobes=${rows[0]?.nprobes}. ` +
      "Counted by the proxy in front of the local S3 during the timed queries only (views made and every index prewarmed before), divided by the queries; data GETs are the refine's reads of raw vectors.",
    "",
    ...readsTable(rows),
    "",
  ];
}

function rejectedLines(all: readonly Rec[], dataset: string): string[] {
  const rejected = all.filter((r) => r.type === "rejected" && r.dataset === dataset);
  if (rejected.length === 0) return [];
  return [
    "Rejected by the recall gate (no performance record):",
    "",
    ...rejected.map((r) => `- ${r.path}, batch ${r.batch}, ${label(r as never)}: ${r.reason}`),
    "",
  ];
}

function firstCallLines(all: readonly Rec[], dataset: string): string[] {
  const firsts = all.filter(
    (r) => r.type === "first-call" && r.dataset === dataset && r.batch === 1,
  );
  if (firsts.length === 0) return [];
  return [
    "First call of each mode in a process (opens tables and views, loads indices; recorded, excluded from warm): " +
      firsts.map((f) => `${f.path} ${label(f as never)} ${fmt(f.ms as number, 0)} ms`).join(", ") +
      ".",
    "",
  ];
}

interface ProcessUse {
  role: string;
  peakRssMiB: number;
  userCpuMs: number;
  systemCpuMs: number;
}

/** One `resources` record by role: how many processes, the largest RSS and the CPU of all. */
function resourceLine(r: Rec): string {
  const byRole = new Map<string, { n: number; rss: number; user: number; sys: number }>();
  for (const p of r.processes as ProcessUse[]) {
    const e = byRole.get(p.role) ?? { n: 0, rss: 0, user: 0, sys: 0 };
    byRole.set(p.role, {
      n: e.n + 1,
      rss: Math.max(e.rss, p.peakRssMiB),
      user: e.user + p.userCpuMs,
      sys: e.sys + p.systemCpuMs,
    });
  }
  const roles = [...byRole].map(
    ([role, e]) =>
      `${role} x${e.n}: peak RSS ${e.rss} MiB, CPU ${e.user} ms user + ${e.sys} ms system`,
  );
  return `Resources (${r.path}): ${roles.join("; ")}${r.s3 ? `; S3 ${JSON.stringify(r.s3)}` : ""}.`;
}

/** The task cost fit of each dataset, then the Lambda projection it makes. */
function taskCostSection(report: Report): string[] {
  const profiles = report.all.filter((r) => r.type === "task-profile");
  const points = profiles.flatMap((p) => p.points as TaskPoint[]);
  if (points.length === 0) return [];
  return [
    "## Task cost (for shared/grouping.ts SEGMENT_COST)",
    "",
    "Each group shape the planner makes (every G), one query, searched alone and warm on local disk:",
    "",
    "| dataset | fit: ms = a + b·rows + c·segments | perSegment (rows) | r² | tasks |",
    "|---|---|---|---|---|",
    ...profiles.map((p) => {
      const f = p.fit as TaskFit;
      return `| ${p.dataset} | ${fmt(f.a, 3)} + ${fmt(f.perRowMs * 1e6, 3)}/M rows + ${fmt(f.perSegmentMs, 3)}/segment | ${f.perSegmentRows} | ${f.r2} | ${f.points} |`;
    }),
    "",
    ...projection(report.ms, points, report.all),
    "",
  ];
}

/** bench/README.md: the summary, the goals and the figures of the newest run of each cell. */
function mainPage(report: Report, living: string[]): string[] {
  const judged = report.ms.filter(report.current);
  const marker = staleMarker(report);
  return [
    "# Benchmark: native Lance vs one task vs segment fan-out vs query fan-out",
    "",
    "_Generated by `npm run bench` (bench/run.ts) from the JSON lines in `bench/results/`; do not edit by hand._",
    "_Every figure of these runs, the runs before them and the readings: [results/README.md](results/README.md)._",
    "",
    ...summary(report.goals, judged),
    commitLine(report),
    "",
    ...HOW_TO_RUN,
    "## Goals (warm p50 unless stated, ratios from one run)",
    "",
    "| goal | measured | verdict |",
    "|---|---|---|",
    ...report.goals.map((g) => `| ${g.goal} | ${g.measured} | ${g.verdict} |`),
    "",
    ...report.datasets.flatMap((ds) => datasetSection(report, ds)),
    ...bigIndexSection(report.all, marker),
    ...living,
    ...fallbackSection(report.all, marker),
    ...taskCostSection(report),
  ];
}

/**
 * bench/results/README.md: how the figures are measured, the report's runs in full, the runs
 * before them, then the hand-written readings (bench/reading.md).
 */
function resultsPage(report: Report, records: readonly Rec[], reading: string): string[] {
  const marker = staleMarker(report);
  return [
    "# Benchmark results in full, and the readings of earlier runs",
    "",
    "_Generated by `npm run bench` (bench/run.ts) from the JSON lines in this folder, with bench/README.md; do not edit by hand_",
    "_(the readings at the end come from `bench/reading.md`)._",
    "",
    "The summary, the goals and the current figures are in [bench/README.md](../README.md); here, how",
    "they are measured, every figure of the runs they come from, the runs before those, and the",
    "dated readings of the runs, newest first.",
    "",
    ...METHOD,
    ...runLines(report.runs, report.all, report.current),
    ...report.datasets.flatMap((ds) => datasetDetails(report, ds)),
    ...bigIndexDetails(report.all),
    ...livingDetails(report.all, marker),
    ...earlierRuns(records, report.runs),
    reading,
  ];
}

/** The SVG plots of bench/README.md: one per cell, and the living runs' over the commits. */
function cellPlots(report: Report): Plot[] {
  return report.datasets.flatMap((ds) =>
    cellsOf(report.ms, ds).map((c) => ({
      file: plotFile(c),
      svg: svgPlot(`${ds}: ${cellName(c)}`, [...c.rows]),
    })),
  );
}

const writeMarkdown = (file: string, lines: readonly string[]) =>
  writeFile(file, `${lines.join("\n").trimEnd()}\n`);

/**
 * Writes bench/README.md, bench/results/README.md and the plots from the records in
 * `resultsDir`; returns the path of bench/README.md.
 */
export async function writeReport(
  resultsDir: string,
  log: (line: string) => void = console.log,
): Promise<string> {
  const records = await loadRecords(resultsDir);
  const report = reportOf(newest(records));
  const living = livingSection(report.all, staleMarker(report));
  const plotDir = join(BENCH_DIR, "plots");
  await mkdir(plotDir, { recursive: true });
  for (const plot of [...cellPlots(report), ...living.plots]) {
    await writeFile(join(plotDir, plot.file), plot.svg);
  }
  const readingFile = join(BENCH_DIR, "reading.md");
  const reading = existsSync(readingFile) ? await readFile(readingFile, "utf8") : "";
  const out = join(BENCH_DIR, "README.md");
  const full = join(BENCH_DIR, "results", "README.md");
  await writeMarkdown(out, mainPage(report, living.lines));
  await writeMarkdown(full, resultsPage(report, records, reading));
  log(`report: ${out}, ${full}`);
  return out;
}

/** Index bytes per row of the 128-d datasets (from their manifests), as a warm task holds them. */
function indexBytesPerRow(all?: Rec[]): number {
  const infos = (all ?? [])
    .filter((r) => r.type === "dataset")
    .map((r) => r.info as { rows?: number; indexBytes?: number; spec?: { dimension?: number } })
    .filter((i) => i.spec?.dimension === 128 && i.rows && i.indexBytes);
  const ratios = infos.map((i) => (i.indexBytes as number) / (i.rows as number));
  return ratios.length ? Math.round(Math.max(...ratios)) : 16 + 8;
}

function projection(ms: Measurement[], points: TaskPoint[], all?: Rec[]): string[] {
  // The 128-d dataset with the most rows spans the widest range of task sizes: its fit is the
  // one to extrapolate (a fit across datasets mixes their fixed costs and can turn rows negative).
  const synth = points.filter((p) => p.dimension === 128);
  const largest = synth.reduce<TaskPoint | undefined>(
    (a, b) => (!a || b.rows > a.rows ? b : a),
    undefined,
  );
  const basis = synth.filter((p) => p.dataset === largest?.dataset);
  const fit = fitTasks(basis.length >= 3 ? basis : points);
  // One invoke on Lambda: the planner's own assumption, shown next to the bare invoke measured
  // through the local endpoint. (Stack minus in-process at G=1 is dominated by the local S3's
  // throughput and would overstate it; see the reading.)
  const probes = (all ?? []).filter((r) => r.type === "invoke-probe").map((r) => r.p50 as number);
  const localInvoke = probes.length ? probes.reduce((s, v) => s + v, 0) / probes.length : NaN;
  const latency = (ms.find((m) => m.phase === "cold")?.s3LatencyMs as number | undefined) ?? 20;
  // Cold: 10 sequential round trips per task, plus a per-row part from the measured cold G=1.
  const coldFixed = 10 * latency;
  let coldPerMillionRows = 2000;
  let coldFrom = "assumed";
  const cold1 =
    ms.find(
      (m) =>
        m.phase === "cold" &&
        m.mode === "segments" &&
        m.width === 1 &&
        m.dataset === largest?.dataset,
    ) ?? ms.find((m) => m.phase === "cold" && m.mode === "segments" && m.width === 1);
  const warm1 = cold1
    ? ms.find(
        (m) =>
          m.dataset === cold1.dataset &&
          m.path === "in-process" &&
          m.phase === "warm" &&
          m.batch === 1 &&
          m.mode === "segments" &&
          m.width === 1,
      )
    : undefined;
  const datasetRows = (all ?? []).find((r) => r.type === "dataset" && r.dataset === cold1?.dataset)
    ?.info as { rows?: number } | undefined;
  if (cold1 && warm1 && datasetRows?.rows) {
    coldPerMillionRows = Math.max(
      0,
      ((cold1.p50 - warm1.p50 - coldFixed) * 1e6) / datasetRows.rows,
    );
    coldFrom = `${cold1.dataset} cold G=1 ${fmt(cold1.p50, 0)} ms - warm in-process ${fmt(warm1.p50, 0)} ms`;
  }
  const inputs = {
    fit,
    invokeMs: loadConfig({}).lambda.invokeMs,
    coldFixedMs: round(coldFixed, 1),
    coldPerMillionRowsMs: round(coldPerMillionRows, 1),
    s3LatencyMs: latency,
    bytesPerRow: indexBytesPerRow(all),
    rowsPerSegment: 1_000_000,
  };
  const rows = project(inputs, [10_000_000, 100_000_000, 1_000_000_000]);
  return [
    "## Lambda projection (a model, not a measurement)",
    "",
    `Inputs measured here: task fit on ${largest?.dataset ?? "the datasets"} (${fmt(fit.a, 3)} ms + ${fmt(fit.perRowMs * 1e6, 3)} ms per million rows + ${fmt(fit.perSegmentMs, 3)} ms per segment, r² ${fit.r2}), ` +
      `one invoke ${inputs.invokeMs} ms (assumed, the planner's default \`LANCE_FANOUT_INVOKE_MS\`; a bare invoke through the local endpoint measured ${fmt(localInvoke, 1)} ms, p50 over ${probes.length} probes; a query makes 2 invokes, 3 when G > 1), cold extra ${inputs.coldFixedMs} ms + ${inputs.coldPerMillionRowsMs} ms per million rows in a task at ${latency} ms S3 first-byte latency (${coldFrom}; measured on 2 shared cores and one local S3 process, so pessimistic for Lambda).`,
    "Assumptions: 128-d IVF_PQ, k=10, one query; 1M rows per index segment; task latency linear in rows (pessimistic for a fixed nprobes);",
    `tasks run fully in parallel (no account concurrency limit); a warm task holds its group's index in memory (prewarmed; ${inputs.bytesPerRow} bytes per row, measured from the index files) and reads the k x refineFactor raw vectors from S3 in one parallel round (+${latency} ms);`,
    "task memory = 1 GB + 2 x its index bytes, capped at 10 GB (beyond that a task no longer holds its index and cold I/O dominates: choose a larger G); GB-s include a 1 GB planner for the whole query.",
    "",
    "| rows | segments | G | warm ms | cold ms | task GB | GB-s / query |",
    "|---|---|---|---|---|---|---|",
    ...rows.map(
      (r) =>
        `| ${r.rows.toLocaleString("en-US")} | ${r.segments} | ${r.width} | ${fmt(r.warmMs, 1)} | ${fmt(r.coldMs, 1)} | ${r.taskMemoryGB} | ${r.gbSecondsPerQuery} |`,
    ),
  ];
}

/** `--calibrate`: the fitted constants for shared/grouping.ts SEGMENT_COST from the newest task profiles. */
export async function calibrate(resultsDir: string): Promise<void> {
  const all = newest(await loadRecords(resultsDir));
  const profiles = all.filter((r) => r.type === "task-profile");
  if (profiles.length === 0) {
    console.log("no task-profile records yet: run the benchmark first (in-process path)");
    return;
  }
  for (const p of profiles) {
    const f = p.fit as TaskFit;
    console.log(
      `${p.dataset}: ms = ${f.a} + ${(f.perRowMs * 1e6).toFixed(4)} per M rows + ${f.perSegmentMs} per segment (r2 ${f.r2}, ${f.points} tasks) -> perSegment ${f.perSegmentRows} rows`,
    );
  }
  const all128 = fitTasks(
    profiles.flatMap((p) => p.points as TaskPoint[]).filter((p) => p.dimension === 128),
  );
  console.log(
    `all 128-d datasets: perRow 1, perSegment ${all128.perSegmentRows} (r2 ${all128.r2})`,
  );
  console.log(
    `shared/grouping.ts: export const SEGMENT_COST = { perRow: 1, perSegment: ${all128.perSegmentRows} } as const;`,
  );
  // shared/calibration.json (shared/strategy.ts CostModel): fixed ms per task, then per query;
  // the hand-set constants (storage round trip, the merge's refine) stay as they are.
  const file = fileURLToPath(new URL("../shared/calibration.json", import.meta.url));
  const calibration = {
    ...(JSON.parse(await readFile(file, "utf8")) as Record<string, unknown>),
    source: `npm run bench -- --calibrate, runs ${[...new Set(profiles.map((p) => p.runId))].join(", ")}`,
    taskFixedMs: round(Math.max(0, all128.a), 3),
    perQuerySegmentMs: round(Math.max(0, all128.perSegmentMs), 4),
    perQueryThousandRowsMs: round(Math.max(0, all128.perRowMs * 1000), 5),
    referenceDimension: 128,
  };
  await writeFile(file, `${JSON.stringify(calibration, null, 2)}\n`);
  console.log(`wrote ${file}: ${JSON.stringify(calibration, null, 2)}`);
}
