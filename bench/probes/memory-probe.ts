/**
 * Peak resident memory of each function over an index larger than the segment-search's cache,
 * through the local Lambda endpoint with its memory sizes enforced and idle workers frozen, as
 * Lambda runs them. Builds (once, under bench/cache/) an IVF_FLAT dataset of 128-d vectors whose
 * index is `--rows` x 520 bytes, several segments, and searches it through the planner: one task
 * per segment and one task over every segment, with a few and with every partition probed.
 * Prints one line per search and a summary (docs/deploy.md "Memory sizes" quotes it).
 *   nice -n 10 npx tsx bench/probes/memory-probe.ts --memory 512        # cache 256 MB by the formula
 *   nice -n 10 npx tsx bench/probes/memory-probe.ts --memory 2048 --rounds 1
 */
import { loadavg } from "node:os";
import { join } from "node:path";
import { InvokeCommand } from "@aws-sdk/client-lambda";
import { Command } from "commander";
import { positiveInteger } from "../../cli/positive-integer.js";
import { FUNCTION_DEFAULTS } from "../../functions/defaults.js";
import { bundleFunctions } from "../../local/bundle.js";
import { partitionsFor } from "../../local/index-segments.js";
import { startLocalLambda } from "../../local/lambda.js";
import { freePort } from "../../local/net.js";
import { startLocalS3 } from "../../local/s3.js";
import { FUNCTIONS, localEnv } from "../../local/stack.js";
import { readManifest } from "../../shared/manifest-store.js";
import type { SearchResponse } from "../../shared/search.js";
import {
  CACHE_DIR,
  type DatasetSpec,
  ensureDataset,
  groundTruth,
  loadQueries,
  recallAtK,
} from "../datasets.js";
import { procResources } from "../env.js";
import { BUCKET, directObjectStore, loopbackLambdaClient, uploadDataset } from "../stack.js";

const options = new Command("memory-probe")
  .option("--memory <mb>", "the segment-search's memory size", positiveInteger, 512)
  .option(
    "--index-cache-mb <mb>",
    "its index cache (default: half its memory, as deployed)",
    positiveInteger,
  )
  .option(
    "--rows <n>",
    "rows of the dataset (IVF_FLAT: 520 bytes of index each)",
    positiveInteger,
    800_000,
  )
  .option("--workers <n>", "segment-search workers", positiveInteger, 2)
  .option("--rounds <n>", "times every search is run", positiveInteger, 2)
  .option("--queries <n>", "query vectors per search (at most 16)", positiveInteger, 4)
  .parse()
  .opts<{
    memory: number;
    indexCacheMb?: number;
    rows: number;
    workers: number;
    rounds: number;
    queries: number;
  }>();

const DIMENSION = 128;
/** Held-out query vectors of the dataset; a search takes `--queries` of them. */
const QUERIES = 16;
const K = 10;
const partitions = partitionsFor(options.rows);
const spec: DatasetSpec & { readonly index: "ivfFlat" } = {
  name: `flat-${options.rows}`,
  source: "synthetic",
  rows: options.rows,
  dimension: DIMENSION,
  clusters: 16_384,
  // A base segment of 60% of the rows and four deltas of 10%.
  baseRows: Math.round(options.rows * 0.6),
  deltas: 4,
  partitions,
  index: "ivfFlat",
  subVectors: 16,
  search: { k: K, nprobes: partitions },
  queries: QUERIES,
  seed: 51,
};

const log = (line: string) => process.stderr.write(`${line}\n`);
const mib = (bytes: number) => Math.round(bytes / 2 ** 20);

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
const info = await ensureDataset(spec, log);
const s3 = await startLocalS3({ directory: join(CACHE_DIR, "memory-probe-s3"), buckets: [BUCKET] });
const lambdaPort = await freePort();
const env = localEnv(s3.endpoint, `http://127.0.0.1:${lambdaPort}`, BUCKET);
Object.assign(process.env, env);
const uri = await uploadDataset({ s3 }, info);
// The live segments only: the build's optimize() rounds leave replaced index files behind.
const { segments } = await readManifest(directObjectStore({ s3 }), uri, info.version);
const segmentMiB = segments.map((segment) => mib(segment.sizeBytes ?? 0));
const indexBytes = segments.reduce((sum, segment) => sum + (segment.sizeBytes ?? 0), 0);
const bundles = await bundleFunctions();
const indexCacheMb = options.indexCacheMb ?? Math.floor(options.memory / 2);
const fn = (name: string, module: string, memorySize: number, concurrency = 1) => ({
  name,
  module,
  memorySize,
  concurrency,
  timeoutMs: 120_000,
});
const lambda = await startLocalLambda({
  port: lambdaPort,
  workerEntry: bundles.worker,
  env: { ...env, LANCE_FANOUT_LOG: "off", LANCE_FANOUT_TIMEOUT_MS: "110000" },
  freeze: true,
  functions: [
    fn(FUNCTIONS.planner, bundles.planner, FUNCTION_DEFAULTS.planner.memorySize),
    {
      ...fn(FUNCTIONS.segmentSearch, bundles.segmentSearch, options.memory, options.workers),
      env: { LANCE_FANOUT_INDEX_CACHE_MB: String(indexCacheMb) },
    },
    fn(FUNCTIONS.merge, bundles.merge, FUNCTION_DEFAULTS.merge.memorySize),
  ],
});
const client = loopbackLambdaClient(lambda.endpoint);
/** Highest VmHWM seen per function, in MiB, over every worker it ran. */
const peaks = new Map<string, number>();
const notePeaks = () => {
  for (const name of [FUNCTIONS.planner, FUNCTIONS.segmentSearch, FUNCTIONS.merge]) {
    for (const pid of lambda.workerPids(name)) {
      const peak = procResources(name, pid)?.peakRssMiB ?? 0;
      peaks.set(name, Math.max(peaks.get(name) ?? 0, peak));
    }
  }
};

try {
  const queries = await loadQueries(info, Math.min(options.queries, QUERIES));
  const truth = await groundTruth(info, queries, K, log);
  log(
    `${info.name}: ${info.rows} rows, ${info.segments} segments, ${partitions} partitions, ` +
      `index ${mib(indexBytes)} MiB (segments ${segmentMiB.join(", ")}); segment-search ${options.memory} MB, index cache ` +
      `${indexCacheMb} MB, ${options.workers} workers, ${queries.length} query vectors a search, freeze on; load ${loadavg()
        .map((l) => l.toFixed(2))
        .join(" ")}`,
  );
  const searches = [
    { strategy: "segments", nprobes: Math.ceil(partitions / 8) },
    { strategy: "segments", nprobes: partitions },
    { strategy: "single", nprobes: partitions },
  ] as const;
  for (let round = 1; round <= options.rounds; round++) {
    for (const search of searches) {
      const started = performance.now();
      const out = await client.send(
        new InvokeCommand({
          FunctionName: FUNCTIONS.planner,
          Payload: JSON.stringify({ dataset: uri, query: queries, k: K, ...search }),
        }),
      );
      const ms = Math.round(performance.now() - started);
      const answer = JSON.parse(
        Buffer.from(out.Payload ?? []).toString("utf8"),
      ) as SearchResponse & {
        error?: { code: string; message: string };
      };
      notePeaks();
      const found = queries.map((_, q) =>
        answer.results?.filter((r) => r._query_id === q).map((r) => r._rowid),
      );
      const stats = lambda.stats()[FUNCTIONS.segmentSearch];
      console.log(
        JSON.stringify({
          round,
          ...search,
          ms,
          tasks: answer.plan?.tasks,
          error: answer.error
            ? `${answer.error.code}: ${answer.error.message.slice(0, 160)}`
            : null,
          recall: answer.error ? null : recallAtK(found as string[][], truth),
          peakMiB: Object.fromEntries(peaks),
          outOfMemory: stats?.outOfMemory,
          crashes: stats?.crashes,
        }),
      );
    }
  }
  const stats = lambda.stats();
  console.log(
    JSON.stringify({
      summary: true,
      dataset: info.name,
      segments: info.segments,
      indexMiB: mib(indexBytes),
      segmentMiB,
      segmentSearchMemoryMb: options.memory,
      indexCacheMb,
      peakMiB: Object.fromEntries(peaks),
      outOfMemory: Object.fromEntries(Object.entries(stats).map(([n, s]) => [n, s.outOfMemory])),
      invocations: Object.fromEntries(Object.entries(stats).map(([n, s]) => [n, s.invocations])),
      loadavg: loadavg().map((l) => Number(l.toFixed(2))),
    }),
  );
} finally {
  client.destroy();
  await lambda.stop();
  await s3.stop();
}
