/**
 * Arrow answers carry the dataset's own types: over the HTTP API of the local stack (content
 * negotiation included) and from `resultsToArrow` as a library call, compared with the schema
 * and values native lancedb reads.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  Field,
  makeData,
  RecordBatch,
  Schema,
  Struct,
  Table,
  TimestampMicrosecond,
  tableFromIPC,
} from "apache-arrow";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { type Stack, startStack } from "../local/stack.js";
import { ARROW_STREAM, resultsToArrow } from "../shared/arrow.js";
import { toJsonValue } from "../shared/rows.js";
import { type SearchResponse, vectorSearch } from "../shared/search.js";
import type { ResultRow } from "../shared/tasks.js";
import {
  type Dataset,
  makeTypedDataset,
  queries,
  TYPED_COLUMNS,
  testRuntime,
} from "./support/fixtures.js";

const SELECT = ["vector", ...TYPED_COLUMNS];

let stack: Stack;
let ds: Dataset;
/** The dataset's own fields, as native lancedb reports them. */
let nativeFields: Map<string, FieldShape>;

beforeAll(async () => {
  stack = await startStack({
    dataDir: await mkdtemp(join(tmpdir(), "fanout-arrow-")),
    apiPort: 0,
    s3Port: 0,
    lambdaPort: 0,
    concurrency: { planner: 2, segmentSearch: 2, merge: 1 },
  });
  Object.assign(process.env, stack.env);
  ds = await makeTypedDataset({
    db: { uri: `s3://${stack.bucket}/db`, storageOptions: stack.s3.storageOptions() },
  });
  const schema = await ds.table.schema();
  nativeFields = new Map(schema.fields.map((f) => [f.name, shape(f)]));
});

afterAll(async () => {
  await stack?.stop();
});

const request = (extra: Record<string, unknown> = {}) => ({
  dataset: ds.uri,
  version: ds.version,
  query: queries(3, 5),
  k: 6,
  nprobes: 2,
  select: SELECT,
  ...extra,
});

async function post(body: unknown, accept?: string) {
  const res = await fetch(`${stack.api.url}/search`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(accept ? { accept } : {}) },
    body: JSON.stringify(body),
  });
  return {
    status: res.status,
    type: res.headers.get("content-type"),
    bytes: new Uint8Array(await res.arrayBuffer()),
  };
}

interface FieldShape {
  readonly name: string;
  readonly type: string;
  readonly nullable: boolean;
  readonly children: readonly FieldShape[];
}

/** A field's name, type, nullability and nested fields, comparable across Arrow instances. */
function shape(field: Field): FieldShape {
  return {
    name: field.name,
    type: String(field.type),
    nullable: field.nullable,
    children: (field.type.children ?? []).map(shape),
  };
}

/** The expected schema: the result columns, then each `select` column as the dataset has it. */
function expectDatasetTypes(table: Table, select: readonly string[]): void {
  const fields = table.schema.fields.map(shape);
  expect(fields.slice(0, 3).map((f) => `${f.name}:${f.type}`)).toEqual([
    "_query_id:Int32",
    "_distance:Float32",
    "_rowid:Uint64",
  ]);
  expect(fields.slice(3)).toEqual(select.map((c) => nativeFields.get(c)));
}

/** The Arrow rows as the JSON answer writes them (bigints as strings, vectors as arrays). */
function asJson(table: Table): ResultRow[] {
  return table.toArray().map((row) => {
    const values = Object.fromEntries(
      table.schema.fields.map((f) => [f.name, toJsonValue(row[f.name])]),
    );
    return { ...values, _distance: row._distance } as ResultRow;
  });
}

/** Native lancedb's raw microseconds of `at`, by id: what the Arrow answer must carry exactly. */
async function nativeMicros(): Promise<Map<bigint, bigint | null>> {
  const native = await ds.table.query().select(["id", "at"]).toArrow();
  const ids = native.getChild("id")?.toArray() as BigInt64Array;
  const at = native.getChild("at");
  const values = at?.data.flatMap((d) => [...(d.values as BigInt64Array)]) ?? [];
  return new Map(Array.from(ids, (id, i) => [id, at?.isValid(i) ? (values[i] ?? null) : null]));
}

function expectExactMicros(table: Table, native: Map<bigint, bigint | null>): void {
  const ids = table.getChild("id")?.toArray() as BigInt64Array;
  const at = table.getChild("at");
  const raw = at?.data.flatMap((d) => [...(d.values as BigInt64Array)]) ?? [];
  ids.forEach((id, i) => {
    expect(at?.isValid(i) ? raw[i] : null).toBe(native.get(id));
  });
}

describe("Arrow over the HTTP API", () => {
  test("each select column has the dataset's own type and the JSON answer's values", async () => {
    const json = await post(request());
    expect(json.status).toBe(200);
    const { results } = JSON.parse(Buffer.from(json.bytes).toString("utf8")) as SearchResponse;
    expect(results).toHaveLength(18);
    const res = await post(request(), ARROW_STREAM);
    expect(res.status).toBe(200);
    expect(res.type).toBe(ARROW_STREAM);
    const table = tableFromIPC(res.bytes);
    expectDatasetTypes(table, SELECT);
    expect(asJson(table)).toEqual(
      results.map((r) => ({ ...r, _distance: Math.fround(r._distance) })),
    );
    expect(typeof table.get(0)?.id).toBe("bigint");
    expectExactMicros(table, await nativeMicros());
  });

  test("an empty result still carries the dataset's types", async () => {
    const res = await post(request({ filter: "id < 0" }), ARROW_STREAM);
    expect(res.status).toBe(200);
    const table = tableFromIPC(res.bytes);
    expect(table.numRows).toBe(0);
    expectDatasetTypes(table, SELECT);
  });

  test("select order is the column order", async () => {
    const select = ["counts", "id", "vector"];
    const res = await post(request({ select }), ARROW_STREAM);
    expectDatasetTypes(tableFromIPC(res.bytes), select);
  });

  test.each([
    ["application/json, application/vnd.apache.arrow.stream;q=0.1", "application/json"],
    ["application/vnd.apache.arrow.stream, application/json;q=0.5", ARROW_STREAM],
    ["*/*", "application/json"],
    ["application/*", "application/json"],
    ["application/json;q=0, */*;q=0.2", ARROW_STREAM],
    ["text/html", "application/json"],
  ])("Accept %s answers %s", async (accept, type) => {
    const res = await post(request({ k: 1, select: ["id"] }), accept);
    expect(res.status).toBe(200);
    expect(res.type).toBe(type);
  });

  test("without Accept the answer is JSON", async () => {
    const res = await post(request({ k: 1 }));
    expect(res.type).toBe("application/json");
  });
});

describe("resultsToArrow as a library call", () => {
  test("with the dataset's schema from lancedb, select columns keep the dataset's types", async () => {
    const runtime = await testRuntime();
    const { results } = await vectorSearch(request(), { runtime });
    const table = resultsToArrow(results, SELECT, await ds.table.schema());
    expectDatasetTypes(table, SELECT);
    expect(asJson(table)).toEqual(
      results.map((r) => ({ ...r, _distance: Math.fround(r._distance) })),
    );
    expectExactMicros(table, await nativeMicros());
  });

  test("an empty result with a schema has typed, empty columns", async () => {
    const table = resultsToArrow([], ["vector", "id"], await ds.table.schema());
    expect(table.numRows).toBe(0);
    expectDatasetTypes(table, ["vector", "id"]);
  });

  test("a select column missing from the schema is a TypeError", async () => {
    const schema = await ds.table.schema();
    expect(() => resultsToArrow([], ["nope"], schema)).toThrow(TypeError);
  });

  test("microsecond timestamps come back exactly from their JSON milliseconds (fast-check)", () => {
    // About 1843..2096: where a double still holds milliseconds to the microsecond.
    const micros = fc.bigInt({ min: -(4n * 10n ** 15n), max: 4n * 10n ** 15n });
    fc.assert(
      fc.property(fc.array(micros, { minLength: 1, maxLength: 50 }), (values) => {
        const field = new Field("at", new TimestampMicrosecond(), false);
        const at = makeData({
          type: field.type,
          length: values.length,
          data: BigInt64Array.from(values),
        });
        const source = new Table([
          new RecordBatch(
            new Schema([field]),
            makeData({ type: new Struct([field]), length: values.length, children: [at] }),
          ),
        ]);
        const results = source.toArray().map((row, i) => ({
          _query_id: 0,
          _distance: i,
          _rowid: String(i),
          at: toJsonValue(row.at),
        }));
        const table = resultsToArrow(results, ["at"], source.schema);
        const raw = table.getChild("at")?.data[0]?.values as BigInt64Array;
        expect([...raw.subarray(0, values.length)]).toEqual(values);
      }),
    );
  });
});
