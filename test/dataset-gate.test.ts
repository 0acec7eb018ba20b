/**
 * The one gate every dataset URI passes (shared/dataset.ts `resolveDataset`): a plain,
 * normalised URI or a refusal, and the allow-list checked on what will really be read.
 */
import fc from "fast-check";
import { describe, expect, test } from "vitest";
import { type FanoutConfig, loadConfig } from "../shared/config.js";
import { resolveDataset } from "../shared/dataset.js";
import { FanoutError } from "../shared/errors.js";

const ALLOWED = "s3://lance-fanout/demo/";
const config: FanoutConfig = {
  ...loadConfig({ LANCE_FANOUT_ALLOWED_DATASETS: ALLOWED }),
  allowLocal: false,
};

function outcome(dataset: string): { uri: string } | { code: string } {
  try {
    return { uri: resolveDataset(dataset, config).uri };
  } catch (err) {
    expect(err).toBeInstanceOf(FanoutError);
    return { code: (err as FanoutError).code };
  }
}

/** Path segments a hostile or careless caller writes. */
const segment = fc.oneof(
  fc.constantFrom(
    "demo",
    "other",
    "..",
    ".",
    "",
    "%2e%2e",
    "%2F",
    "a b",
    "a+b",
    "é",
    "x=1",
    "demo.lance",
  ),
  fc.stringMatching(/^[a-z0-9._-]{1,8}$/),
  fc.string({ maxLength: 6 }),
);

describe("the dataset gate", () => {
  test.each([
    ["s3://lance-fanout/demo/../other/demo.lance", "INVALID_REQUEST"],
    ["s3://lance-fanout/demo/%2e%2e/other/demo.lance", "INVALID_REQUEST"],
    ["s3://lance-fanout//demo/demo.lance", "INVALID_REQUEST"],
    ["s3://lance-fanout/demo/my demo.lance", "INVALID_REQUEST"],
    ["s3://lance-fanout/demo/a+b.lance", "INVALID_REQUEST"],
    ["s3://lance-fanout/demo/é.lance", "INVALID_REQUEST"],
    ["s3://lance-fanout/demo/a\u0000.lance", "INVALID_REQUEST"],
    ["s3://lance-fanout/demo/a\n.lance", "INVALID_REQUEST"],
    ["file://evil/x.lance", "INVALID_REQUEST"],
    ["s3://lance-fanout/other/demo.lance", "FORBIDDEN_DATASET"],
    ["s3://lance-fanout/demoX/demo.lance", "FORBIDDEN_DATASET"],
    ["/tmp/demo.lance", "FORBIDDEN_DATASET"],
  ])("%j is %s", (dataset, code) => {
    expect(outcome(dataset)).toEqual({ code });
  });

  test("normalises the scheme's case and a trailing slash", () => {
    expect(outcome("S3://lance-fanout/demo/demo.lance/")).toEqual({
      uri: "s3://lance-fanout/demo/demo.lance",
    });
  });

  test("whatever the path, what passes is plain and under the allow-list (fast-check)", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("s3://", "S3://", "file://", "file:///", "", "s3:/"),
        fc.constantFrom("lance-fanout", "Lance-Fanout", "x", "other-bucket"),
        fc.array(segment, { maxLength: 6 }),
        fc.constantFrom("demo.lance", "x.lance", ".lance", "demo"),
        (scheme, bucket, segments, last) => {
          const result = outcome(`${scheme}${bucket}/${[...segments, last].join("/")}`);
          if ("code" in result) {
            expect(["INVALID_REQUEST", "FORBIDDEN_DATASET"]).toContain(result.code);
            return;
          }
          expect(result.uri.startsWith(ALLOWED)).toBe(true);
          const key = result.uri.slice("s3://".length).split("/");
          expect(key.every((s) => s !== "" && s !== "." && s !== "..")).toBe(true);
          expect(result.uri).toMatch(/^s3:\/\/[a-z0-9.-]+\/[A-Za-z0-9._=/-]+\.lance$/);
        },
      ),
      { numRuns: 3000 },
    );
  });
});
