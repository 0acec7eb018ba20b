/**
 * Only gc deletes. On AWS segment-search's role has no `s3:DeleteObject`; here the local S3
 * answers every DELETE and DeleteObjects with 403 AccessDenied, as S3 would for that role, and
 * records each one. Searches of every strategy, the repair of a half-written and of a stale view,
 * the views of an IVF_RQ dataset and prepare must all succeed
 * without asking for a delete; gc fails while deletes are refused and removes dead views once
 * they are allowed.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  PutObjectCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import * as lancedb from "@lancedb/lancedb";
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "vitest";
import { type Fault, type LocalS3, startLocalS3 } from "../local/s3.js";
import { loadConfig } from "../shared/config.js";
import { gc } from "../shared/gc.js";
import { prepare } from "../shared/prepare.js";
import { STRATEGIES } from "../shared/request.js";
import { createRuntime, type Runtime } from "../shared/runtime.js";
import { vectorSearch } from "../shared/search.js";
import { type ViewSpec, viewFolder, viewName } from "../shared/views/identity.js";
import { versionViews } from "../shared/views/version-views.js";
import { type Dataset, makeDataset, nativeSearch, queries } from "./support/fixtures.js";

const NO_DELETES: Fault = {
  keys: /^\/data(\/|$)/,
  status: 403,
  methods: ["DELETE", "POST?delete"],
};
const [q0 = [], q1 = []] = queries(2, 31);
const YEAR = 365 * 24 * 3_600_000;

let s3: LocalS3;
let ds: Dataset;
let rq: Dataset;
let env: Record<string, string>;

/** A runtime with its own caches (a new process) on `viewPrefix`. */
function runtimeOn(viewPrefix = "views"): Runtime {
  return createRuntime(loadConfig({ ...env, LANCE_FANOUT_S3_VIEW_PREFIX: viewPrefix }));
}

beforeAll(async () => {
  s3 = await startLocalS3({
    directory: await mkdtemp(join(tmpdir(), "fanout-no-delete-")),
    buckets: ["data"],
  });
  const db = (name: string) => ({ uri: `s3://data/${name}`, storageOptions: s3.storageOptions() });
  ds = await makeDataset({ db: db("db"), rounds: [3000, 1500, 4000], deleteWhere: "id % 13 = 0" });
  rq = await makeDataset({ db: db("rq"), index: "ivfRq", rounds: [2000, 2000] });
  env = {
    ...(process.env as Record<string, string>),
    AWS_ENDPOINT_URL_S3: s3.endpoint,
    AWS_ACCESS_KEY_ID: s3.credentials.accessKeyId,
    AWS_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
    AWS_REGION: "us-east-1",
    LANCE_FANOUT_ALLOWED_DATASETS: "s3://data/db/,s3://data/rq/",
  };
  // lancedb re-opens a fresh clone without its storage options: keep that path on loopback too.
  Object.assign(process.env, { AWS_ENDPOINT_URL: s3.endpoint, AWS_ALLOW_HTTP: "true" });
  s3.injectFault(NO_DELETES);
});

afterAll(async () => {
  await s3?.stop();
});

/** Runs `work` with deletes allowed (a writer's commit, not lance-fanout's), then refuses them again. */
async function withDeletes<T>(work: () => Promise<T>): Promise<T> {
  s3.injectFault(undefined);
  try {
    return await work();
  } finally {
    s3.injectFault(NO_DELETES);
  }
}

async function expectNative(
  dataset: Dataset,
  results: readonly { _query_id: number; _rowid: string }[],
  queryVectors: number[][],
): Promise<void> {
  const version = await dataset.table.version();
  for (const [i, q] of queryVectors.entries()) {
    const native = await nativeSearch({ ...dataset, version }, q, 10, { nprobes: 2 });
    expect(results.filter((r) => r._query_id === i).map((r) => r._rowid)).toEqual(
      native.map((h) => h.rowid),
    );
  }
}

/** Single-segment index views of the dataset's latest version. */
async function segmentSpecs(runtime: Runtime): Promise<ViewSpec[]> {
  const location = runtime.resolveDataset(ds.uri);
  const read = await runtime.versions.read(location, await ds.table.version());
  const views = versionViews(read, location, {
    maxTasks: 16,
    coverages: ["require"],
    widths: "all",
  });
  return [...views.values()].filter((v) => v.segments.length === 1);
}

describe("with deletes refused, as segment-search's role is", () => {
  beforeEach(() => s3.injectFault(NO_DELETES));

  test("the fault refuses and records deletes, and nothing else", async () => {
    const client = new S3Client({
      endpoint: s3.endpoint,
      region: "us-east-1",
      forcePathStyle: true,
      credentials: s3.credentials,
      maxAttempts: 1,
    });
    const status = (p: Promise<unknown>) =>
      p.then(
        () => 200,
        (err: { $metadata?: { httpStatusCode?: number }; name?: string }) =>
          `${err.$metadata?.httpStatusCode} ${err.name}`,
      );
    try {
      const Bucket = "data";
      const Key = "probe/x";
      expect(await status(client.send(new PutObjectCommand({ Bucket, Key, Body: "x" })))).toBe(200);
      expect(await status(client.send(new DeleteObjectCommand({ Bucket, Key })))).toBe(
        "403 AccessDenied",
      );
      const many = new DeleteObjectsCommand({ Bucket, Delete: { Objects: [{ Key }] } });
      expect(await status(client.send(many))).toBe("403 AccessDenied");
      expect(await status(client.send(new GetObjectCommand({ Bucket, Key })))).toBe(200);
      expect(s3.faulted).toEqual([
        expect.stringMatching(/^DELETE \/data\/probe\/x/),
        expect.stringMatching(/^POST \/data\/?\?delete/),
      ]);
    } finally {
      client.destroy();
    }
  });

  test("a half-written view and a stale view are repaired without a delete", async () => {
    const runtime = runtimeOn("repaired");
    const [half, stale] = await segmentSpecs(runtime);
    if (!half || !stale) throw new Error("expected two single-segment views");
    // Half-written: cloned, never restricted (its creator stopped midway).
    const folder = `s3://data/repaired/${viewFolder(runtime.resolveDataset(ds.uri))}`;
    const views = await lancedb.connect(folder, { storageOptions: s3.storageOptions() });
    await views
      .cloneTable(viewName(half), ds.uri, { sourceVersion: half.version, isShallow: true })
      // lancedb re-opens a fresh S3 clone without its storage options; the clone is there.
      .catch(() => undefined);
    // Stale: rows deleted from it by something else after it was built.
    const built = await runtime.views.open(stale);
    await built.table.delete("id % 5 = 0");
    const fresh = runtimeOn("repaired");
    const total = await ds.table.countRows();
    for (const spec of [half, stale]) {
      const view = await fresh.views.open(spec);
      expect(view.created).toBe(false);
      expect(view.searchedSegments).toBe(1);
      const rows = spec.fragments.length;
      expect(rows).toBeGreaterThan(0);
      expect(await view.table.countRows()).toBeLessThan(total);
    }
    const answer = await vectorSearch(
      { dataset: ds.uri, query: [q0, q1], k: 10, nprobes: 2, strategy: "segments" },
      { runtime: fresh },
    );
    await expectNative(ds, answer.results, [q0, q1]);
    expect(s3.faulted).toEqual([]);
  });

  test("two processes creating the same views at once succeed; lancedb's cleanup of a lost commit's transaction file is refused and harmless", async () => {
    const specs = (await segmentSpecs(runtimeOn("raced"))).slice(0, 3);
    const [a, b] = [runtimeOn("raced"), runtimeOn("raced")];
    const views = await Promise.all(
      specs.flatMap((spec) => [a.views.open(spec), b.views.open(spec)]),
    );
    for (const view of views) expect(view.searchedSegments).toBe(1);
    expect(views.filter((v) => v.created).length).toBeGreaterThanOrEqual(specs.length);
    // Lance deletes the transaction file of a commit that lost the race (and ignores a refusal):
    // nothing else. The orphan file (a few hundred bytes) goes with its view at gc.
    for (const request of s3.faulted) {
      expect(request).toMatch(
        /^POST \/data\/?\?delete=? raced\/db\/items\.lance\/view-[0-9a-f]{32}\.lance\/_transactions\/\d+-[0-9a-f-]{36}\.txn$/,
      );
    }
    const answer = await vectorSearch(
      { dataset: ds.uri, query: [q0, q1], k: 10, nprobes: 2, strategy: "segments" },
      { runtime: runtimeOn("raced") },
    );
    await expectNative(ds, answer.results, [q0, q1]);
  });

  test.each(STRATEGIES)("a %s search builds its views without a delete", async (strategy) => {
    const answer = await vectorSearch(
      { dataset: ds.uri, query: [q0, q1], k: 10, nprobes: 2, strategy, maxTasks: 4 },
      { runtime: runtimeOn() },
    );
    await expectNative(ds, answer.results, [q0, q1]);
    expect(s3.faulted).toEqual([]);
  });

  test("an IVF_RQ dataset's views are built without a delete", async () => {
    const answer = await vectorSearch(
      { dataset: rq.uri, query: [q0], k: 10, nprobes: 2, strategy: "segments" },
      { runtime: runtimeOn() },
    );
    expect(answer.plan.tasks).toBe(rq.segments);
    await expectNative(rq, answer.results, [q0]);
    expect(s3.faulted).toEqual([]);
  });

  test("prepare builds a new version's views without a delete", async () => {
    await withDeletes(() => ds.table.delete("id = 7 OR id = 4501"));
    const report = await prepare({ dataset: ds.uri }, { runtime: runtimeOn() });
    expect(report.version).toBe(await ds.table.version());
    expect(report.created).toBeGreaterThan(0);
    expect(s3.faulted).toEqual([]);
  });
});

describe("gc", () => {
  test("fails while deletes are refused, then removes the dead views; the latest version's stay", async () => {
    const runtime = runtimeOn();
    const options = { root: "s3://data", now: new Date(Date.now() + YEAR), keepVersions: 1 };
    await expect(gc(options, { runtime })).rejects.toMatchObject({ name: "AccessDenied" });
    expect(s3.faulted.length).toBeGreaterThan(0);

    const reports = await withDeletes(() => gc(options, { runtime }));
    const report = reports.find((r) => r.dataset === ds.uri);
    expect(reports.map((r) => r.dataset).sort()).toEqual([ds.uri, rq.uri]);
    expect(report?.versions).toEqual([await ds.table.version()]);
    expect(report?.removed.length).toBeGreaterThan(0);
    expect(report?.kept).toBeGreaterThan(0);
    // The latest version's views survived: preparing it again builds none, and it answers.
    const fresh = runtimeOn();
    expect((await prepare({ dataset: ds.uri }, { runtime: fresh })).created).toBe(0);
    const answer = await vectorSearch(
      { dataset: ds.uri, query: [q0, q1], k: 10, nprobes: 2, strategy: "segments", maxTasks: 4 },
      { runtime: fresh },
    );
    await expectNative(ds, answer.results, [q0, q1]);
    expect(s3.faulted).toEqual([]);
  });
});
