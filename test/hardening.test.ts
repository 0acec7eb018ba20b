/**
 * Faults and races, in process: damaged views, versions cleaned up mid-query, a writer churning
 * while queries run, and secrets kept out of errors and logs.
 */
import { cp, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as lancedb from "@lancedb/lancedb";
import { afterAll, describe, expect, test, vi } from "vitest";
import { handler as segmentSearch } from "../functions/segment-search/handler.js";
import { type LocalS3, startLocalS3 } from "../local/s3.js";
import { loadConfig } from "../shared/config.js";
import { FanoutError, redact } from "../shared/errors.js";
import { inProcessInvoker } from "../shared/invoker.js";
import type { Manifest } from "../shared/manifest.js";
import { readManifest } from "../shared/manifest-store.js";
import { createObjectStore } from "../shared/objects.js";
import { createRuntime } from "../shared/runtime.js";
import { planSearch, type SearchResponse, vectorSearch } from "../shared/search.js";
import { corpus } from "./support/corpus.js";
import { DIMENSION, makeDataset, nativeSearch, queries, testRuntime } from "./support/fixtures.js";

const [q0 = [], q1 = []] = queries(2, 77);
const ids = (r: SearchResponse) => r.results.map((x) => x._rowid);
let s3: LocalS3 | undefined;

afterAll(async () => {
  await s3?.stop();
});

describe("views", () => {
  test("a damaged view is detected and rebuilt; answers stay right", async () => {
    const ds = await makeDataset({ rounds: [4000, 2000] });
    const a = await testRuntime();
    const request = {
      dataset: ds.uri,
      query: q0,
      k: 10,
      nprobes: 2,
      strategy: "segments" as const,
    };
    const before = await vectorSearch(request, { runtime: a });
    // Damage every view: delete all rows of their first fragment.
    const views = await lancedb.connect(a.config.localViewRoot);
    for (const name of await views.tableNames()) {
      const view = await views.openTable(name);
      const first = (await view.query().withRowId().select(["_rowaddr"]).limit(1).toArray())[0];
      const fragment = BigInt(first._rowaddr) >> 32n;
      await view.delete(`_rowaddr >= ${fragment << 32n} AND _rowaddr < ${(fragment + 1n) << 32n}`);
    }
    const b = createRuntime(
      loadConfig({ ...process.env, LANCE_FANOUT_VIEW_ROOT: a.config.localViewRoot }),
    );
    const after = await vectorSearch(request, { runtime: b });
    expect(ids(after)).toEqual(ids(before));
    for (const g of after.plan.groups) expect(g.searchedSegments).toBe(g.segments.length);
  });
});

describe("versions", () => {
  test("a pinned version cleaned up during the query is VERSION_NOT_FOUND, not a crash", async () => {
    const ds = await makeDataset({ rounds: [4000, 2000] });
    const pinned = ds.version;
    await ds.table.add([
      { id: -1, category: 0, "Cat Name": "x", vector: Array(DIMENSION).fill(0.5) },
    ]);
    const runtime = await testRuntime();
    const base = inProcessInvoker(runtime);
    let cleaned: Promise<unknown> | undefined;
    const cleaning = {
      ...base,
      searchSegments: async (task: Parameters<typeof base.searchSegments>[0]) => {
        cleaned ??= ds.table.optimize({ cleanupOlderThan: new Date(), deleteUnverified: true });
        await cleaned;
        return base.searchSegments(task);
      },
    };
    await expect(
      vectorSearch(
        { dataset: ds.uri, query: q0, k: 5, version: pinned },
        { runtime, invoker: cleaning },
      ),
    ).rejects.toMatchObject({ code: "VERSION_NOT_FOUND" });
    await expect(
      vectorSearch({ dataset: ds.uri, query: q0, k: 5 }, { runtime }),
    ).resolves.toBeDefined();
  });

  test.each([
    ["an index file", (m: Manifest) => `_indices/${m.segments[0]?.uuid}/index.idx`],
    ["a data file", (m: Manifest) => `data/${m.fragments[0]?.files[0]}`],
  ])(
    "%s missing from a live version is INTERNAL naming it, not VERSION_NOT_FOUND",
    async (_, pick) => {
      const ds = await makeDataset({ rounds: [4000, 2000] });
      const victim = pick(
        await readManifest(createObjectStore({ region: "us-east-1" }), ds.uri, ds.version),
      );
      await rm(join(ds.uri, victim));
      const runtime = await testRuntime();
      const error = await vectorSearch(
        {
          dataset: ds.uri,
          query: q0,
          k: 5,
          nprobes: 4,
          filter: "category > 2",
          strategy: "single",
        },
        { runtime },
      ).catch((err: unknown) => err);
      expect(error).toMatchObject({ code: "INTERNAL" });
      expect((error as Error).message).toContain(victim);
    },
  );

  test("a data file missing where Lance must count a legacy fragment's rows is INTERNAL naming it, in the plan too", async () => {
    const legacy = corpus().find(
      (d) => d.source.lance === null && d.name.startsWith("vectordb-2023"),
    );
    if (!legacy) throw new Error("the corpus lost its legacy-count dataset");
    const dir = await mkdtemp(join(tmpdir(), "fanout-legacy-"));
    const uri = join(dir, legacy.file);
    await cp(legacy.dir, uri, { recursive: true });
    const [file] = await readdir(join(uri, "data"));
    await rm(join(uri, "data", file as string));
    const runtime = await testRuntime();
    const other = await testRuntime();
    for (const attempt of [
      () => planSearch({ dataset: uri, query: [0.5, 0.5], k: 2 }, { runtime }),
      () => vectorSearch({ dataset: uri, query: [0.5, 0.5], k: 2 }, { runtime: other }),
    ]) {
      const error = await attempt().catch((err: unknown) => err);
      expect(error).toBeInstanceOf(FanoutError);
      expect(error).toMatchObject({ code: "INTERNAL" });
      expect((error as Error).message).toContain(file);
    }
  });

  test("while a writer appends, deletes, compacts and cleans up, every answer matches native at its version", async () => {
    const ds = await makeDataset({ rounds: [4000, 2000] });
    const runtime = await testRuntime();
    let writing = true;
    const writer = (async () => {
      for (let i = 0; i < 4; i++) {
        await ds.table.add(
          Array.from({ length: 1500 }, (_, j) => ({
            id: 50_000 + i * 1500 + j,
            category: j % 10,
            "Cat Name": "w",
            vector: Array.from({ length: DIMENSION }, (_, d) => ((j * 13 + d * 5 + i) % 101) / 101),
          })),
        );
        await ds.table.delete(`id % 17 = ${i}`);
        await ds.table.optimize({ cleanupOlderThan: new Date(Date.now() - 2_000) });
      }
      writing = false;
    })();
    const errors: string[] = [];
    let checked = 0;
    while (writing) {
      try {
        // One index group: the same candidate selection as native, so answers must be equal.
        const answer = await vectorSearch(
          {
            dataset: ds.uri,
            query: q1,
            k: 10,
            nprobes: 4,
            coverage: "fallback",
            strategy: "single",
          },
          { runtime },
        );
        // Compared at once, before the writer's cleanup (2 s) can remove that version.
        const native = await nativeSearch(ds, q1, 10, { version: answer.version, nprobes: 4 });
        expect(ids(answer)).toEqual(native.map((h) => h.rowid));
        checked++;
      } catch (err) {
        // A version may be cleaned up under a query; that must say so, nothing else.
        const code = (err as { code?: string }).code;
        if (code === undefined) throw err;
        errors.push(code);
      }
    }
    await writer;
    for (const code of errors) expect(code).toBe("VERSION_NOT_FOUND");
    expect(checked).toBeGreaterThan(0);
  });
});

describe("secrets", () => {
  test("redact removes secret values and secret-shaped fields", () => {
    const env = { AWS_SECRET_ACCESS_KEY: "wJalrXUtnFEMI/K7MDENG" };
    expect(redact("failed with wJalrXUtnFEMI/K7MDENG inside", env)).toBe(
      "failed with [redacted] inside",
    );
    expect(redact('{"aws_secret_access_key":"abc123","x":1}', {})).toBe(
      '{"aws_secret_access_key":"[redacted]","x":1}',
    );
    expect(redact("token=abc signature: xyz", {})).toBe("token=[redacted] signature: [redacted]");
  });

  test("a storage failure with a wrong secret shows the secret neither in the error nor in the logs", async () => {
    s3 = await startLocalS3({
      directory: await mkdtemp(join(tmpdir(), "fanout-sec-")),
      buckets: ["data"],
    });
    const ds = await makeDataset({
      db: { uri: "s3://data/db", storageOptions: s3.storageOptions() },
      rounds: [4000],
    });
    const secret = "TOPSECRET-9f8e7d6c5b4a";
    const env = {
      AWS_ENDPOINT_URL_S3: s3.endpoint,
      AWS_ACCESS_KEY_ID: "S3RVER",
      AWS_SECRET_ACCESS_KEY: secret,
      LANCE_FANOUT_S3_VIEW_PREFIX: "views",
    };
    const previous = { ...process.env };
    Object.assign(process.env, env, {
      AWS_ENDPOINT_URL: s3.endpoint,
      AWS_ALLOW_HTTP: "true",
      LANCE_FANOUT_LOG: "on",
    });
    const write = vi.spyOn(process.stdout, "write").mockImplementation(() => true);
    try {
      const runtime = createRuntime(loadConfig({ ...process.env, ...env }));
      const planned = await vectorSearch(
        { dataset: ds.uri, query: q0, k: 5, explain: true },
        { runtime },
      ).catch((err) => err);
      const task = await segmentSearch({ not: "a task" });
      const bodies = [JSON.stringify(planned?.toBody?.() ?? planned), JSON.stringify(task)];
      const logs = write.mock.calls.map((c) => String(c[0])).join("\n");
      for (const text of [...bodies, logs]) expect(text).not.toContain(secret);
    } finally {
      write.mockRestore();
      process.env = previous;
    }
  });
});
