/**
 * Builds the demo dataset again and again, each time into a fresh temporary directory on local
 * disk, and checks that every build has exactly the rows and index segments it promises:
 *
 *   npx tsx scripts/check-demo-builds.ts [--builds 20] [--rows 200000] [--segments 8] [--dimension 64]
 *
 * One line per build (rows, segments after each round, seconds), then a summary; exits 1 if any
 * build missed.
 * @module
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ensureDemoDataset } from "../local/demo-dataset.js";

const { values } = parseArgs({
  options: {
    builds: { type: "string", default: "20" },
    rows: { type: "string", default: "200000" },
    segments: { type: "string", default: "8" },
    dimension: { type: "string", default: "64" },
  },
});
const [builds, rows, segments, dimension] = [
  values.builds,
  values.rows,
  values.segments,
  values.dimension,
].map(Number) as [number, number, number, number];

const seconds: number[] = [];
let misses = 0;
for (let i = 1; i <= builds; i++) {
  const db = await mkdtemp(join(tmpdir(), "fanout-demo-check-"));
  const label = `build ${i}/${builds}`;
  try {
    const demo = await ensureDemoDataset({ db, rows, segments, dimension });
    const ok = demo.rows === rows && demo.segments === segments;
    if (!ok) misses++;
    seconds.push(demo.build?.seconds ?? 0);
    console.log(
      `${label}: ${demo.rows} rows, segments per round ${demo.build?.segmentsPerRound.join(" ")}, ` +
        `${demo.build?.seconds} s: ${ok ? "ok" : "MISSED"}`,
    );
  } catch (err) {
    misses++;
    console.log(`${label}: MISSED: ${err instanceof Error ? err.message : String(err)}`);
  } finally {
    await rm(db, { recursive: true, force: true });
  }
}
const sorted = [...seconds].sort((a, b) => a - b);
console.log(
  `${builds - misses}/${builds} builds reached ${rows} rows and ${segments} segments; ` +
    `seconds min ${sorted[0]}, median ${sorted[Math.floor(sorted.length / 2)]}, max ${sorted.at(-1)}`,
);
process.exitCode = misses === 0 ? 0 : 1;
