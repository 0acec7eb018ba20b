/**
 * The demo dataset builder (`npm start`, `fanout make-dataset`): exactly the rows and segments it
 * promises, and a finished demo is reused, not rebuilt.
 */
import { mkdtemp, readdir, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { ensureDemoDataset } from "../local/demo-dataset.js";
import { readManifest } from "../shared/manifest-store.js";
import { testRuntime } from "./support/fixtures.js";

const tempDb = () => mkdtemp(join(tmpdir(), "fanout-demo-"));

/** Every file under `dir` with its size and modification time: what a rebuild would change. */
async function files(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  const out: string[] = [];
  for (const e of entries.filter((x) => x.isFile())) {
    const path = join(e.parentPath, e.name);
    const s = await stat(path);
    out.push(`${path} ${s.size} ${s.mtimeMs}`);
  }
  return out.sort();
}

async function manifestSegments(uri: string, version: number): Promise<number> {
  const runtime = await testRuntime();
  const manifest = await readManifest(runtime.objects, uri, version);
  return manifest.segments.filter((s) => s.name === "vector_idx").length;
}

describe("ensureDemoDataset", () => {
  test.each([
    ["one partition", 6_000, 5],
    ["several partitions", 24_000, 4],
  ])("builds exactly the rows and segments it promises (%s)", async (_, rows, segments) => {
    const demo = await ensureDemoDataset({ db: await tempDb(), rows, segments, dimension: 16 });
    expect(demo).toMatchObject({ rows, segments });
    expect(demo.build?.segmentsPerRound).toEqual(
      Array.from({ length: segments - 1 }, (_, i) => i + 2),
    );
    expect(await manifestSegments(demo.uri, demo.version)).toBe(segments);
  });

  test("a finished demo is reused: same version, no file written", async () => {
    const db = await tempDb();
    const options = { db, rows: 5_000, segments: 3, dimension: 16 };
    const first = await ensureDemoDataset(options);
    const before = await files(db);
    const second = await ensureDemoDataset(options);
    expect(second).toEqual({ ...first, build: undefined });
    expect(await files(db)).toEqual(before);
  });

  test("a table of other rows or segments is refused, and rebuilt to the request when asked", async () => {
    const db = await tempDb();
    await ensureDemoDataset({ db, rows: 5_000, segments: 3, dimension: 16 });
    await expect(
      ensureDemoDataset({ db, rows: 5_000, segments: 4, dimension: 16 }),
    ).rejects.toMatchObject({
      code: "INVALID_REQUEST",
      message: expect.stringMatching(/already has a table demo \(5000 rows, 3 segments, 16-d\)/),
    });
    const rebuilt = await ensureDemoDataset({
      db,
      rows: 5_000,
      segments: 4,
      dimension: 16,
      overwrite: true,
    });
    expect(rebuilt).toMatchObject({ rows: 5_000, segments: 4 });
    expect(rebuilt.build?.segmentsPerRound).toEqual([2, 3, 4]);
  });

  test.each([
    [{ segments: 0 }, /segments must be a whole number >= 1/],
    [{ rows: 500, segments: 8 }, /500 rows are too few for 8 segments/],
    [{ dimension: 12 }, /dimension must be a positive multiple of 8/],
  ])("refuses %o with a clear error", async (bad, message) => {
    await expect(ensureDemoDataset({ db: await tempDb(), ...bad })).rejects.toThrow(message);
  });
});
