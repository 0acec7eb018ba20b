/**
 * Memory sizing: a segment-search at its deployed memory size (enforced, frozen between
 * invocations) searches an index that does not fit its index cache by reading it from storage,
 * never by dying. The measurement at scale is `bench/probes/memory-probe.ts` (docs/deploy.md).
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { InvokeCommand, LambdaClient } from "@aws-sdk/client-lambda";
import { ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { FUNCTION_DEFAULTS } from "../functions/defaults.js";
import { bundleFunctions } from "../local/bundle.js";
import { type LocalLambda, startLocalLambda } from "../local/lambda.js";
import { freePort } from "../local/net.js";
import { type LocalS3, startLocalS3 } from "../local/s3.js";
import { FUNCTIONS, localEnv } from "../local/stack.js";
import type { SearchResponse } from "../shared/search.js";
import { type Dataset, makeDataset, nativeSearch, queries } from "./support/fixtures.js";

const BUCKET = "memory";
/** The segment-search's index cache, far under every index segment of the dataset. */
const INDEX_CACHE_MB = 1;
const MB = 1024 * 1024;
/** IVF partitions: ~10,000 rows each at the end, so no round merges the segments. */
const PARTITIONS = 8;

let s3: LocalS3;
let lambda: LocalLambda;
let client: LambdaClient;
let ds: Dataset;

/** The functions at their deployed memory sizes, enforced, frozen while idle; new workers. */
async function startFunctions(port: number, env: Record<string, string>): Promise<LocalLambda> {
  const bundles = await bundleFunctions();
  const deployed = (name: string, module: string, size: { readonly memorySize: number }) => ({
    name,
    module,
    memorySize: size.memorySize,
    timeoutMs: 20_000,
  });
  return startLocalLambda({
    port,
    workerEntry: bundles.worker,
    env: { ...env, LANCE_FANOUT_LOG: "off" },
    freeze: true,
    functions: [
      deployed(FUNCTIONS.planner, bundles.planner, FUNCTION_DEFAULTS.planner),
      {
        ...deployed(
          FUNCTIONS.segmentSearch,
          bundles.segmentSearch,
          FUNCTION_DEFAULTS.segmentSearch,
        ),
        // One worker serves every task, so it has searched every view: a cache that held their
        // index would answer the search below with the index files unreadable.
        concurrency: 1,
        env: { LANCE_FANOUT_INDEX_CACHE_MB: String(INDEX_CACHE_MB) },
      },
      deployed(FUNCTIONS.merge, bundles.merge, FUNCTION_DEFAULTS.merge),
    ],
  });
}

let lambdaPort: number;
let env: Record<string, string>;

beforeAll(async () => {
  s3 = await startLocalS3({
    directory: await mkdtemp(join(tmpdir(), "fanout-memory-")),
    buckets: [BUCKET],
  });
  lambdaPort = await freePort();
  env = localEnv(s3.endpoint, `http://127.0.0.1:${lambdaPort}`, BUCKET);
  lambda = await startFunctions(lambdaPort, env);
  // IVF_FLAT holds every vector (64 bytes at 16 dimensions) in the index: ~1.4 MB per segment.
  ds = await makeDataset({
    db: { uri: `s3://${BUCKET}/db`, storageOptions: s3.storageOptions() },
    index: "ivfFlat",
    numPartitions: PARTITIONS,
    initialRows: 24_000,
    rounds: [20_000, 20_000, 20_000],
  });
  client = new LambdaClient({ endpoint: lambda.endpoint, maxAttempts: 1 });
}, 60_000);

afterAll(async () => {
  client?.destroy();
  await lambda?.stop();
  await s3?.stop();
});

/** Bytes of each index segment's files in storage, by segment uuid. */
async function segmentBytes(): Promise<Map<string, number>> {
  const s3Client = new S3Client({
    endpoint: s3.endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: s3.credentials,
  });
  const prefix = "db/items.lance/_indices/";
  const bytes = new Map<string, number>();
  let token: string | undefined;
  do {
    const page = await s3Client.send(
      new ListObjectsV2Command({ Bucket: BUCKET, Prefix: prefix, ContinuationToken: token }),
    );
    for (const { Key = "", Size = 0 } of page.Contents ?? []) {
      const uuid = Key.slice(prefix.length).split("/")[0] ?? "";
      bytes.set(uuid, (bytes.get(uuid) ?? 0) + Size);
    }
    token = page.NextContinuationToken;
  } while (token);
  s3Client.destroy();
  return bytes;
}

const [q0 = [], q1 = [], q2 = []] = queries(3, 31);
/** Every partition probed: each task reads its whole view's index. */
const request = { query: [q0, q1, q2], k: 10, nprobes: PARTITIONS, strategy: "segments" as const };

async function search(
  body: object,
): Promise<SearchResponse & { error?: { code: string; status?: number } }> {
  const out = await client.send(
    new InvokeCommand({
      FunctionName: FUNCTIONS.planner,
      Payload: JSON.stringify({ dataset: ds.uri, ...body }),
    }),
  );
  expect(out.FunctionError).toBeUndefined();
  return JSON.parse(Buffer.from(out.Payload ?? []).toString("utf8"));
}

describe("a segment-search at its deployed memory size", () => {
  test("searches an index larger than its cache from storage: native answers, no OutOfMemory", async () => {
    const bytes = await segmentBytes();
    expect(bytes.size).toBe(ds.segments);
    // No segment, so no view of one, fits the cache, let alone the 80% a prewarm may fill.
    expect(Math.min(...bytes.values())).toBeGreaterThan(INDEX_CACHE_MB * MB);

    for (let round = 0; round < 2; round++) {
      const answer = await search(request);
      expect(answer.error).toBeUndefined();
      expect(answer.plan.tasks).toBe(ds.segments);
      for (const [queryId, query] of [q0, q1, q2].entries()) {
        const native = await nativeSearch(ds, query, 10, { nprobes: PARTITIONS });
        const ours = answer.results.filter((r) => r._query_id === queryId);
        expect(ours.map((r) => r._rowid)).toEqual(native.map((h) => h.rowid));
        for (const [i, hit] of native.entries()) {
          expect(ours[i]?._distance).toBeCloseTo(hit.distance, 4);
        }
      }
    }
    const stats = lambda.stats();
    for (const fn of [FUNCTIONS.planner, FUNCTIONS.segmentSearch, FUNCTIONS.merge]) {
      expect({ fn, outOfMemory: stats[fn]?.outOfMemory, crashes: stats[fn]?.crashes }).toEqual({
        fn,
        outOfMemory: 0,
        crashes: 0,
      });
    }
    expect(stats[FUNCTIONS.segmentSearch]?.invocations).toBeGreaterThanOrEqual(2 * ds.segments);
  });

  /** Searches, then searches again with the index files unreadable: that must fail. */
  async function expectIndexReadFromStorage(): Promise<void> {
    const expected = await search(request);
    expect(expected.error).toBeUndefined();
    // Warm worker, same views, same partitions: only an index held in memory could answer now.
    s3.injectFault({ keys: new RegExp(`^/${BUCKET}/db/items\\.lance/_indices/`), status: 500 });
    try {
      // Lance retries the failed reads, task after task on the one worker: past a short
      // deadline it is a TIMEOUT, else the failed task's SEGMENT_SEARCH_FAILED; never an answer.
      const failed = await search({ ...request, timeoutMs: 4_000 });
      expect(failed.error?.code).toMatch(/^(SEGMENT_SEARCH_FAILED|TIMEOUT)$/);
    } finally {
      s3.injectFault(undefined);
    }
    const after = await search(request);
    expect(after.results).toEqual(expected.results);
    expect(lambda.stats()[FUNCTIONS.segmentSearch]?.outOfMemory).toBe(0);
  }

  test("holds none of the index after answering, in the worker that made the views", async () => {
    await expectIndexReadFromStorage();
  });

  test("holds none of the index after answering, in a new worker that opens the views", async () => {
    await lambda.stop();
    lambda = await startFunctions(lambdaPort, env);
    await expectIndexReadFromStorage();
  });
});
