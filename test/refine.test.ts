/**
 * The merge's refine of a batch stays within a merge function's memory. A batch of 100 on
 * fashion-mnist (784-d, k 10, refineFactor 4) through the local stack had the merge killed over
 * its 1024 MB: one flat search per query, all at once, each over the batch's whole candidate
 * table. Measured in a child process (its own peak RSS), the shape of that batch.
 */
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { FUNCTION_DEFAULTS } from "../functions/defaults.js";

const CHILD = join(import.meta.dirname, "support", "refine-memory.ts");

describe("the merge's refine of a batch of 100", () => {
  test("answers every query well under the merge's memory size", () => {
    const out = execFileSync(process.execPath, ["--import", "tsx", CHILD], {
      encoding: "utf8",
      env: { ...process.env, LANCEDB_LOG: "error" },
      timeout: 120_000,
    });
    const { answered, beforeMiB, peakMiB } = JSON.parse(out.trim().split("\n").at(-1) ?? "{}");
    expect(answered).toBe(true);
    // The refine itself may take a quarter of the merge's memory, whatever the batch.
    expect(peakMiB - beforeMiB).toBeLessThan(FUNCTION_DEFAULTS.merge.memorySize / 4);
  }, 180_000);
});
