/**
 * What `npm start` does once the local stack listens: builds (first run) or reuses the demo
 * dataset, runs the example search it prints, and only then lets GET /health answer 200, so a
 * script that waits for health can run the printed curl.
 * @module
 */
import { type DemoDataset, ensureDemoDataset } from "./demo-dataset.js";
import type { Stack, StackOptions } from "./stack.js";

/**
 * What `npm start` deploys locally, so that the demo shows what fan-out is for: segment-search
 * environments whose index cache is smaller than the demo's index (2.8 MiB of files, more in a
 * cache), four slots to spread its groups over, and a local S3 that answers after S3's typical
 * first-byte latency once the demo is built. One task re-reads its index from S3 on every query;
 * `auto`'s groups stay cached in their slots.
 */
export const DEMO_STACK = {
  segmentSearchSlots: 4,
  indexCacheMb: 4,
} as const satisfies StackOptions;

/** The local S3's first-byte latency once the demo is built (`fanout serve --s3-latency-ms`). */
export const DEMO_S3_LATENCY_MS = 20;

export interface DemoOptions {
  /** @default 200_000 */
  readonly rows?: number;
  /** @default 8 */
  readonly segments?: number;
  /** The local S3's first-byte latency after the build. @default DEMO_S3_LATENCY_MS */
  readonly s3LatencyMs?: number;
  /** Called with each line of the demo build's progress. */
  readonly progress?: (line: string) => void;
}

export interface PreparedDemo {
  readonly demo: DemoDataset;
  /** How long the warm-up (example) search took; it also loads the segment views. */
  readonly warmUpMs: number;
  /** The example search, warm, as `auto` plans it and as one task. */
  readonly comparison: {
    readonly auto: TimedSearch;
    readonly oneTask: TimedSearch;
  };
}

export interface TimedSearch {
  readonly ms: number;
  readonly tasks: number;
  /** Why the plan has this shape (`plan.reason`). */
  readonly reason: string;
}

/** The search the printed curl runs: filtered, with extra columns, on the demo dataset. */
export function exampleSearch(dataset: string) {
  return {
    dataset,
    query: Array.from({ length: 64 }, (_, i) => Number((0.3 + (i % 7) * 0.05).toFixed(2))),
    k: 5,
    filter: "category = 3",
    select: ["id", "category"],
  };
}

/**
 * Prepares the demo on a started stack and marks the stack ready. While it runs, GET /health
 * answers 503 with what it is doing.
 */
export async function prepareDemo(stack: Stack, options: DemoOptions = {}): Promise<PreparedDemo> {
  // This process writes the demo through lancedb: keep it on loopback like the functions.
  Object.assign(process.env, stack.env);
  stack.api.starting("demo dataset: opening it, or building it on the first run");
  const demo = await ensureDemoDataset({
    db: `s3://${stack.bucket}/demo`,
    storageOptions: stack.s3.storageOptions(),
    rows: options.rows,
    segments: options.segments,
    // The stack's own demo: one of other rows (an earlier --rows) is rebuilt.
    overwrite: true,
    progress: (line) => {
      stack.api.starting(`demo dataset: ${line}`);
      options.progress?.(line);
    },
  });
  stack.s3.setLatency(options.s3LatencyMs ?? DEMO_S3_LATENCY_MS);
  stack.api.starting("warm-up: running the example search");
  const example = exampleSearch(demo.uri);
  const warmUpMs = (await timedSearch(stack, example)).ms;
  const auto = await timedSearch(stack, example);
  stack.api.starting("warm-up: the example search as one task, to compare");
  // One task's second run (the first loads what it caches), then auto's groups again: the
  // one task's index displaced theirs where it ran, and the printed search should find them.
  const single = { ...example, strategy: "single" };
  await timedSearch(stack, single);
  const oneTask = await timedSearch(stack, single);
  for (let run = 0; run < 2; run++) await timedSearch(stack, example);
  stack.api.ready();
  return { demo, warmUpMs, comparison: { auto, oneTask } };
}

async function timedSearch(stack: Stack, request: object): Promise<TimedSearch> {
  const started = performance.now();
  const res = await fetch(`${stack.api.url}/search`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(request),
  });
  const body = await res.text();
  if (!res.ok) throw new Error(`the warm-up search answered ${res.status}: ${body}`);
  const { plan } = JSON.parse(body) as { plan: { tasks: number; reason: string } };
  return { ms: Math.round(performance.now() - started), tasks: plan.tasks, reason: plan.reason };
}
