/**
 * The request schema: types and validation from one zod schema; random input never escapes it.
 */
import fc from "fast-check";
import { describe, expect, expectTypeOf, test } from "vitest";
import { FanoutError } from "../shared/errors.js";
import { parseSearchRequest, type SearchRequest } from "../shared/request.js";

describe("parseSearchRequest", () => {
  test("the inferred request type has the documented fields", () => {
    expectTypeOf<SearchRequest["k"]>().toEqualTypeOf<number>();
    expectTypeOf<SearchRequest["query"]>().toEqualTypeOf<number[] | number[][]>();
    expectTypeOf<SearchRequest["coverage"]>().toEqualTypeOf<
      "require" | "fallback" | "indexed-only" | undefined
    >();
  });

  test("copies the query vectors as float32", () => {
    const query = [1, 2, 3];
    const valid = parseSearchRequest({ dataset: "s3://b/x.lance", query, k: 1 });
    query[0] = 99;
    expect(Array.from(valid.queries[0] ?? [])).toEqual([1, 2, 3]);
    expect(valid.queries[0]).toBeInstanceOf(Float32Array);
  });

  test("random input is either a valid request or an INVALID_REQUEST, never another error", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.jsonValue(),
          fc.record(
            {
              dataset: fc.string(),
              query: fc.oneof(fc.array(fc.double()), fc.jsonValue()),
              k: fc.oneof(fc.integer(), fc.jsonValue()),
            },
            { requiredKeys: [] },
          ),
        ),
        (value) => {
          try {
            parseSearchRequest(value);
            return true;
          } catch (err) {
            return err instanceof FanoutError && err.code === "INVALID_REQUEST";
          }
        },
      ),
      { numRuns: 2000 },
    );
  });
});
