/**
 * The refine step of a fanned-out search, done once in the merge as Lance does it in one search:
 * the global top `limit × refineFactor` candidates by index distance get exact distances, read
 * from the pinned version. Lance computes them itself (a flat search over the candidates' own
 * vectors), so they equal native lancedb's bit for bit; no home-made metric can drift.
 * @module
 */
import { randomUUID } from "node:crypto";
import nodeModule from "node:module";
import * as lancedb from "@lancedb/lancedb";
import pLimit from "p-limit";
import type { QueryCandidates } from "./codec.js";
import { FanoutError } from "./errors.js";
import type { Table } from "./lance/connect.js";
import { takeRows } from "./lance/tables.js";
import type { DistanceType } from "./request.js";
import { compareHits, type Hit } from "./top-k.js";

// lancedb is CommonJS with its own apache-arrow: tables it takes must be built from that instance.
// (Not `import { createRequire }`: the Lambda bundles' banner declares that name already.)
const arrow = nodeModule.createRequire(import.meta.url)(
  "apache-arrow",
) as typeof import("apache-arrow");

export interface RefineInput {
  /** The pinned version the candidates come from. */
  readonly table: Table;
  readonly column: string;
  readonly metric: DistanceType;
  /** The query vectors, one per candidate list. */
  readonly queries: readonly Float32Array[];
  /** Per query, the candidates to re-score (their index distances are discarded). */
  readonly candidates: readonly (readonly Hit[])[];
}

let scratch: Promise<lancedb.Connection> | undefined;

/**
 * Flat searches of one refine at once. Each scans the batch's whole candidate table (its
 * prefilter selects one query's rows): a hundred at once took 1.5 GB on a batch of 100 at
 * 784-d and had the merge killed over its memory (test/refine.test.ts); four took +136 MiB
 * there (their latency against other bounds is not measured).
 */
const SEARCHES_AT_ONCE = 4;

/** Exact distances of every candidate, per query, sorted by (distance, row id). */
export async function rescore(input: RefineInput): Promise<QueryCandidates[]> {
  const pairs = input.candidates.flatMap((hits, q) => hits.map((h) => ({ q, rowId: h.rowId })));
  if (pairs.length === 0) return input.queries.map(() => emptyCandidates());
  const vectors = await readVectors(input.table, input.column, [
    ...new Set(pairs.map((p) => p.rowId)),
  ]);
  scratch ??= lancedb.connect("memory://");
  const db = await scratch;
  const name = `refine_${randomUUID().replaceAll("-", "")}`;
  const table = await db.createTable(name, pairsTable(pairs, vectors));
  const limit = pLimit(SEARCHES_AT_ONCE);
  try {
    return await Promise.all(
      input.queries.map((query, q) =>
        limit(async () => {
          const count = input.candidates[q]?.length ?? 0;
          if (count === 0) return emptyCandidates();
          const rows = await table
            .vectorSearch(query)
            .column("vector")
            .distanceType(input.metric)
            .bypassVectorIndex()
            .where(`qid = ${q}`)
            .limit(count)
            .select(["rid", "_distance"])
            .toArray();
          const hits = rows
            .map((r) => ({ queryId: q, rowId: BigInt(r.rid), distance: Number(r._distance) }))
            .sort(compareHits);
          return {
            rowIds: BigUint64Array.from(hits, (h) => h.rowId),
            distances: Float32Array.from(hits, (h) => h.distance),
          };
        }),
      ),
    );
  } finally {
    table.close();
    await db.dropTable(name);
  }
}

interface Vectors {
  /** Row of each row id in `data`. */
  readonly index: ReadonlyMap<bigint, number>;
  readonly data: import("apache-arrow").Vector;
}

/** The candidates' vectors at the pinned version, in one take. */
async function readVectors(table: Table, column: string, rowIds: bigint[]): Promise<Vectors> {
  const rows = await takeRows(table, rowIds, [column]);
  const ids = rows.getChild("_rowid");
  const data = rows.getChild(column);
  if (!ids || !data) throw new Error(`lancedb returned no _rowid or ${column} column`);
  // Rows come in Lance's order: key them by row id.
  const index = new Map<bigint, number>();
  for (let i = 0; i < rows.numRows; i++) index.set(BigInt(ids.get(i)), i);
  const lost = rowIds.find((id) => !index.has(id));
  if (lost !== undefined) {
    throw new FanoutError("INTERNAL", `row ${lost} vanished from the pinned version`);
  }
  return { index, data };
}

/** One row per (query, candidate): `qid`, `rid` and the candidate's vector, in the column's type. */
function pairsTable(
  pairs: readonly { readonly q: number; readonly rowId: bigint }[],
  vectors: Vectors,
): import("apache-arrow").Table {
  const type = vectors.data.type as import("apache-arrow").FixedSizeList;
  const size = type.listSize;
  const first = vectors.data.get(0)?.toArray() as ArrayLike<number> & { constructor: unknown };
  const Values = first.constructor as new (length: number) => Float32Array;
  const values = new Values(pairs.length * size);
  pairs.forEach((p, i) => {
    const row = vectors.index.get(p.rowId) ?? 0;
    values.set(vectors.data.get(row)?.toArray() as Float32Array, i * size);
  });
  const child = arrow.makeData({ type: type.valueType, length: values.length, data: values });
  const vector = arrow.makeData({ type, length: pairs.length, nullCount: 0, child });
  return new arrow.Table({
    qid: arrow.vectorFromArray(
      pairs.map((p) => p.q),
      new arrow.Int32(),
    ),
    rid: arrow.makeVector(BigUint64Array.from(pairs, (p) => p.rowId)),
    vector: arrow.makeVector(vector),
  });
}

function emptyCandidates(): QueryCandidates {
  return { rowIds: new BigUint64Array(0), distances: new Float32Array(0) };
}
