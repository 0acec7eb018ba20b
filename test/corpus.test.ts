/**
 * The compatibility corpus: real datasets other Lance writers made (test/fixtures/writers/, each
 * with its source.json). Every dataset is read as Lance reads it and searched like native
 * lancedb: the same index, metric and segments, the same coverage counts, and every strategy
 * at several widths answers like native, with single queries and a matrix, with and without a
 * filter, probing every partition. Where native lancedb cannot search a dataset, the service
 * refuses it with a 4xx naming why. Nothing here names a dataset: a folder added to the corpus
 * is tested as it is.
 */
import { cp, mkdtemp, readdir, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as lancedb from "@lancedb/lancedb";
import type { Schema } from "apache-arrow";
import { beforeAll, describe, expect, test } from "vitest";
import { FanoutError } from "../shared/errors.js";
import { STRATEGIES } from "../shared/request.js";
import type { Runtime } from "../shared/runtime.js";
import { planSearch, vectorSearch } from "../shared/search.js";
import { type CorpusDataset, corpus } from "./support/corpus.js";
import { random, testRuntime } from "./support/fixtures.js";

/** Every partition of these small indices (Lance caps nprobes at the partition count). */
const EVERY_PARTITION = 4096;
const K = 10;
const WIDTHS = [1, 2, 8];

interface Native {
  readonly table: lancedb.Table;
  readonly schema: Schema | undefined;
  readonly rows: number;
  readonly indices: readonly lancedb.IndexConfig[];
}

/** What native lancedb's scanner plans for a vector search of `column`: index, metric, deltas. */
interface ScannerPlan {
  readonly name: string;
  readonly metric: string;
  readonly deltas: number;
}

async function scannerPlan(table: lancedb.Table, column: string, dimension: number) {
  const plan = await table
    .vectorSearch(new Float32Array(dimension).fill(0.5))
    .column(column)
    .explainPlan();
  const ann = /ANNSubIndex: name=(.*), k=\d+, deltas=(\d+), metric=(\w+)/.exec(plan);
  if (!ann) return undefined;
  return {
    name: ann[1],
    deltas: Number(ann[2]),
    metric: ann[3]?.toLowerCase(),
  } as ScannerPlan;
}

/** Top-level float vector columns and their dimensions, from lancedb's schema. */
function vectorColumns(schema: Schema): { name: string; dimension: number }[] {
  return schema.fields.flatMap((f) => {
    const type = f.type as { listSize?: number; children?: { type: { typeId: number } }[] };
    const isFloatList =
      f.type.toString().startsWith("FixedSizeList") &&
      /Float/.test(String(type.children?.[0]?.type));
    return isFloatList && type.listSize ? [{ name: f.name, dimension: type.listSize }] : [];
  });
}

/** A numeric column to filter on, and a bound that keeps about half the sampled rows. */
async function filterOf(table: lancedb.Table, schema: Schema): Promise<string | undefined> {
  const field = schema.fields.find((f) => /^(Int|Uint|Float)/.test(f.type.toString()));
  if (!field) return undefined;
  const rows = await table.query().select([field.name]).limit(64).toArray();
  const values = rows
    .map((r) => Number(r[field.name]))
    .filter(Number.isFinite)
    .sort((a, b) => a - b);
  const median = values[Math.floor(values.length / 2)];
  return median === undefined ? undefined : `\`${field.name}\` >= ${median}`;
}

/** Query vectors: two rows of the dataset (self-hits) and a random one. */
async function queriesOf(table: lancedb.Table, column: string, dimension: number) {
  const rows = await table.query().select([column]).limit(2).toArray();
  const next = random(11);
  return [
    ...rows.map((r) => Array.from(r[column] as Iterable<number>, Number)),
    Array.from({ length: dimension }, () => next()),
  ];
}

async function nativeTopK(
  table: lancedb.Table,
  column: string,
  query: number[],
  filter: string | undefined,
): Promise<{ rowid: string; distance: number }[]> {
  let q = table.vectorSearch(query).column(column).limit(K).nprobes(EVERY_PARTITION).withRowId();
  if (filter) q = q.where(filter);
  const rows = await q.select(["_distance"]).toArray();
  return rows.map((r) => ({ rowid: String(r._rowid), distance: Number(r._distance) }));
}

async function expectRefused(promise: Promise<unknown>, status: (s: number) => boolean) {
  const error = await promise.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(error).toBeInstanceOf(FanoutError);
  expect(status((error as FanoutError).status), (error as Error).message).toBe(true);
  return error as FanoutError;
}

describe.each(corpus())("$name ($source.writer)", (dataset: CorpusDataset) => {
  let uri: string;
  let native: Native;
  let runtime: Runtime;

  beforeAll(async () => {
    // A copy: nothing a test does (views, lancedb's own migrations) may change the fixture.
    const dir = await mkdtemp(join(tmpdir(), "fanout-corpus-"));
    await cp(dataset.dir, join(dir, dataset.file), { recursive: true });
    uri = join(dir, dataset.file);
    const table = await (await lancedb.connect(dir)).openTable(dataset.table);
    native = {
      table,
      // JS Arrow cannot read every type a writer used (LargeList): then the schema is unknown.
      schema: await table.schema().catch(() => undefined),
      rows: await table.countRows(),
      // lancedb cannot describe an index written before Lance 0.8.
      indices: await table.listIndices().catch(() => []),
    };
    runtime = await testRuntime();
  });

  test("every fragment's live rows are the rows Lance counts in it", async () => {
    const location = runtime.resolveDataset(uri);
    const version = await native.table.version();
    const read = await runtime.versions.read(location, version);
    for (const fragment of read.fragments) {
      const from = BigInt(fragment.id) << 32n;
      const to = BigInt(fragment.id + 1) << 32n;
      const rows = await native.table.countRows(`_rowaddr >= ${from} AND _rowaddr < ${to}`);
      expect(fragment.liveRows, `fragment ${fragment.id}`).toBe(rows);
    }
    expect(read.fragments.reduce((sum, f) => sum + f.liveRows, 0)).toBe(native.rows);
    expect(read.writer).toBe(
      dataset.source.lance === null ? null : `lance ${dataset.source.lance}`,
    );
  });

  test("each vector column is planned on the index Lance searches, with Lance's counts", async () => {
    const columns = native.schema ? vectorColumns(native.schema) : [];
    if (columns.length === 0) {
      const refused = await expectRefused(
        planSearch({ dataset: uri, query: [0.5, 0.5], k: K }, { runtime }),
        (s) => s === 400,
      );
      expect(refused.message).toMatch(/no float vector column/);
      return;
    }
    for (const { name: column, dimension } of columns) {
      const request = { dataset: uri, query: new Array(dimension).fill(0.5), k: K, column };
      const lance = await scannerPlan(native.table, column, dimension).catch((err: Error) => err);
      if (lance instanceof Error) {
        await expectRefused(planSearch(request, { runtime }), (s) => s >= 400 && s < 500);
        continue;
      }
      const listed = native.indices.find((i) => i.name === lance?.name);
      const plan = await planSearch(request, { runtime });
      expect(plan.writer).toBe(
        dataset.source.lance === null ? null : `lance ${dataset.source.lance}`,
      );
      expect(plan.index).toMatchObject({
        name: lance?.name ?? "",
        column,
        type: listed?.indexType ?? null,
        segmentCount: lance?.deltas ?? 0,
      });
      if (lance) expect(plan.index.metric).toBe(lance.metric);
      const { indexed, unindexed } = plan.index.rows;
      expect(indexed + unindexed).toBe(native.rows);
      if (listed) expect(unindexed).toBe(listed.numUnindexedRows);
    }
  });

  const { writerAnswers } = dataset;
  if (writerAnswers) {
    test("native answers as the writer itself answered", async () => {
      const { version, k, nprobes, queries, answers } = writerAnswers;
      await native.table.checkout(version);
      const column = native.schema ? vectorColumns(native.schema)[0]?.name : undefined;
      for (const [i, query] of queries.entries()) {
        let q = native.table.vectorSearch(query).limit(k).nprobes(nprobes).withRowId();
        if (column) q = q.column(column);
        const rows = await q.select(["_distance"]).toArray();
        expect(rows.map((r) => String(r._rowid))).toEqual(answers[i]);
      }
      await native.table.checkoutLatest();
    });
  }

  test("every strategy at every width answers like native, single and batched, filtered or not", async () => {
    const columns = native.schema ? vectorColumns(native.schema) : [];
    const filter = native.schema ? await filterOf(native.table, native.schema) : undefined;
    for (const { name: column, dimension } of columns) {
      const queries = await queriesOf(native.table, column, dimension);
      for (const where of [undefined, filter]) {
        const expected = await Promise.all(
          queries.map((q) => nativeTopK(native.table, column, q, where)),
        ).catch((err: Error) => err);
        if (expected instanceof Error) {
          const request = { dataset: uri, column, k: K, query: queries, filter: where };
          await expectRefused(vectorSearch(request, { runtime }), (s) => s >= 400 && s < 500);
          continue;
        }
        for (const strategy of STRATEGIES) {
          for (const maxTasks of WIDTHS) {
            const request = {
              dataset: uri,
              column,
              k: K,
              nprobes: EVERY_PARTITION,
              strategy,
              maxTasks,
              ...(where ? { filter: where } : {}),
            };
            const label = `${column} ${strategy} maxTasks=${maxTasks} filter=${where ?? "none"}`;
            const single = await vectorSearch(
              { ...request, query: queries[0] as number[] },
              { runtime },
            );
            expect(hits(single.results, 0), `${label} single`).toEqual(expected[0]);
            const batch = await vectorSearch({ ...request, query: queries }, { runtime });
            for (const [i, answer] of expected.entries()) {
              expect(hits(batch.results, i), `${label} query ${i} of a batch`).toEqual(answer);
            }
          }
        }
      }
    }
  });

  test("select columns and a refine answer like native, through the merge", async () => {
    const columns = native.schema ? vectorColumns(native.schema) : [];
    const select = (native.schema?.fields ?? [])
      .filter((f) => !columns.some((c) => c.name === f.name))
      .map((f) => f.name);
    for (const { name: column, dimension } of columns) {
      const queries = await queriesOf(native.table, column, dimension);
      const expected = await Promise.all(
        queries.map(async (query) => {
          const rows = await native.table
            .vectorSearch(query)
            .column(column)
            .limit(K)
            .nprobes(EVERY_PARTITION)
            .refineFactor(2)
            .withRowId()
            .select(["_distance", ...select])
            .toArray();
          return rows.map((r) => [
            String(r._rowid),
            Number(r._distance),
            ...select.map((c) => text(r[c])),
          ]);
        }),
      ).catch((err: Error) => err);
      if (expected instanceof Error) continue; // refused: the test above checks the 4xx
      const request = { dataset: uri, column, k: K, nprobes: EVERY_PARTITION, refineFactor: 2 };
      const response = await vectorSearch(
        { ...request, query: queries, select, strategy: "segments", maxTasks: 8 },
        { runtime },
      );
      for (const [i, answer] of expected.entries()) {
        const rows = response.results.filter((r) => r._query_id === i);
        expect(rows.map((r) => [r._rowid, r._distance, ...select.map((c) => text(r[c]))])).toEqual(
          answer,
        );
      }
    }
  });
});

/** A value as text, whatever JSON or Arrow shape carried it (64-bit integers, floats, strings). */
function text(value: unknown): string {
  return value === null || value === undefined ? "null" : String(value);
}

function hits(
  results: readonly { _query_id: number; _rowid: string; _distance: number }[],
  query: number,
) {
  return results
    .filter((r) => r._query_id === query)
    .map((r) => ({ rowid: r._rowid, distance: r._distance }));
}

/** Appends protobuf bytes to a manifest file's message (a later scalar wins in protobuf). */
function patchManifest(bytes: Uint8Array, extra: readonly number[]): Uint8Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const pos = Number(view.getBigInt64(bytes.length - 16, true));
  const length = view.getUint32(pos, true);
  const out = new Uint8Array(bytes.length + extra.length);
  out.set(bytes.subarray(0, pos));
  new DataView(out.buffer).setUint32(pos, length + extra.length, true);
  out.set(bytes.subarray(pos + 4, pos + 4 + length), pos + 4);
  out.set(extra, pos + 4 + length);
  out.set(bytes.subarray(bytes.length - 16), pos + 4 + length + extra.length);
  return out;
}

test("docs/compatibility.md lists every dataset of the corpus", async () => {
  const doc = await readFile(join(import.meta.dirname, "..", "docs", "compatibility.md"), "utf8");
  const missing = corpus().filter((d) => !doc.includes(`\`${d.name}\``));
  expect(missing.map((d) => d.name)).toEqual([]);
});

describe("what lance-fanout cannot read is refused with a 4xx naming the writer", () => {
  test("a version written with a reader feature flag Lance does not know (a newer writer)", async () => {
    const [dataset] = corpus().filter((d) => d.source.lance === "8.0.0");
    if (!dataset) throw new Error("the corpus lost its lancedb 0.31 dataset");
    const dir = await mkdtemp(join(tmpdir(), "fanout-flags-"));
    const uri = join(dir, dataset.file);
    await cp(dataset.dir, uri, { recursive: true });
    const versions = join(uri, "_versions");
    const [latest] = (await readdir(versions)).filter((f) => f.endsWith(".manifest")).sort();
    const file = join(versions, latest as string);
    // Field 9 (reader_feature_flags) = 64: data overlay files, which Lance 12 cannot read.
    await writeFile(file, patchManifest(new Uint8Array(await readFile(file)), [0x48, 64]));
    const runtime = await testRuntime();
    const request = { dataset: uri, query: new Array(16).fill(0.5), k: K };
    // One at a time: a refusal no one awaits yet would be an unhandled rejection.
    for (const attempt of [
      () => planSearch(request, { runtime }),
      () => vectorSearch(request, { runtime }),
      () => vectorSearch({ ...request, version: dataset.writerAnswers?.version }, { runtime }),
    ]) {
      const error = await expectRefused(attempt(), (s) => s === 422);
      expect(error.code).toBe("UNSUPPORTED_DATASET");
      expect(error.message).toMatch(/written by lance 8\.0\.0 .*64 \(data overlay files\)/);
    }
  });
});
