/**
 * A bounded load test of the local stack (loopback only): N clients search for M seconds; reports
 * throughput, p50/p99 latency, errors, tasks per search and the memory of every worker over the run.
 *   npm run load -- --clients 8 --seconds 30
 *   npm run load -- --clients 8 --seconds 20 --strategy segments   # one task per index segment
 *   npm run load -- --clients 8 --seconds 20 --no-freeze           # idle workers left running
 */
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Command, Option } from "commander";
import { positiveInteger } from "../cli/positive-integer.js";
import { ensureDemoDataset } from "../local/demo-dataset.js";
import { FUNCTIONS, startStack } from "../local/stack.js";

const options = new Command("load")
  .option("--clients <n>", "concurrent clients", positiveInteger, 8)
  .option("--seconds <n>", "duration", positiveInteger, 30)
  .option("--rows <n>", "rows of the dataset", positiveInteger, 50_000)
  .addOption(
    new Option("--strategy <name>", "the searches' strategy").choices([
      "auto",
      "single",
      "segments",
    ]),
  )
  .option("--no-freeze", "leave idle workers running (Lambda freezes them)")
  .parse()
  .opts<{ clients: number; seconds: number; rows: number; strategy?: string; freeze: boolean }>();

// Node 20 runs the local stack knowingly; Lambda runs 22 or 24.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
const stack = await startStack({
  dataDir: await mkdtemp(join(tmpdir(), "fanout-load-")),
  apiPort: 0,
  s3Port: 0,
  lambdaPort: 0,
  freeze: options.freeze,
});
Object.assign(process.env, stack.env);
try {
  const dataset = await ensureDemoDataset({
    db: `s3://${stack.bucket}/load`,
    storageOptions: stack.s3.storageOptions(),
    rows: options.rows,
    dimension: 64,
    // The documented run (docs/reliability.md) had 10 segments; the builder now makes exactly this.
    segments: 10,
  });
  const search = async (seed: number) => {
    const query = Array.from({ length: 64 }, (_, i) => ((seed * 31 + i * 7) % 97) / 97);
    const started = performance.now();
    const res = await fetch(`${stack.api.url}/search`, {
      method: "POST",
      body: JSON.stringify({
        dataset: dataset.uri,
        query,
        k: 10,
        filter: `category = ${seed % 10}`,
        strategy: options.strategy,
      }),
    });
    const body = (await res.json()) as { plan?: { tasks: number } };
    const ms = performance.now() - started;
    return { ms, ok: res.status === 200, status: res.status, tasks: body.plan?.tasks ?? 0 };
  };
  // Warm every worker: rounds of as many searches at once as the load runs (one at a time, the
  // pools would hand them all to the same warm worker).
  for (let round = 0; round < 2; round++) {
    await Promise.all(
      Array.from({ length: options.clients }, (_, c) => search(round * options.clients + c)),
    );
  }
  const memory = new Map<number, { fn: string; first: number; last: number; peak: number }>();
  const sampleMemory = async () => {
    for (const fn of Object.values(FUNCTIONS)) {
      for (const pid of stack.lambda.workerPids(fn)) {
        const status = await readFile(`/proc/${pid}/status`, "utf8").catch(() => "");
        const kb = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+)`).exec(status)?.[1] ?? 0);
        const rss = kb("VmRSS") / 1024;
        const entry = memory.get(pid) ?? { fn, first: rss, last: rss, peak: 0 };
        memory.set(pid, { ...entry, last: rss, peak: Math.max(entry.peak, kb("VmHWM") / 1024) });
      }
    }
  };
  await sampleMemory();
  const sampler = setInterval(() => void sampleMemory(), 1000);
  const deadline = performance.now() + options.seconds * 1000;
  const results: Awaited<ReturnType<typeof search>>[] = [];
  await Promise.all(
    Array.from({ length: options.clients }, async (_, client) => {
      for (let i = 0; performance.now() < deadline; i++)
        results.push(await search(client * 100_000 + i));
    }),
  );
  clearInterval(sampler);
  await sampleMemory();
  const sorted = results.map((r) => r.ms).sort((a, b) => a - b);
  const pct = (p: number) =>
    sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]?.toFixed(1);
  const byFn = (fn: string) => [...memory.values()].filter((m) => m.fn === fn);
  const mb = (values: number[]) => `${Math.round(Math.max(...values, 0))} MB`;
  console.log(
    JSON.stringify(
      {
        clients: options.clients,
        seconds: options.seconds,
        strategy: options.strategy ?? "auto",
        freeze: stack.lambda.freeze,
        dataset: { rows: dataset.rows, segments: dataset.segments },
        requests: results.length,
        throughputPerSecond: Number((results.length / options.seconds).toFixed(1)),
        p50Ms: Number(pct(0.5)),
        p99Ms: Number(pct(0.99)),
        errors: results.filter((r) => !r.ok).length,
        tasksPerSearch: [...new Set(results.map((r) => r.tasks))].sort((a, b) => a - b),
        statuses: [...new Set(results.map((r) => r.status))],
        workers: Object.fromEntries(
          Object.values(FUNCTIONS).map((fn) => [
            fn,
            {
              processes: byFn(fn).length,
              peakRss: mb(byFn(fn).map((m) => m.peak)),
              rssAfterWarmUp: mb(byFn(fn).map((m) => m.first)),
              rssAtEnd: mb(byFn(fn).map((m) => m.last)),
            },
          ]),
        ),
        loadAverage: (await readFile("/proc/loadavg", "utf8")).split(" ").slice(0, 3).join(" "),
      },
      null,
      2,
    ),
  );
} finally {
  await stack.stop();
}
