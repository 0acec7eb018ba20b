/**
 * A dataset on S3 (the local S3 server): the manifest read through @aws-sdk/client-s3, views on a
 * writable view prefix of the same store, the dataset prefix left untouched.
 */
import { mkdtemp, readdir, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import * as lancedb from "@lancedb/lancedb";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { type LocalS3, startLocalS3 } from "../local/s3.js";
import { loadConfig } from "../shared/config.js";
import { inProcessInvoker } from "../shared/invoker.js";
import { readManifest } from "../shared/manifest-store.js";
import { createRuntime, type Runtime } from "../shared/runtime.js";
import { vectorSearch } from "../shared/search.js";
import { corpus } from "./support/corpus.js";
import { type Dataset, makeDataset, nativeSearch, queries } from "./support/fixtures.js";
import { objectsUnder, s3Client } from "./support/s3.js";

let s3: LocalS3;
let ds: Dataset;
let runtime: Runtime;
let client: S3Client;

beforeAll(async () => {
  s3 = await startLocalS3({
    directory: await mkdtemp(join(tmpdir(), "fanout-s3-")),
    buckets: ["data"],
  });
  ds = await makeDataset({
    db: { uri: "s3://data/db", storageOptions: s3.storageOptions() },
    rounds: [4000, 1500, 6000],
    deleteWhere: "id % 11 = 0",
  });
  const env = {
    AWS_ENDPOINT_URL_S3: s3.endpoint,
    AWS_ACCESS_KEY_ID: s3.credentials.accessKeyId,
    AWS_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
    AWS_REGION: "us-east-1",
    LANCE_FANOUT_S3_VIEW_PREFIX: "fanout-views",
    LANCE_FANOUT_ALLOWED_DATASETS: "s3://data/db/",
  };
  // lancedb re-opens a fresh clone without its storage options: keep that path on loopback too.
  Object.assign(process.env, { ...env, AWS_ENDPOINT_URL: s3.endpoint, AWS_ALLOW_HTTP: "true" });
  runtime = createRuntime(loadConfig({ ...process.env, ...env }));
  client = s3Client(s3);
});

afterAll(async () => {
  client?.destroy();
  await s3?.stop();
});

const keys = (bucket: string, prefix: string) => objectsUnder(client, bucket, prefix);

describe("a dataset on S3", () => {
  test("searches with views on the view prefix and matches native lancedb", async () => {
    const before = await keys("data", "db/");
    const [q0 = [], q1 = []] = queries(2, 5);
    const response = await vectorSearch(
      { dataset: ds.uri, query: [q0, q1], k: 10, nprobes: 2, select: ["id"], strategy: "segments" },
      { runtime },
    );
    expect(ds.segments).toBe(4);
    expect(response.plan.tasks).toBe(ds.segments);
    for (const group of response.plan.groups)
      expect(group.searchedSegments).toBe(group.segments.length);
    for (const [i, q] of [q0, q1].entries()) {
      const native = await nativeSearch(ds, q, 10, { nprobes: 2 });
      expect(response.results.filter((r) => r._query_id === i).map((r) => r._rowid)).toEqual(
        native.map((h) => h.rowid),
      );
    }
    // Views were written under the view prefix, nothing under the dataset's.
    expect((await keys("data", "fanout-views/")).length).toBeGreaterThan(0);
    expect(await keys("data", "db/")).toEqual(before);
  });

  test("a refined batch with maxTasks 1 refines once in the merge; answers equal native's", async () => {
    const base = inProcessInvoker(runtime);
    const taskFactors: (number | undefined)[] = [];
    const merges: boolean[] = [];
    const invoker = {
      ...base,
      searchSegments: (task: Parameters<typeof base.searchSegments>[0]) => {
        taskFactors.push(task.refineFactor);
        return base.searchSegments(task);
      },
      merge: (input: Parameters<typeof base.merge>[0]) => {
        merges.push(input.refine !== undefined);
        return base.merge(input);
      },
    };
    const batch = queries(12, 8);
    const request = {
      dataset: ds.uri,
      k: 10,
      nprobes: 2,
      refineFactor: 3,
      maxTasks: 1,
    };
    const response = await vectorSearch({ ...request, query: batch }, { runtime, invoker });
    // On S3 a task refines one query at a time, a round trip each; the merge reads them at once.
    expect(response.plan.tasks).toBe(1);
    expect([taskFactors, merges]).toEqual([[undefined], [true]]);
    for (const [i, q] of batch.entries()) {
      const native = await nativeSearch(ds, q, 10, { nprobes: 2, refineFactor: 3 });
      const rows = response.results.filter((r) => r._query_id === i);
      expect(rows.map((r) => r._rowid)).toEqual(native.map((h) => h.rowid));
      expect(rows.map((r) => r._distance)).toEqual(native.map((h) => h.distance));
    }
    // One query keeps Lance's own refine in its task, as native does it.
    taskFactors.length = 0;
    merges.length = 0;
    await vectorSearch({ ...request, query: batch[0] ?? [] }, { runtime, invoker });
    expect([taskFactors, merges]).toEqual([[3], []]);
  });

  test("an IVF_RQ index: views read the dataset's index files (no copies), answers equal native", async () => {
    const rq = await makeDataset({
      db: { uri: "s3://data/db-rq", storageOptions: s3.storageOptions() },
      index: "ivfRq",
    });
    const rqRuntime = createRuntime({ ...runtime.config, allowedDatasets: ["s3://data/db-rq/"] });
    const before = await keys("data", "db-rq/");
    const [q0 = []] = queries(1, 6);
    const response = await vectorSearch(
      { dataset: rq.uri, query: q0, k: 10, nprobes: 2, strategy: "segments" },
      { runtime: rqRuntime },
    );
    expect(response.plan.tasks).toBe(rq.segments);
    const native = await nativeSearch(rq, q0, 10, { nprobes: 2 });
    expect(response.results.map((r) => r._rowid)).toEqual(native.map((h) => h.rowid));
    const copies = (await keys("data", "fanout-views/")).filter((k) => k.includes("/_indices/"));
    // Lance 8 (lancedb 0.31) opened IVF_RQ files under the view's own _indices/; Lance 12 follows
    // the clone's base path like every other index type.
    expect(copies).toEqual([]);
    expect(await keys("data", "db-rq/")).toEqual(before);
  });

  test("S3 answering 500s fails the query with a 5xx and no partial rows; it recovers after", async () => {
    const fresh = createRuntime(runtime.config);
    const request = {
      dataset: ds.uri,
      query: queries(1, 8)[0] ?? [],
      k: 5,
      strategy: "segments" as const,
    };
    s3.injectFault({ keys: /^\/data\/db\/items\.lance\//, status: 500 });
    try {
      const error = await vectorSearch({ ...request, timeoutMs: 20_000 }, { runtime: fresh }).then(
        () => undefined,
        (err: unknown) => err as { code: string; status: number },
      );
      expect(error?.status).toBeGreaterThanOrEqual(500);
      expect(["INTERNAL", "SEGMENT_SEARCH_FAILED", "TIMEOUT"]).toContain(error?.code);
    } finally {
      s3.injectFault(undefined);
    }
    const answer = await vectorSearch(request, { runtime: fresh });
    expect(answer.results).toHaveLength(5);
  });

  test("a prewarmed view searches with its index files unreadable; an unwarmed one cannot", async () => {
    const [q0 = [], q1 = []] = queries(2, 21);
    const request = {
      dataset: ds.uri,
      query: q0,
      k: 10,
      nprobes: 64, // every partition: nothing a previous query loaded is enough by chance
      strategy: "segments" as const,
      timeoutMs: 20_000,
    };
    const warm = createRuntime({ ...runtime.config, prewarm: "eager" });
    const unwarmed = createRuntime({ ...runtime.config, prewarm: "off" });
    const expected = await vectorSearch(request, { runtime: warm });
    await vectorSearch({ ...request, query: q1, nprobes: 1 }, { runtime: unwarmed });
    expect(warm.views.prewarmedBytes).toBeGreaterThan(0);
    expect(unwarmed.views.prewarmedBytes).toBe(0);
    s3.injectFault({ keys: /^\/data\/db\/items\.lance\/_indices\//, status: 500 });
    try {
      const again = await vectorSearch(request, { runtime: warm });
      expect(again.results).toEqual(expected.results);
      const error = await vectorSearch(request, { runtime: unwarmed }).then(
        () => undefined,
        (err: unknown) => err as { status: number },
      );
      expect(error?.status).toBeGreaterThanOrEqual(500);
    } finally {
      s3.injectFault(undefined);
    }
  });

  test("views of two widths stay prewarmed in a cache four times their index bytes", async () => {
    // lancedb weighs each IVF_PQ partition it caches with the codebook counted again: with its
    // own eviction at this bound it dropped partitions of both views and read them again.
    const manifest = await readManifest(runtime.objects, ds.uri, await ds.table.version());
    const indexBytes = manifest.segments.reduce((n, s) => n + (s.sizeBytes ?? 0), 0);
    expect(indexBytes).toBeGreaterThan(0);
    const warm = createRuntime({
      ...runtime.config,
      prewarm: "eager",
      indexCacheBytes: 4 * indexBytes,
    });
    const request = (maxTasks: number) => ({
      dataset: ds.uri,
      query: queries(1, 31)[0] ?? [],
      k: 10,
      nprobes: 64, // every partition
      strategy: "segments" as const,
      maxTasks,
      timeoutMs: 20_000,
    });
    const one = await vectorSearch(request(1), { runtime: warm });
    const four = await vectorSearch(request(4), { runtime: warm });
    expect([one.plan.tasks, four.plan.tasks]).toEqual([1, 4]);
    expect(warm.views.prewarmedBytes).toBe(2 * indexBytes);
    s3.injectFault({ keys: /^\/data\/db\/items\.lance\/_indices\//, status: 500 });
    try {
      expect((await vectorSearch(request(1), { runtime: warm })).results).toEqual(one.results);
      expect((await vectorSearch(request(4), { runtime: warm })).results).toEqual(four.results);
    } finally {
      s3.injectFault(undefined);
    }
  });

  test("a dataset outside the allow-list is refused before any read", async () => {
    await expect(
      vectorSearch(
        { dataset: "s3://data/other/items.lance", query: queries(1)[0] ?? [], k: 1 },
        { runtime },
      ),
    ).rejects.toMatchObject({ code: "FORBIDDEN_DATASET" });
  });

  test("a bucket that does not exist is DATASET_NOT_FOUND, without lancedb's debug dump", async () => {
    const open = createRuntime({ ...runtime.config, allowedDatasets: undefined });
    const error = await vectorSearch(
      { dataset: "s3://no-such-bucket/db/items.lance", query: queries(1)[0] ?? [], k: 1 },
      { runtime: open },
    ).catch((err: unknown) => err);
    expect(error).toMatchObject({
      code: "DATASET_NOT_FOUND",
      message: "dataset s3://no-such-bucket/db/items.lance not found",
    });
  });

  test("a missing S3 dataset is DATASET_NOT_FOUND", async () => {
    await expect(
      vectorSearch(
        { dataset: "s3://data/db/missing.lance", query: queries(1)[0] ?? [], k: 1 },
        { runtime },
      ),
    ).rejects.toMatchObject({ code: "DATASET_NOT_FOUND" });
  });
});

describe("datasets other writers made, on S3", () => {
  /** The corpus's trickiest: fragment reuse, overlapping legacy segments, an unlisted index, legacy counts. */
  const picked = corpus().filter((d) =>
    [
      "lance-rust-6.0.0-beta.3-fragment-reuse",
      "pylance-0.21.0-overlapping-segments",
      "pylance-0.13.0-legacy-hnsw-sq",
      "vectordb-2023-05-legacy-counts",
    ].includes(d.name),
  );

  test.each(picked)("$name answers like native lancedb from S3", async (dataset) => {
    const prefix = `corpus/${dataset.name}`;
    for (const file of await readdir(dataset.dir, { recursive: true, withFileTypes: true })) {
      if (!file.isFile()) continue;
      const path = join(file.parentPath, file.name);
      const key = `${prefix}/${dataset.file}/${path.slice(dataset.dir.length + 1)}`;
      await client.send(
        new PutObjectCommand({ Bucket: "data", Key: key, Body: await readFile(path) }),
      );
    }
    const uri = `s3://data/${prefix}/${dataset.file}`;
    const corpusRuntime = createRuntime({
      ...runtime.config,
      allowedDatasets: ["s3://data/corpus/"],
    });
    const db = await lancedb.connect(`s3://data/${prefix}`, {
      storageOptions: s3.storageOptions(),
    });
    const table = await db.openTable(dataset.table);
    const [column] = (await table.schema()).fields.filter((f) =>
      /FixedSizeList/.test(String(f.type)),
    );
    if (!column) throw new Error(`${dataset.name} has no vector column`);
    const rows = await table.query().select([column.name]).limit(2).toArray();
    const query = rows.map((r) => Array.from(r[column.name] as Iterable<number>, Number));
    const before = await keys("data", `${prefix}/`);
    const response = await vectorSearch(
      { dataset: uri, query, k: 10, nprobes: 64, strategy: "segments" },
      { runtime: corpusRuntime },
    );
    for (const [i, q] of query.entries()) {
      const native = await table.vectorSearch(q).limit(10).nprobes(64).withRowId().toArray();
      const ours = response.results.filter((r) => r._query_id === i);
      expect(ours.map((r) => [r._rowid, r._distance])).toEqual(
        native.map((r) => [String(r._rowid), Number(r._distance)]),
      );
    }
    expect(await keys("data", `${prefix}/`)).toEqual(before);
    table.close();
  });
});
