/**
 * The OpenAPI document is generated from the code and matches what the service really answers.
 */
import { readFile } from "node:fs/promises";
import { beforeAll, describe, expect, test } from "vitest";
import { handler as plannerHandler } from "../functions/planner/handler.js";
import { openApiDocument } from "../scripts/openapi.js";
import type { Runtime } from "../shared/runtime.js";
import { vectorSearch } from "../shared/search.js";
import { type Dataset, makeDataset, queries, testRuntime } from "./support/fixtures.js";
import { expectValid, isValid } from "./support/openapi.js";

let ds: Dataset;
let runtime: Runtime;

beforeAll(async () => {
  ds = await makeDataset({ rounds: [4000, 2000], unindexedRows: 300 });
  runtime = await testRuntime();
});

describe("docs/openapi.json", () => {
  test("is current: regenerate it with npm run docs:openapi", async () => {
    const committed = JSON.parse(
      await readFile(new URL("../docs/openapi.json", import.meta.url), "utf8"),
    );
    expect(committed).toEqual(JSON.parse(JSON.stringify(openApiDocument())));
  });

  test("accepts what the service accepts and rejects what it rejects", () => {
    expectValid("SearchRequest", {
      dataset: "s3://b/x.lance",
      query: [[1, 2]],
      k: 3,
      strategy: "auto",
    });
    expect(isValid("SearchRequest", { dataset: "s3://b/x.lance", query: [1], k: 0 })).toBe(false);
    expect(
      isValid("SearchRequest", { dataset: "s3://b/x.lance", query: [1], k: 1, extra: 1 }),
    ).toBe(false);
  });

  test("describes real search, plan and error responses", async () => {
    const [q = []] = queries(1);
    const search = await vectorSearch(
      { dataset: ds.uri, query: q, k: 5, select: ["id", "Cat Name"], coverage: "fallback" },
      { runtime },
    );
    expectValid("SearchResponse", JSON.parse(JSON.stringify(search)));
    const plan = await vectorSearch(
      { dataset: ds.uri, query: q, k: 5, coverage: "indexed-only", explain: true },
      { runtime },
    );
    expectValid("PlanResponse", JSON.parse(JSON.stringify(plan)));
    const event = (body: string) => ({
      version: "2.0",
      body,
      requestContext: { http: { method: "POST", path: "/search" } },
    });
    for (const body of ["{", JSON.stringify({ dataset: ds.uri, query: q, k: 0 })]) {
      const response = (await plannerHandler(event(body))) as { statusCode: number; body: string };
      expect(response.statusCode).toBe(400);
      expectValid("ErrorBody", JSON.parse(response.body));
    }
    const coverage = await vectorSearch(
      { dataset: ds.uri, query: q, k: 5, coverage: "require" },
      { runtime },
    ).catch((e) => e.toBody());
    expectValid("ErrorBody", coverage);
    expect(coverage.error.code).toBe("INCOMPLETE_INDEX_COVERAGE");
  });
});
