/**
 * What `npm start` does once the local stack listens: builds (first run) or reuses the demo
 * dataset, runs the example search it prints, and only then lets GET /health answer 200, so a
 * script that waits for health can run the printed curl.
 * @module
 */
import { type DemoDataset, ensureDemoDataset } from "./demo-dataset.js";
import type { Stack } from "./stack.js";

export interface DemoOptions {
  /** @default 200_000 */
  readonly rows?: number;
  /** @default 8 */
  readonly segments?: number;
  /** Called with each line of the demo build's progress. */
  readonly progress?: (line: string) => void;
}

export interface PreparedDemo {
  readonly demo: DemoDataset;
  /** How long the warm-up (example) search took; it also loads the segment views. */
  readonly warmUpMs: number;
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
  stack.api.starting("warm-up: running the example search");
  const started = performance.now();
  const res = await fetch(`${stack.api.url}/search`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(exampleSearch(demo.uri)),
  });
  const body = await res.text();
  if (!res.ok) throw new Error(`the warm-up search answered ${res.status}: ${body}`);
  const warmUpMs = Math.round(performance.now() - started);
  stack.api.ready();
  return { demo, warmUpMs };
}
