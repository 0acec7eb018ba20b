/**
 * Garbage collection of views: what goes, what stays, dry runs, and queries that need a
 * collected view.
 */
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { beforeAll, describe, expect, test } from "vitest";
import { gc } from "../shared/gc.js";
import { prepare } from "../shared/prepare.js";
import { createRuntime, type Runtime } from "../shared/runtime.js";
import { vectorSearch } from "../shared/search.js";
import { viewFolder } from "../shared/views/identity.js";
import {
  type Dataset,
  DIMENSION,
  makeDataset,
  nativeSearch,
  queries,
  testRuntime,
} from "./support/fixtures.js";

const [q0 = []] = queries(1, 9);
const HOUR = 3_600_000;
let ds: Dataset;
let runtime: Runtime;
let oldVersion: number;

/** View directories of the dataset that still have a manifest. */
async function views(): Promise<string[]> {
  const folder = join(runtime.config.localViewRoot, viewFolder(runtime.resolveDataset(ds.uri)));
  const names = await readdir(folder).catch(() => []);
  const alive = await Promise.all(
    names.map(async (n) =>
      (await readdir(join(folder, n, "_versions")).catch(() => [])).length ? n : "",
    ),
  );
  return alive.filter(Boolean).sort();
}

beforeAll(async () => {
  ds = await makeDataset({ rounds: [4000, 1500, 6000] });
  runtime = await testRuntime();
  oldVersion = ds.version;
  await prepare({ dataset: ds.uri }, { runtime });
  // Three commits, each leaving views only the old versions use.
  for (const id of [3, 4003, 5503]) await ds.table.delete(`id = ${id}`);
  await ds.table.add(
    Array.from({ length: 200 }, (_, i) => ({
      id: 90_000 + i,
      category: 1,
      "Cat Name": "t",
      vector: Array(DIMENSION).fill(i / 200),
    })),
  );
  await prepare({ dataset: ds.uri }, { runtime });
});

describe("gc", () => {
  test("keeps every view younger than the grace period", async () => {
    const before = await views();
    const [report] = await gc({ dataset: ds.uri, keepVersions: 1 }, { runtime });
    expect(report?.removed).toEqual([]);
    expect(await views()).toEqual(before);
  });

  test("a dry run lists what would go and deletes nothing", async () => {
    const before = await views();
    const later = new Date(Date.now() + 2 * HOUR);
    const [report] = await gc(
      { dataset: ds.uri, keepVersions: 1, now: later, dryRun: true },
      { runtime },
    );
    expect(report?.dryRun).toBe(true);
    expect(report?.removed.length).toBeGreaterThan(0);
    expect(report?.kept).toBe(before.length - (report?.removed.length ?? 0));
    expect(await views()).toEqual(before);
  });

  test("removes what no kept version uses; the latest version's views stay and need no rebuild", async () => {
    const later = new Date(Date.now() + 2 * HOUR);
    const [report] = await gc({ dataset: ds.uri, keepVersions: 1, now: later }, { runtime });
    expect(report?.versions).toEqual([await ds.table.version()]);
    const after = await views();
    expect(after.length).toBe(report?.kept);
    expect(report?.removed.map((r) => `${r.view}.lance`).some((v) => after.includes(v))).toBe(
      false,
    );
    const prepared = await prepare({ dataset: ds.uri }, { runtime: await testRuntimeOn(runtime) });
    expect(prepared.created).toBe(0);
    expect(await views()).toEqual(after);
  });

  test("a query at a version whose views were collected builds them again and answers right", async () => {
    // The process that built the old views still holds them open: it verifies and rebuilds too.
    for (const rt of [runtime, await testRuntimeOn(runtime)]) {
      const response = await vectorSearch(
        {
          dataset: ds.uri,
          query: q0,
          k: 10,
          nprobes: 2,
          version: oldVersion,
          strategy: "segments",
        },
        { runtime: rt },
      );
      const native = await nativeSearch(ds, q0, 10, { nprobes: 2, version: oldVersion });
      expect(response.results.map((r) => r._rowid)).toEqual(native.map((h) => h.rowid));
    }
  });

  test("finds every dataset with views under the view root", async () => {
    const reports = await gc({ root: "local", dryRun: true }, { runtime });
    expect(reports.map((r) => r.dataset)).toContain(ds.uri);
  });

  test("leaves alone the views of datasets this deployment may not read (another's, or no longer allowed)", async () => {
    const narrower = createRuntime({ ...runtime.config, allowedDatasets: ["/nowhere/"] });
    const later = new Date(Date.now() + 2 * HOUR);
    const before = await views();
    expect(await gc({ root: "local", now: later, keepVersions: 1 }, { runtime: narrower })).toEqual(
      [],
    );
    expect(await views()).toEqual(before);
  });
});

/** A fresh process on the same view root. */
async function testRuntimeOn(other: Runtime): Promise<Runtime> {
  return createRuntime({ ...other.config });
}
