/**
 * A filter is applied whole or refused: the service's parser reads it to its end, bounds its
 * cost, allows only functions that cannot exhaust memory; Lance must read it to its end too.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import * as lancedb from "@lancedb/lancedb";
import fc from "fast-check";
import { beforeAll, describe, expect, test } from "vitest";
import { FILTER_FUNCTIONS, FILTER_LIMITS, filterProblem } from "../shared/filter.js";
import { checkFilterWithLance } from "../shared/lance/filters.js";
import { corpus } from "./support/corpus.js";

/** Filters Lance plans on the lancedb 0.31 corpus dataset (id, category, vector). */
const VALID = [
  "category = 3",
  "category == 3 AND id BETWEEN 1 AND 9000",
  "NOT (id IN (1, 2, 3)) OR category <> 4",
  "category NOT IN (1, 2) AND id NOT BETWEEN 5 AND 7",
  "`category` IS NOT NULL AND id IS NOT NULL",
  "(category >= 2 AND category < 5) OR -id > -10",
  "category + 1 > 2 AND id * 2 % 3 = 0",
  "CAST(category AS BIGINT) = 3",
  "category::int = 3",
  "abs(id - 100) < 10 AND coalesce(category, 0) = 1",
  "regexp_match(CAST(id AS STRING), '^1') IS NOT NULL",
  "'a''b' || 'c' = 'a''bc'",
  "id > 1e2 AND id < .5e4 AND _rowid >= 0",
];

describe("the service's filter parser", () => {
  test.each(VALID)("accepts %s", (filter) => {
    expect(filterProblem(filter)).toBeUndefined();
  });

  test.each([
    ["category = 3) AND (category = 4", /unexpected "\)" at position 13/],
    ["category = 3 garbage", /unexpected "garbage" at position 14/],
    ["category = 3 ORDER BY id", /unexpected "ORDER" at position 14/],
    ["category = 3 LIMIT 1", /unexpected "LIMIT"/],
    ["category = 'a\u0000b'", /a control character at position 14/],
    ["CASE WHEN category > 5 THEN id ELSE 0 END > 10", /unexpected "WHEN"/],
    ["category = 3 -- and more", /a comment/],
    ["category = 3; DROP TABLE items", /unexpected character ";"/],
    ["length(repeat('a', 1000000000)) > 0", /function "repeat" is not allowed/],
    ["length(repeat(CAST(id AS VARCHAR), 1000000)) > 0", /function "repeat" is not allowed/],
    ["arrow_cast(id, 'Int8') = 1", /function "arrow_cast" is not allowed/],
    ["category = 'open", /an unterminated '/],
    ["category IS 3", /expected NULL, TRUE, FALSE or UNKNOWN/],
    ["id BETWEEN 1 OR 2", /expected "AND"/],
    ["category =", /at the end/],
  ])("refuses %j, naming where", (filter, message) => {
    expect(filterProblem(filter)).toMatch(message);
  });

  test("docs/api.md lists exactly the functions a filter may call", async () => {
    const doc = await readFile(join(import.meta.dirname, "..", "docs", "api.md"), "utf8");
    const listed = /Functions a filter may call[^`]*`([^`]+)`/.exec(doc)?.[1]?.split(/\s+/) ?? [];
    expect([...listed].sort()).toEqual([...FILTER_FUNCTIONS].sort());
  });

  test("bounds arithmetic, nesting and terms", () => {
    const chain = (n: number, op: string) => Array.from({ length: n }, () => "1").join(op);
    // `category + 1+1+...+1` with n ones holds n operators.
    expect(filterProblem(`category + ${chain(FILTER_LIMITS.maxArithmetic + 1, "+")} > 0`)).toMatch(
      /more than 64 arithmetic operators/,
    );
    expect(filterProblem(`category + ${chain(FILTER_LIMITS.maxArithmetic, "+")} > 0`)).toBe(
      undefined,
    );
    const deep = `${"(".repeat(FILTER_LIMITS.maxDepth + 1)}id = 1${")".repeat(FILTER_LIMITS.maxDepth + 1)}`;
    expect(filterProblem(deep)).toMatch(/nesting deeper than 32/);
    expect(filterProblem(`${"NOT ".repeat(40)}id = 1`)).toMatch(/nesting deeper/);
    // n terms joined by OR hold n - 1 ORs.
    const ors = Array.from({ length: FILTER_LIMITS.maxTerms + 2 }, (_, i) => `id = ${i}`);
    expect(filterProblem(ors.join(" OR "))).toMatch(/more than 10000 AND, OR and IN terms/);
    expect(filterProblem(ors.slice(1).join(" OR "))).toBeUndefined();
    expect(filterProblem(`id IN (${ors.map((_, i) => i).join(",")})`)).toMatch(/terms/);
  });

  test("an expression followed by anything but its end is refused", () => {
    const valid = fc.constantFrom(...VALID);
    const tail = fc.constantFrom(")", "garbage", "LIMIT 1", "ORDER BY id", "id = 2", ", 3", "'x'");
    fc.assert(
      fc.property(valid, tail, (filter, rest) => {
        expect(filterProblem(`${filter} ${rest}`)).toMatch(/unexpected|expected/);
      }),
    );
  });

  test("any text gets an answer, never an exception, in bounded time", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 400, unit: "grapheme-ascii" }), (text) => {
        const started = performance.now();
        const problem = filterProblem(text);
        expect(problem === undefined || typeof problem === "string").toBe(true);
        // No input makes the parser blow up (a generous bound: a busy machine must not flake it).
        expect(performance.now() - started).toBeLessThan(1_000);
      }),
      { numRuns: 2000 },
    );
  });
});

describe("Lance reads the filter to its end", () => {
  let table: lancedb.Table;

  beforeAll(async () => {
    const [dataset] = corpus().filter((d) => d.source.lance === "8.0.0");
    if (!dataset) throw new Error("the corpus lost its lancedb 0.31 dataset");
    table = await (await lancedb.connect(dataset.dir.replace(/\/[^/]+$/, ""))).openTable(
      dataset.table,
    );
  });

  test.each(VALID)("%s: Lance plans it whole", async (filter) => {
    await expect(checkFilterWithLance(table, "vector", 16, filter)).resolves.toBeUndefined();
  });

  test("where Lance's parser would stop early, or a column is unknown, it is INVALID_REQUEST", async () => {
    await expect(
      checkFilterWithLance(table, "vector", 16, "category = 3 garbage"),
    ).rejects.toMatchObject({
      code: "INVALID_REQUEST",
      message: expect.stringMatching(/does not read it to its end/),
    });
    await expect(checkFilterWithLance(table, "vector", 16, "nope > 1")).rejects.toMatchObject({
      code: "INVALID_REQUEST",
      message: expect.stringMatching(/nope/),
    });
  });
});
