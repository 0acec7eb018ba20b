/**
 * The benchmark's smoke run: a tiny multi-segment dataset, every mode in-process, records with
 * raw durations and recall; and the recall gate: a threshold no mode can reach writes no
 * performance record, only records that say why. S3 reads per warm query: the merge's one refine
 * reads what native's does, whatever the number of tasks. And the stack's warm-up: after it,
 * every worker answers every task of the plan from its prewarmed views.
 */
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";

type Run = typeof import("../run.js");
type Datasets = typeof import("../datasets.js");
type DatasetSpec = import("../datasets.js").DatasetSpec;
let bench: Run;
let datasets: Datasets;
let cache: string;

beforeAll(async () => {
  // A private cache: the smoke dataset and its views are built here, never in bench/cache.
  cache = await mkdtemp(join(tmpdir(), "bench-cache-"));
  process.env.BENCH_CACHE_DIR = cache;
  bench = await import("../run.js");
  datasets = await import("../datasets.js");
});

function options(out: string, extra: Partial<import("../context.js").BenchOptions> = {}) {
  return {
    datasets: ["smoke"],
    modes: ["native", "single", "segments", "queries", "auto"] as const,
    queryWidths: [2],
    batches: [1, 10],
    paths: ["in-process"] as const,
    queries: 4,
    warmup: 1,
    batchRepeats: 2,
    stackQueries: 4,
    stackBatchRepeats: 2,
    cold: 0,
    latencyMs: 20,
    bandwidthMBps: 90,
    workers: 2,
    recallSlack: 0.01,
    out,
    report: false,
    calibrate: false,
    smoke: true,
    seed: 1,
    log: () => {},
    ...extra,
  } as import("../context.js").BenchOptions;
}

async function lines(file: string): Promise<Record<string, unknown>[]> {
  return (await readFile(file, "utf8"))
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe("bench smoke run", () => {
  it("measures every mode on one snapshot and records raw durations, p50/p95 and recall", async () => {
    const out = await mkdtemp(join(tmpdir(), "bench-out-"));
    const { file } = await bench.runBench(options(out));
    const records = await lines(file);
    const run = records.find((r) => r.type === "run") as Record<string, Record<string, unknown>>;
    expect(run.environment?.cores).toBeGreaterThan(0);
    expect(run.environment?.loadAverage).toHaveLength(3);
    expect(run.sources?.commit).toBeTypeOf("string");
    const dataset = records.find((r) => r.type === "dataset") as {
      info: { rows: number; segments: number };
    };
    const spec = datasets.DATASETS.smoke;
    expect(dataset.info).toMatchObject({ rows: spec?.rows, segments: (spec?.deltas ?? 0) + 1 });

    const measurements = records.filter((r) => r.type === "measurement");
    const modes = new Set(measurements.map((m) => `${m.mode}/${m.batch}`));
    for (const m of ["native/1", "single/1", "segments/1", "native/10", "queries/10"]) {
      expect(modes).toContain(m);
    }
    // Same snapshot for every mode.
    expect(new Set(measurements.map((m) => m.manifestHash)).size).toBe(1);
    for (const m of measurements) {
      expect(m.recall).toBeTypeOf("number");
      expect(m.recall).toBeGreaterThanOrEqual(m.recallThreshold as number);
      expect(m.nativeRecall).toBeTypeOf("number");
      expect((m.durationsMs as number[]).length).toBe(m.n);
      expect(m.p50).toBeGreaterThan(0);
      expect(m.p95).toBeGreaterThanOrEqual(m.p50 as number);
      // Each product mode says what plan it ran, so the report can tell a choice from the spread.
      const plans = m.plans as { groups: number; chunks: number }[] | undefined;
      if (m.mode === "native") expect(plans).toBeUndefined();
      else expect(plans?.map((p) => p.groups * p.chunks)).toEqual([m.tasks]);
    }
    const profile = records.find((r) => r.type === "task-profile") as { fit: { points: number } };
    expect(profile.fit.points).toBeGreaterThan(0);
    expect(records.some((r) => r.type === "resources")).toBe(true);
  });

  it("writes no performance record when recall is below the threshold, and says why", async () => {
    const out = await mkdtemp(join(tmpdir(), "bench-out-"));
    const { file } = await bench.runBench(
      options(out, { recallThreshold: 1.01, batches: [1], modes: ["native", "segments"] }),
    );
    const records = await lines(file);
    expect(records.filter((r) => r.type === "measurement")).toHaveLength(0);
    const rejected = records.filter((r) => r.type === "rejected");
    expect(rejected.length).toBeGreaterThan(0);
    for (const r of rejected) {
      expect(r.reason).toMatch(/below the threshold 1\.01/);
      expect(r).not.toHaveProperty("durationsMs");
      expect(r).not.toHaveProperty("p50");
    }
  });

  it("counts S3 reads per warm query: the refine reads as much at G = all segments as native", async () => {
    const info = await datasets.ensureDataset(datasets.DATASETS.smoke as DatasetSpec);
    const out = await mkdtemp(join(tmpdir(), "bench-out-"));
    const { file } = await bench.runBench(
      options(out, {
        paths: ["reads"],
        modes: ["native", "segments"],
        widths: [info.segments],
        batches: [1],
      }),
    );
    const reads = (await lines(file)).filter((r) => r.type === "s3-reads");
    type Reads = { tasks: number; queries: number; getsPerQuery: number; bytesPerQuery: number };
    const cell = (mode: string, refineFactor: number | null) =>
      reads.find((r) => r.mode === mode && r.refineFactor === refineFactor) as unknown as Reads;
    const native = cell("native", 4);
    const all = cell("segments", 4);
    expect(all.tasks).toBe(info.segments);
    expect(all.queries).toBe(4);
    // The refine reads raw vectors from S3 (warm: nothing else is read).
    expect(native.getsPerQuery).toBeGreaterThan(0);
    // One refine of the global top k x refineFactor, as native's; a refine per task read each
    // task's own top k x refineFactor (measured here: 1.48x native's bytes at G = 5).
    expect(all.bytesPerQuery).toBeLessThanOrEqual(native.bytesPerQuery * 1.2);
    expect(all.getsPerQuery).toBeLessThanOrEqual(native.getsPerQuery * 1.2);
    // Without a refine step a warm query reads nothing: every index is in memory.
    expect(cell("native", null).getsPerQuery).toBe(0);
    expect(cell("segments", null).getsPerQuery).toBe(0);
  });

  it("runs a living dataset through every commit kind: native's answers, no index view for an append, gc removes dead views", async () => {
    const { COMMIT_KINDS } = await import("../living-writer.js");
    const out = await mkdtemp(join(tmpdir(), "bench-out-"));
    const { file } = await bench.runBench(
      options(out, {
        paths: ["living"],
        latencyMs: 0,
        bandwidthMBps: 0,
        warmup: 1,
        living: {
          commits: COMMIT_KINDS.length,
          intervalMs: 0,
          cycle: COMMIT_KINDS,
          reindexEvery: 0,
          prepare: true,
          gcEvery: COMMIT_KINDS.length,
          gcKeep: 1,
          steady: 1,
          appendRows: 200,
          deleteRows: 400,
        },
      }),
    );
    type Commit = {
      kind: string;
      to: number;
      errors: string[];
      first: { product: { version: number }; agreement: number };
      viewsCreated: Record<"prepare" | "queries", { index: number; flat: number }>;
      requests: { commit: Record<string, number> };
      gc: { before: { objects: number }; after: { objects: number } } | null;
    };
    const commits = (await lines(file)).filter(
      (r) => r.type === "living-commit",
    ) as unknown as Commit[];
    expect(commits.map((c) => c.kind)).toEqual([...COMMIT_KINDS]);
    for (const c of commits) {
      expect(c.errors).toEqual([]);
      // The first query after the commit searched the new version, and found what native found.
      expect(c.first.product.version).toBe(c.to);
      expect(c.first.agreement).toBe(1);
    }
    const append = commits.find((c) => c.kind === "append") as Commit;
    expect(append.viewsCreated.prepare.index + append.viewsCreated.queries.index).toBe(0);
    expect(append.viewsCreated.prepare.flat).toBe(1);
    expect(append.requests.commit["put:data"]).toBeGreaterThan(0);
    const gc = commits.at(-1)?.gc;
    expect(gc?.after.objects).toBeLessThan(gc?.before.objects ?? 0);
  });

  it("points this process's S3 endpoint at the bench proxy while its local S3 runs (views made here never try AWS)", async () => {
    const { startBenchS3 } = await import("../stack.js");
    const before = process.env.AWS_ENDPOINT_URL;
    const storage = await startBenchS3({
      dataDir: await mkdtemp(join(tmpdir(), "bench-s3-")),
      latencyMs: 0,
      bandwidthMBps: 0,
    });
    try {
      // lancedb re-opens a fresh clone from the environment alone (shared/lance/clone.ts `shallowClone`).
      expect(process.env.AWS_ENDPOINT_URL).toBe(storage.proxy.endpoint);
      expect(process.env.AWS_ENDPOINT_URL_S3).toBe(storage.proxy.endpoint);
      expect(process.env.AWS_ALLOW_HTTP).toBe("true");
    } finally {
      await storage.stop();
    }
    expect(process.env.AWS_ENDPOINT_URL).toBe(before);
  });

  it("warms every view of a plan in every stack worker before a mode is timed", async () => {
    const { startBenchStack, uploadDataset } = await import("../stack.js");
    const { stackTarget } = await import("../modes.js");
    const info = await datasets.ensureDataset(datasets.DATASETS.smoke as DatasetSpec);
    const queries = await datasets.loadQueries(info, 8);
    let indexReads = 0;
    const stack = await startBenchStack({
      dataDir: await mkdtemp(join(tmpdir(), "bench-s3-")),
      latencyMs: 0,
      bandwidthMBps: 0,
      workers: 2,
      workerEnv: {},
      prewarm: "eager",
      onRequest: (_method, url) => {
        if (url.includes("/_indices/")) indexReads++;
      },
    });
    try {
      const target = await stackTarget(info, await uploadDataset(stack, info), stack);
      const mode = { name: "segments", width: 2 } as const;
      await target.warmUp?.(mode, queries.slice(0, 1));
      expect(indexReads).toBeGreaterThan(0);
      indexReads = 0;
      // Two searches at once: four tasks on two workers, each worker meets both groups.
      for (let i = 1; i < queries.length; i += 2) {
        await Promise.all(queries.slice(i, i + 2).map((q) => target.search(mode, [q])));
      }
      expect(indexReads).toBe(0);
      await target.close();
    } finally {
      await stack.stop();
    }
  });
});

describe("living commit kinds", () => {
  it("runs the cycle in turn with a reindex every n-th commit, and the cycle alone with 0", async () => {
    const { commitKind } = await import("../living.js");
    const base = { cycle: ["append", "delete"] } as const;
    const kinds = (reindexEvery: number) =>
      Array.from({ length: 7 }, (_, i) => commitKind({ ...base, reindexEvery }, i));
    expect(kinds(3)).toEqual([
      "append",
      "delete",
      "reindex",
      "append",
      "delete",
      "reindex",
      "append",
    ]);
    expect(kinds(0)).toEqual([
      "append",
      "delete",
      "append",
      "delete",
      "append",
      "delete",
      "append",
    ]);
  });
});

describe("bench --all", () => {
  it("runs every cell of the report in named parts, the static matrix one part per dataset", () => {
    const parts = bench.allRuns(options("/nowhere"));
    expect(parts.map((p) => p.name)).toEqual([...bench.ALL_PARTS]);
    expect(parts.every((p) => p.options.report === false)).toBe(true);
    const staticParts = parts.filter((p) => p.options.paths.includes("stack"));
    expect(staticParts.map((p) => p.options.datasets)).toEqual([
      ["fashion-mnist"],
      ["synth-1m"],
      ["synth-many"],
    ]);
    expect(staticParts.every((p) => p.options.cold === 3)).toBe(true);
    const living = parts.filter((p) => p.options.living?.commits);
    expect(living.map((p) => [p.name, p.options.living?.prepare])).toContainEqual([
      "living-unprepared",
      false,
    ]);
  });
});
