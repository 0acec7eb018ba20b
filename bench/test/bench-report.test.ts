/**
 * The benchmark report's judgement, on records written here: goals come from the report's
 * commit only, and the big-index section's cost and contention figures follow from the records.
 */
import { describe, expect, it } from "vitest";
import { bigIndexDetails, bigIndexGoals } from "../report-big-index.js";
import { isCurrent, type Rec, reportCommit } from "../report-format.js";
import { earlierRuns } from "../report-runs.js";

const run = (runId: string, commit: string, dirty = false): Rec => ({
  type: "run",
  runId,
  sources: { commit, dirty },
});

describe("the report's commit", () => {
  const runs = [
    run("2026-12-04T10", "aaa"),
    run("2026-12-04T12", "bbb"),
    run("2026-12-04T13", "ccc", true),
  ];

  it("is the newest clean run's, and only its runs are current", () => {
    const commit = reportCommit(runs);
    expect(commit).toBe("bbb");
    expect(isCurrent(runs, commit, "2026-12-04T12")).toBe(true);
    expect(isCurrent(runs, commit, "2026-12-04T10")).toBe(false);
    expect(isCurrent(runs, commit, "2026-12-04T13")).toBe(false);
    expect(isCurrent(runs, commit, "unknown-run")).toBe(false);
  });

  it("is none when every run had uncommitted changes", () => {
    expect(reportCommit([run("2026-12-04T13", "ccc", true)])).toBeUndefined();
  });
});

describe("the earlier runs (bench/results/README.md)", () => {
  const withLancedb = (r: Rec): Rec => ({
    ...r,
    environment: { packages: { "@lancedb/lancedb": "0.39.0" } },
  });
  const older = withLancedb(run("2026-12-04T10", "aaaaaaaaaaaa"));
  const dirty = withLancedb(run("2026-12-04T11", "bbb", true));
  const reported = withLancedb(run("2026-12-04T12", "ccc"));
  const records: Rec[] = [
    older,
    { type: "measurement", runId: older.runId, dataset: "d", path: "in-process" },
    { type: "measurement", runId: older.runId, dataset: "d", path: "stack" },
    { type: "task-profile", runId: older.runId, dataset: "d" },
    { type: "end", runId: older.runId },
    dirty,
    {
      type: "living-commit",
      runId: dirty.runId,
      dataset: "living",
      path: "living",
      prepare: false,
    },
    reported,
    { type: "measurement", runId: reported.runId, dataset: "d", path: "in-process" },
  ];

  it("lists the runs the report does not show, newest first, with what each measured", () => {
    const rows = earlierRuns(records, [reported]).filter((l) => l.startsWith("| `"));
    expect(rows).toEqual([
      "| `2026-12-04T11` | bbb (dirty) | 0.39.0 | living: living (prepare off) (stopped before its end) |",
      "| `2026-12-04T10` | aaaaaaaaaa | 0.39.0 | d: in-process, stack, task profile |",
    ]);
  });

  it("is empty when the report shows every run", () => {
    expect(earlierRuns(records, [older, dirty, reported])).toEqual([]);
  });
});

describe("big-index goals", () => {
  const base = {
    type: "big-index",
    runId: "r",
    dataset: "big-index",
    latencyMs: 20,
    cacheMb: 128,
    functionMb: 512,
    queries: 100,
    p99: 0,
    recall: 1,
  };
  const cpu = { planner: 10, segmentSearch: 60, busiestSlot: 12, merge: 2, harness: 20 };
  const records: Rec[] = [
    {
      ...base,
      path: "native",
      mode: "native, one function's cache",
      tasks: 1,
      p50: 300,
      getsPerQuery: 70,
    },
    { ...base, path: "native", mode: "native, unbounded cache", tasks: 1, p50: 5, getsPerQuery: 0 },
    {
      ...base,
      path: "stack",
      mode: "G=1",
      tasks: 1,
      p50: 310,
      getsPerQuery: 70,
      cpuMsPerQuery: cpu,
    },
    { ...base, path: "stack", mode: "G=8", tasks: 6, p50: 30, getsPerQuery: 1, cpuMsPerQuery: cpu },
    {
      ...base,
      path: "stack",
      mode: "auto",
      tasks: 6,
      p50: 36,
      getsPerQuery: 1,
      cpuMsPerQuery: cpu,
    },
    {
      type: "resources",
      runId: "r",
      dataset: "big-index",
      path: "big-index+s3-20ms",
      processes: [{ role: "lance-fanout-segment-search-3", peakRssMiB: 600 }],
    },
  ];

  it("judges the stack's fastest fixed mode against bounded native, auto against it, and worker memory", () => {
    const goals = bigIndexGoals(records);
    const verdict = (part: string) => goals.find((g) => g.goal.includes(part))?.verdict;
    expect(verdict("0.35x")).toBe("met"); // 30 / 300 = 0.10
    expect(verdict("GETs")).toBe("met"); // 1 of 70
    expect(verdict("auto within 1.1x")).toBe("missed: 1.20x"); // 36 / 30
    expect(verdict("peak RSS")).toBe("missed: 600 MiB");
  });

  it("counts auto as met only when it ran the one plan of a mode within 1.1x of the best", () => {
    const plan = (groups: number, refine = "none") => [
      { groups, chunks: 1, refine, signature: `s${groups}` },
    ];
    const withPlans = (autoPlans: unknown, g8Plans: unknown) =>
      records.map((r) =>
        r.mode === "auto"
          ? { ...r, plans: autoPlans }
          : r.mode === "G=8"
            ? { ...r, plans: g8Plans }
            : r,
      );
    const autoVerdict = (rs: Rec[]) =>
      bigIndexGoals(rs).find((g) => g.goal.includes("auto within 1.1x"))?.verdict;
    expect(autoVerdict(withPlans(plan(6), plan(6)))).toBe(
      "met: the plan of G=8 (30.0 ms); 1.20x is one plan's spread",
    );
    // Another plan, another refine, or plans that changed during the run: judged by time.
    expect(autoVerdict(withPlans(plan(4), plan(6)))).toBe("missed: 1.20x");
    expect(autoVerdict(withPlans(plan(6, "merge"), plan(6)))).toBe("missed: 1.20x");
    expect(autoVerdict(withPlans([...plan(6), ...plan(4)], plan(6)))).toBe("missed: 1.20x");
    // The twin must itself be within 1.1x of the best: G=1 runs auto's plan here, at 310 ms.
    const slowTwin = records.map((r) =>
      r.mode === "auto" || r.mode === "G=1" ? { ...r, plans: plan(1) } : r,
    );
    expect(autoVerdict(slowTwin)).toBe("missed: 1.20x");
  });

  it("puts the contention of two shared cores at CPU / 2 - the critical path", () => {
    const text = bigIndexDetails(records).join("\n");
    // (10 + 60 + 2 + 20) / 2 - (10 + 12 + 2) = 22 ms of G=8's 30: 8 ms without it, 1.6x unbounded.
    expect(text).toContain(
      "| G=8 | 6 | 30.0 | 10.0 / 60.0 / 12.0 / 2.0 / 20.0 | 24.0 | 22.0 (73%) | 8.0 | 1.6x |",
    );
  });
});
