/**
 * A child process for test/refine.test.ts: one merge refine of a batch (QUERIES queries x
 * CANDIDATES candidates of DIMENSION-d vectors, the shape of a batch of 100 on fashion-mnist at
 * k 10, refineFactor 4) on a local table; prints its peak RSS in MiB, measured by the kernel.
 *   node --import tsx test/support/refine-memory.ts
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as lancedb from "@lancedb/lancedb";
import { rescore } from "../../shared/refine.js";

const ROWS = 4_000;
const DIMENSION = 784;
const QUERIES = 100;
const CANDIDATES = 40;

const vector = (seed: number) =>
  Float32Array.from({ length: DIMENSION }, (_, i) => Math.sin(seed * 7.31 + i * 0.13));

const db = await lancedb.connect(await mkdtemp(join(tmpdir(), "refine-memory-")));
const rows = Array.from({ length: ROWS }, (_, id) => ({ id, vector: Array.from(vector(id)) }));
const table = await db.createTable("items", rows);
const ids = (await table.query().withRowId().select(["id"]).toArray()).map((r) => BigInt(r._rowid));
const before = process.resourceUsage().maxRSS;
const queries = Array.from({ length: QUERIES }, (_, q) => vector(ROWS + q));
const candidates = queries.map((_, q) =>
  Array.from({ length: CANDIDATES }, (_, c) => ({
    queryId: q,
    rowId: ids[(q * CANDIDATES + c) % ids.length] as bigint,
    distance: 0,
  })),
);
const out = await rescore({ table, column: "vector", metric: "l2", queries, candidates });
const answered = out.every((c) => c.rowIds.length === CANDIDATES);
console.log(
  JSON.stringify({
    answered,
    beforeMiB: Math.round(before / 1024),
    peakMiB: Math.round(process.resourceUsage().maxRSS / 1024),
  }),
);
process.exit(0);
