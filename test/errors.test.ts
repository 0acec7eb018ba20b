/**
 * Every error code of the API is reachable, with its HTTP status, and bad input never reaches
 * lancedb.
 */
import { cp, mkdtemp, readdir, truncate } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as lancedb from "@lancedb/lancedb";
import { beforeAll, describe, expect, test } from "vitest";
import { HTTP_MAX_TIMEOUT_MS, httpDeadline } from "../functions/common/http.js";
import { handler as plannerHandler } from "../functions/planner/handler.js";
import { ERROR_STATUS, type ErrorCode, FanoutError } from "../shared/errors.js";
import { inProcessInvoker } from "../shared/invoker.js";
import { parseSearchRequest } from "../shared/request.js";
import type { Runtime } from "../shared/runtime.js";
import { vectorSearch } from "../shared/search.js";
import { type Dataset, DIMENSION, makeDataset, queries, testRuntime } from "./support/fixtures.js";

let ds: Dataset;
let runtime: Runtime;
const [q = []] = queries(1);
const reached = new Set<ErrorCode>();

beforeAll(async () => {
  ds = await makeDataset({ rounds: [4000, 2000] });
  runtime = await testRuntime();
});

async function expectCode(promise: Promise<unknown>, code: ErrorCode, message?: RegExp) {
  const error = await promise.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(error).toBeInstanceOf(FanoutError);
  expect((error as FanoutError).code).toBe(code);
  expect((error as FanoutError).status).toBe(ERROR_STATUS[code]);
  if (message) expect((error as FanoutError).message).toMatch(message);
  reached.add(code);
}

describe("caller mistakes are 4xx with a stable code", () => {
  test.each([
    [{ query: [1, 2], k: 1 }, /dataset/],
    [{ dataset: "x.lance", query: [], k: 1 }, /query/],
    [{ dataset: "x.lance", query: [[1, 2], [3]], k: 1 }, /same dimension/],
    [{ dataset: "x.lance", query: [1, "2"], k: 1 }, /query/],
    [{ dataset: "x.lance", query: [1e39], k: 1 }, /finite/],
    [{ dataset: "x.lance", query: [1], k: 0 }, /k/],
    [{ dataset: "x.lance", query: [1], k: 10_001 }, /k/],
    [{ dataset: "x.lance", query: [1], k: 1.5 }, /k/],
    [{ dataset: "x.lance", query: [1], k: 1, nprobes: 0 }, /nprobes/],
    [{ dataset: "x.lance", query: [1], k: 1, extra: true }, /extra/],
    [{ dataset: "x.lance", query: [1], k: 1, distanceType: "hamming" }, /distanceType/],
    [{ dataset: "../../etc/x.lance", query: [1], k: 1 }, /\.\./],
    [{ dataset: "x.lance", query: [1], k: 1, select: ["a", "a"] }, /repeat/],
    [null, /request/],
  ])("%j is INVALID_REQUEST", async (request, message) => {
    await expectCode(vectorSearch(request as never, { runtime }), "INVALID_REQUEST", message);
  });

  test("the request is rejected before anything is opened", () => {
    expect(() =>
      parseSearchRequest({ dataset: "s3://b/x.lance", query: [Number.NaN], k: 1 }),
    ).toThrow(FanoutError);
  });

  test.each([
    ["gs://bucket/x.lance", /scheme/],
    [`${tmpdir()}/not-a-table`, /name>\.lance/],
  ])("dataset %s is INVALID_REQUEST", async (dataset, message) => {
    await expectCode(
      vectorSearch({ dataset, query: q, k: 1 }, { runtime }),
      "INVALID_REQUEST",
      message,
    );
  });

  test("wrong dimension, unknown column, unknown select column, bad filters", async () => {
    const base = { dataset: ds.uri, query: q, k: 5 };
    await expectCode(
      vectorSearch({ ...base, query: [1, 2, 3] }, { runtime }),
      "INVALID_REQUEST",
      /dimension 3/,
    );
    await expectCode(
      vectorSearch({ ...base, column: "nope" }, { runtime }),
      "INVALID_REQUEST",
      /nope/,
    );
    await expectCode(
      vectorSearch({ ...base, column: "category" }, { runtime }),
      "INVALID_REQUEST",
      /vector/,
    );
    await expectCode(
      vectorSearch({ ...base, select: ["nope"] }, { runtime }),
      "INVALID_REQUEST",
      /nope/,
    );
    await expectCode(
      vectorSearch({ ...base, filter: "id = = 1" }, { runtime }),
      "INVALID_REQUEST",
      /filter/,
    );
    await expectCode(
      vectorSearch({ ...base, filter: "nope > 1" }, { runtime }),
      "INVALID_REQUEST",
      /nope/,
    );
  });

  test("missing dataset, version and index are 404", async () => {
    const missing = join(ds.dir, "missing.lance");
    await expectCode(
      vectorSearch({ dataset: missing, query: q, k: 1 }, { runtime }),
      "DATASET_NOT_FOUND",
    );
    await expectCode(
      vectorSearch({ dataset: ds.uri, query: q, k: 1, version: 9999 }, { runtime }),
      "VERSION_NOT_FOUND",
    );
    const dir = await mkdtemp(join(tmpdir(), "fanout-noindex-"));
    const db = await lancedb.connect(dir);
    await db.createTable("plain", [{ id: 1, vector: Array(DIMENSION).fill(0) }]);
    await expectCode(
      vectorSearch(
        { dataset: join(dir, "plain.lance"), query: q, k: 1, coverage: "require" },
        { runtime },
      ),
      "INDEX_NOT_FOUND",
    );
  });

  test("datasets outside the allow-list, and local paths when not allowed, are 403", async () => {
    const allowList = await testRuntime({ LANCE_FANOUT_ALLOWED_DATASETS: "s3://bucket/allowed/" });
    await expectCode(
      vectorSearch({ dataset: ds.uri, query: q, k: 1 }, { runtime: allowList }),
      "FORBIDDEN_DATASET",
    );
    const noLocal = await testRuntime({ LANCE_FANOUT_ALLOW_LOCAL: "false" });
    await expectCode(
      vectorSearch({ dataset: ds.uri, query: q, k: 1 }, { runtime: noLocal }),
      "FORBIDDEN_DATASET",
    );
  });

  test("an HTTP body over 6 MB is 413 and invalid JSON is 400", async () => {
    const event = (body: string) => ({
      version: "2.0",
      body,
      requestContext: { http: { method: "POST", path: "/search" } },
    });
    const big = await plannerHandler(event(" ".repeat(6 * 1024 * 1024 + 1)));
    expect(big).toMatchObject({ statusCode: 413 });
    expect(JSON.parse((big as { body: string }).body).error.code).toBe("PAYLOAD_TOO_LARGE");
    reached.add("PAYLOAD_TOO_LARGE");
    const bad = await plannerHandler(event("{not json"));
    expect(bad).toMatchObject({ statusCode: 400 });
  });
});

describe("failures of the service are 5xx and never partial", () => {
  test("a failed task fails the query with SEGMENT_SEARCH_FAILED naming its group", async () => {
    const invoker = inProcessInvoker(runtime);
    const failing = {
      ...invoker,
      searchSegments: (task: Parameters<typeof invoker.searchSegments>[0]) =>
        task.group === 1 ? Promise.reject(new Error("worker lost")) : invoker.searchSegments(task),
    };
    await expectCode(
      vectorSearch(
        { dataset: ds.uri, query: q, k: 5, strategy: "segments" },
        { runtime, invoker: failing },
      ),
      "SEGMENT_SEARCH_FAILED",
      /group\(s\) 1: worker lost/,
    );
  });

  test("a failing merge fails the query: INTERNAL, no partial rows", async () => {
    const invoker = inProcessInvoker(runtime);
    const failing = { ...invoker, merge: () => Promise.reject(new Error("merge worker lost")) };
    await expectCode(
      // Several groups: a one-group merge runs in the planner and cannot fail this way.
      vectorSearch(
        { dataset: ds.uri, query: q, k: 5, strategy: "segments" },
        { runtime, invoker: failing },
      ),
      "INTERNAL",
      /merge worker lost/,
    );
  });

  test("a query over its deadline is TIMEOUT, and what is in flight is told to stop", async () => {
    const invoker = inProcessInvoker(runtime);
    let inFlight: AbortSignal | undefined;
    const slow = {
      ...invoker,
      merge: async (input: Parameters<typeof invoker.merge>[0], signal?: AbortSignal) => {
        inFlight = signal;
        await new Promise((resolve) => setTimeout(resolve, 200));
        return invoker.merge(input);
      },
    };
    await expectCode(
      vectorSearch(
        { dataset: ds.uri, query: q, k: 5, strategy: "segments", timeoutMs: 50 },
        { runtime, invoker: slow },
      ),
      "TIMEOUT",
    );
    expect(inFlight?.aborted).toBe(true);
  });

  test("an HTTP search's deadline runs from its arrival: a request that waited it out is TIMEOUT", async () => {
    const arrived = Date.now() - HTTP_MAX_TIMEOUT_MS - 1;
    const event = {
      version: "2.0",
      requestContext: { http: { method: "POST", path: "/search" }, timeEpoch: arrived },
    } as const;
    expect(httpDeadline(event)).toBe(arrived + HTTP_MAX_TIMEOUT_MS);
    await expectCode(
      vectorSearch({ dataset: ds.uri, query: q, k: 5 }, { runtime, deadline: httpDeadline(event) }),
      "TIMEOUT",
    );
  });

  test("a corrupt manifest is INTERNAL", async () => {
    const dir = await mkdtemp(join(tmpdir(), "fanout-corrupt-"));
    await cp(ds.dir, dir, { recursive: true });
    const versions = join(dir, "items.lance", "_versions");
    const latest = (await readdir(versions)).filter((f) => f.endsWith(".manifest")).sort()[0] ?? "";
    const fresh = await testRuntime();
    const version = ds.version;
    await truncate(join(versions, latest), 100);
    await expectCode(
      vectorSearch(
        { dataset: join(dir, "items.lance"), query: q, k: 5, version },
        { runtime: fresh },
      ),
      "INTERNAL",
    );
  });

  test("every error code was reached", () => {
    for (const code of [
      "AMBIGUOUS_INDEX",
      "METRIC_MISMATCH",
      "INCOMPLETE_INDEX_COVERAGE",
    ] as const) {
      reached.add(code); // reached in datasets.test.ts
    }
    reached.add("UNSUPPORTED_DATASET"); // reached in corpus.test.ts and index-choice.test.ts
    expect([...reached].sort()).toEqual(Object.keys(ERROR_STATUS).sort());
  });
});
