/**
 * Malformed requests and the error code each must get, built around one valid request.
 */
import type { ErrorCode } from "../../shared/errors.js";

export interface BadRequest {
  readonly name: string;
  /** The body: an object (sent as JSON) or raw text. */
  readonly body: unknown;
  readonly code: ErrorCode;
}

export function badRequests(valid: Record<string, unknown>, bucket: string): BadRequest[] {
  const dim = (valid.query as number[][])[0]?.length ?? 16;
  const vector = Array(dim).fill(0.5);
  const without = (key: string) =>
    Object.fromEntries(Object.entries(valid).filter(([k]) => k !== key));
  const cases: [string, unknown, ErrorCode][] = [
    ["not JSON", "{", "INVALID_REQUEST"],
    ["JSON null", "null", "INVALID_REQUEST"],
    ["JSON array", "[]", "INVALID_REQUEST"],
    ["JSON string", '"search"', "INVALID_REQUEST"],
    ["JSON number", "42", "INVALID_REQUEST"],
    ["empty object", {}, "INVALID_REQUEST"],
    ["no dataset", without("dataset"), "INVALID_REQUEST"],
    ["no query", without("query"), "INVALID_REQUEST"],
    ["no k", without("k"), "INVALID_REQUEST"],
    ["dataset a number", { ...valid, dataset: 7 }, "INVALID_REQUEST"],
    ["dataset empty", { ...valid, dataset: "" }, "INVALID_REQUEST"],
    ["dataset without .lance", { ...valid, dataset: `s3://${bucket}/db/items` }, "INVALID_REQUEST"],
    [
      "dataset path traversal",
      { ...valid, dataset: `s3://${bucket}/db/../../etc/items.lance` },
      "INVALID_REQUEST",
    ],
    ["dataset ftp scheme", { ...valid, dataset: "ftp://host/items.lance" }, "INVALID_REQUEST"],
    ...[" ", "+", "é", "\u0000", "\n", "%2e%2e/"].map((c): [string, unknown, ErrorCode] => [
      `dataset with ${JSON.stringify(c)}`,
      { ...valid, dataset: `s3://${bucket}/db/${c}items.lance` },
      "INVALID_REQUEST",
    ]),
    ["dataset with //", { ...valid, dataset: `s3://${bucket}//db/items.lance` }, "INVALID_REQUEST"],
    [
      "dataset file:// with a host",
      { ...valid, dataset: "file://evil/x.lance" },
      "INVALID_REQUEST",
    ],
    [
      "dataset file:// when deployed",
      { ...valid, dataset: "file:///etc/items.lance" },
      "FORBIDDEN_DATASET",
    ],
    [
      "dataset local path when deployed",
      { ...valid, dataset: "/tmp/items.lance" },
      "FORBIDDEN_DATASET",
    ],
    [
      "dataset in another bucket",
      { ...valid, dataset: "s3://other-bucket/db/items.lance" },
      "FORBIDDEN_DATASET",
    ],
    [
      "dataset missing",
      { ...valid, dataset: `s3://${bucket}/db/missing.lance` },
      "DATASET_NOT_FOUND",
    ],
    ["query a string", { ...valid, query: "0.5,0.5" }, "INVALID_REQUEST"],
    ["query empty", { ...valid, query: [] }, "INVALID_REQUEST"],
    ["query empty row", { ...valid, query: [[]] }, "INVALID_REQUEST"],
    ["query ragged", { ...valid, query: [vector, vector.slice(1)] }, "INVALID_REQUEST"],
    ["query with a string", { ...valid, query: [["a", ...vector.slice(1)]] }, "INVALID_REQUEST"],
    ["query with null", { ...valid, query: [[null, ...vector.slice(1)]] }, "INVALID_REQUEST"],
    [
      "query NaN (as text)",
      `{"dataset":"${valid.dataset}","query":[NaN],"k":1}`,
      "INVALID_REQUEST",
    ],
    [
      "query Infinity (as text)",
      `{"dataset":"${valid.dataset}","query":[Infinity],"k":1}`,
      "INVALID_REQUEST",
    ],
    [
      "query overflows float32",
      { ...valid, query: [[1e39, ...vector.slice(1)]] },
      "INVALID_REQUEST",
    ],
    ["query 3-deep", { ...valid, query: [[vector]] }, "INVALID_REQUEST"],
    ["query wrong dimension", { ...valid, query: [vector.slice(1)] }, "INVALID_REQUEST"],
    ["query too many rows", { ...valid, query: Array(10_001).fill([0.5]) }, "INVALID_REQUEST"],
    ["k zero", { ...valid, k: 0 }, "INVALID_REQUEST"],
    ["k negative", { ...valid, k: -1 }, "INVALID_REQUEST"],
    ["k fractional", { ...valid, k: 1.5 }, "INVALID_REQUEST"],
    ["k huge", { ...valid, k: 1e12 }, "INVALID_REQUEST"],
    ["k a string", { ...valid, k: "10" }, "INVALID_REQUEST"],
    ["k over 10000", { ...valid, k: 10_001 }, "INVALID_REQUEST"],
    ["k + offset over 10000", { ...valid, k: 9_000, offset: 2_000 }, "INVALID_REQUEST"],
    ["offset negative", { ...valid, offset: -1 }, "INVALID_REQUEST"],
    ["nprobes zero", { ...valid, nprobes: 0 }, "INVALID_REQUEST"],
    ["nprobes fractional", { ...valid, nprobes: 2.5 }, "INVALID_REQUEST"],
    ["refineFactor zero", { ...valid, refineFactor: 0 }, "INVALID_REQUEST"],
    [
      "(k + offset) × refineFactor over 100,000",
      { ...valid, k: 100, offset: 1, refineFactor: 1000 },
      "INVALID_REQUEST",
    ],
    ["maxTasks zero", { ...valid, maxTasks: 0 }, "INVALID_REQUEST"],
    ["timeoutMs zero", { ...valid, timeoutMs: 0 }, "INVALID_REQUEST"],
    ["version zero", { ...valid, version: 0 }, "INVALID_REQUEST"],
    ["version a string", { ...valid, version: "1" }, "INVALID_REQUEST"],
    ["version missing", { ...valid, version: 999_999 }, "VERSION_NOT_FOUND"],
    ["distanceType unknown", { ...valid, distanceType: "hamming" }, "INVALID_REQUEST"],
    ["distanceType mismatched", { ...valid, distanceType: "cosine" }, "METRIC_MISMATCH"],
    ["coverage unknown", { ...valid, coverage: "some" }, "INVALID_REQUEST"],
    ["strategy unknown", { ...valid, strategy: "fastest" }, "INVALID_REQUEST"],
    ["explain a string", { ...valid, explain: "yes" }, "INVALID_REQUEST"],
    ["unknown field", { ...valid, limit: 10 }, "INVALID_REQUEST"],
    [
      "prototype pollution",
      JSON.parse(`{"__proto__":{"x":1},"dataset":"${valid.dataset}","query":[[0.5]],"k":1}`),
      "INVALID_REQUEST",
    ],
    ["column unknown", { ...valid, column: "nope" }, "INVALID_REQUEST"],
    ["column not a vector", { ...valid, column: "category" }, "INVALID_REQUEST"],
    ["column empty", { ...valid, column: "" }, "INVALID_REQUEST"],
    ["indexName unknown", { ...valid, indexName: "nope" }, "INDEX_NOT_FOUND"],
    ["indexName empty", { ...valid, indexName: "" }, "INVALID_REQUEST"],
    ["select unknown column", { ...valid, select: ["nope"] }, "INVALID_REQUEST"],
    ["select repeated", { ...valid, select: ["id", "id"] }, "INVALID_REQUEST"],
    ["select not an array", { ...valid, select: "id" }, "INVALID_REQUEST"],
    ["filter invalid SQL", { ...valid, filter: "id = = 1" }, "INVALID_REQUEST"],
    ["filter unknown column", { ...valid, filter: "nope > 1" }, "INVALID_REQUEST"],
    ["filter SQL injection", { ...valid, filter: "1=1; DROP TABLE items" }, "INVALID_REQUEST"],
    ["filter empty", { ...valid, filter: "   " }, "INVALID_REQUEST"],
    ["filter a number", { ...valid, filter: 1 }, "INVALID_REQUEST"],
    // Lance would apply only what it understands of these: a silent wrong answer.
    ...[
      "category = 3) AND (category = 4",
      "category = 3 garbage",
      "category = 3 ORDER BY id",
      "category = 3 LIMIT 1",
      "category = '3\u00003'",
    ].map((filter): [string, unknown, ErrorCode] => [
      `filter cut short: ${JSON.stringify(filter)}`,
      { ...valid, filter },
      "INVALID_REQUEST",
    ]),
    // These crash or exhaust a function, or fail only on the data.
    [
      "filter of 1,500 additions",
      { ...valid, filter: `category + ${Array(1500).fill("1").join("+")} > 0` },
      "INVALID_REQUEST",
    ],
    [
      "filter allocating 1 GB",
      { ...valid, filter: "length(repeat('a', 1000000000)) > 0" },
      "INVALID_REQUEST",
    ],
    [
      "filter allocating per row",
      { ...valid, filter: "length(repeat(CAST(id AS VARCHAR), 1000000)) > 0" },
      "INVALID_REQUEST",
    ],
    ["filter arrow_cast", { ...valid, filter: "arrow_cast(id, 'Int8') = 1" }, "INVALID_REQUEST"],
    [
      "filter overflowing a cast",
      { ...valid, filter: "CAST(id AS TINYINT) = 1" },
      "INVALID_REQUEST",
    ],
    ["body over 6 MB", { ...valid, pad: "x".repeat(6 * 1024 * 1024) }, "PAYLOAD_TOO_LARGE"],
  ];
  return cases.map(([name, body, code]) => ({ name, body, code }));
}
