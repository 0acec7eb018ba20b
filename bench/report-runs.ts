/**
 * The report's runs: how to make them and how they measure, the machine each ran on, and the
 * runs before them, whose cells newer runs have all replaced (bench/results/README.md).
 * @module
 */
import type { Rec } from "./report-format.js";

/** The commands that make the report's runs (bench/README.md). */
export const HOW_TO_RUN = [
  "## How to run",
  "",
  "```sh",
  "npm run bench -- --all                          # every cell of this report, one run per part (~160 min)",
  "npm run bench -- --all --parts living,fallback  # some of its parts (a rerun split over sittings, one commit)",
  "npm run bench                                   # all datasets, every path (in-process, stack, cold, reads, stack-reads)",
  "npm run bench -- --dataset synth-many --paths in-process --batch 1 --widths 1,2,4,8,16,67",
  "npm run bench -- --smoke                        # < 60 s, also run by npm run test:bench",
  "npm run bench -- --dataset fashion-mnist --paths reads,stack-reads --widths 1,2,4,8   # S3 GETs per query",
  "npm run bench -- --dataset living --paths living,stack-living --workers 4 --commits 200   # commits while queries run",
  "npm run bench -- --dataset living --paths living --prepare off   # the same, views built by the first query",
  "npm run bench -- --dataset living --paths fallback,stack-fallback --workers 4   # cost of unindexed rows",
  "npm run bench -- --dataset big-index --paths big-index --batch 1   # an index no single function holds (~23 min)",
  "npm run bench -- --calibrate                    # fit shared/calibration.json from the results",
  "npm run bench -- --report-only                  # regenerate this file and results/README.md from bench/results",
  "tsx bench/build-datasets.ts fashion-mnist synth-1m synth-many   # build / reuse bench/cache",
  "```",
  "",
  "How each mode, path and phase is measured, the machine of each run, every figure of these runs",
  "(n, p95, phase times, S3 requests per query, first calls, resources, the living runs commit by",
  "commit), the runs before them and the readings: [results/README.md](results/README.md).",
  "",
];

/** How the modes, paths and phases are measured (bench/results/README.md). */
export const METHOD = [
  "## How the figures are measured",
  "",
  "Every mode searches the **same dataset version and index** with the same `k`, `nprobes`,",
  "`refineFactor` and the same query set; warm, each mode runs its samples in two blocks, the",
  "first half in a seeded random order of the modes and the rest in the reverse order, pooled",
  "(interleaved per sample, a wide plan's tasks on two cores slowed the next mode's query; in",
  "one block per mode, drift over the run decided rankings: each block's p50 is in the records,",
  "`blockP50s`); cold samples are interleaved. Warm statistics exclude warm-up runs (the second",
  "block discards one more sample). `native` = one lancedb query in the harness process (a batch",
  "is lancedb's own multi-vector query); the product modes are requests with `strategy:",
  "single | segments | queries | auto` and `maxTasks: G` (`segments G=n`: n segment groups;",
  "`queries G=n`: the batch in n query chunks, one task each). Without `strategy` in the product",
  "(or with BENCH_STRATEGY=off) the harness emulates them: `maxTasks: G`, and for `queries` one",
  "`maxTasks: 1` search per chunk sent concurrently (bench/modes.ts). Recall@k is against",
  "exact (flat) search on the same version. A mode whose recall is below native recall - 0.01",
  "gets no performance record. Batches run segment fan-out up to G = 8 with one warm-up sample",
  "(wider plans of a batch were 2-5x slower than one task in every earlier run).",
  "Each product row records the plans it ran (groups x query chunks, where the refine ran, and",
  "which segments went together). `auto` is judged against the best fixed mode: met within",
  "1.1x, and also when it ran the one plan of a fixed mode within 1.1x of the best, since two",
  "rows of the same plan ran the same tasks and differ by the run's spread only (the verdict",
  "says so, with both figures).",
  "",
  "Paths: `in-process` = vectorSearch with the in-process invoker (tasks share this process's",
  "2 cores); `stack` = the planner function invoked through the local Lambda endpoint, tasks in",
  "segment-search worker processes, data in the local S3 (s3rver) with no injected latency;",
  "`stack+s3-20ms` = the same behind a proxy adding 20 ms first-byte latency and a 90 MB/s",
  "per-connection cap. **Cold** = every worker replaced by a fresh process (started, modules",
  "loaded, caches empty; Lambda's init phase excluded) and native in a fresh process; views",
  "already exist (created once per dataset version, timed apart as the first call); nothing is",
  "prewarmed. **Warm** (every path) = native's index prewarmed (`prewarmIndex`) and the",
  "product's views prewarmed on first use (`LANCE_FANOUT_PREWARM=eager`); through the stack,",
  "before a mode is timed, each task of its plan is sent to every segment-search worker at once",
  "(one invocation per worker, so each worker gets one copy): every worker holds every view.",
  "`reads` and `stack-reads` (bench/s3-reads.ts) count the S3 requests and bytes of warm single",
  "queries through that proxy (no injected latency), native and `segments` G=n, with the",
  "dataset's `refineFactor` and without: in-process with the data on the local S3, and through",
  "the stack. The stack's workers have the deployed memory sizes and are frozen between",
  "invocations as Lambda freezes idle environments (`--no-freeze` leaves them running; each run",
  "records which in its options, `freeze`; runs without it predate both: workers left running,",
  "lancedb's index cache 2 GiB instead of half the function's memory). Every run recorded before",
  "December 3 2026 12:45 UTC had lancedb's default caches whatever the configuration said (6 GiB of",
  'index, 1 GiB of metadata per process; docs/deploy.md "Memory sizes" has peaks measured since).',
  "`living` and `stack-living` (bench/living.ts) commit to a copy of the dataset while",
  "queries run; `fallback` and `stack-fallback` (bench/fallback-cost.ts) measure unindexed rows",
  "against the same rows indexed; both are run only when named and have their own sections.",
  "",
];

const commitText = (run: Rec) => {
  const src = run.sources as { commit?: string; dirty?: boolean };
  return `${String(src.commit).slice(0, 10)}${src.dirty ? " (dirty)" : ""}`;
};

const lancedbVersion = (run: Rec) =>
  (run.environment as { packages?: Record<string, string> }).packages?.["@lancedb/lancedb"];

/** The machine, software, commit and load of each of the report's runs. */
export function runLines(runs: readonly Rec[], all: readonly Rec[], current: (r: Rec) => boolean) {
  const lines = ["## The report's runs", ""];
  for (const run of runs) {
    const env = run.environment as Record<string, unknown>;
    const end = all.find((r) => r.type === "end" && r.runId === run.runId);
    lines.push(
      `Run \`${run.runId}\`: ${env.cpuModel}, ${env.cores} cores, ${env.memoryGiB} GiB, Node ${env.node}, ` +
        `lancedb ${lancedbVersion(run)}, commit ${commitText(run)}, ` +
        `load average ${(env.loadAverage as number[]).join(" ")} at start, ${((end?.loadAverage as number[]) ?? []).map((l) => l.toFixed(2)).join(" ")} at end; ` +
        `threads ${JSON.stringify(env.threads)}.${current(run) ? "" : " **Older commit: shown, not judged.**"}`,
      "",
    );
  }
  return lines;
}

/** What a record measured, in a few words (its path, or its kind where it has none). */
function partOf(r: Rec): string | undefined {
  switch (r.type) {
    case "measurement":
    case "fallback-cost":
      return String(r.path);
    case "s3-reads":
      return `reads ${r.path}`;
    case "living-commit":
      return `${r.path}${r.prepare ? "" : " (prepare off)"}`;
    case "big-index":
      return `${r.latencyMs} ms latency`;
    case "task-profile":
      return "task profile";
    default:
      return undefined;
  }
}

/** Per dataset, the parts a run measured: "synth-1m: in-process, stack". */
function measured(records: readonly Rec[]): string {
  const parts = new Map<string, Set<string>>();
  for (const r of records) {
    const part = partOf(r);
    if (part === undefined) continue;
    const dataset = String(r.dataset);
    parts.set(dataset, (parts.get(dataset) ?? new Set()).add(part));
  }
  const text = [...parts].map(([dataset, set]) => `${dataset}: ${[...set].join(", ")}`);
  return text.length ? text.join("; ") : "nothing";
}

/**
 * The runs of bench/results none of whose cells is in the report (newer runs measured them all
 * again), newest first: their records stay in their files, read by nothing but this table.
 */
export function earlierRuns(records: readonly Rec[], reportRuns: readonly Rec[]): string[] {
  const shown = new Set(reportRuns.map((r) => r.runId));
  const runs = records
    .filter((r) => r.type === "run" && !shown.has(r.runId))
    .sort((a, b) => b.runId.localeCompare(a.runId));
  if (runs.length === 0) return [];
  const byRun = Map.groupBy(records, (r) => r.runId);
  const lines = [
    "## Earlier runs",
    "",
    `${runs.length} runs in this folder whose every cell a newer run measured again; their figures are in their files, the readings below quote them.`,
    "",
    "| run | commit | lancedb | measured |",
    "|---|---|---|---|",
  ];
  for (const run of runs) {
    const mine = byRun.get(run.runId) ?? [];
    const ended = mine.some((r) => r.type === "end");
    lines.push(
      `| \`${run.runId}\` | ${commitText(run)} | ${lancedbVersion(run)} | ${measured(mine)}${ended ? "" : " (stopped before its end)"} |`,
    );
  }
  lines.push("");
  return lines;
}
