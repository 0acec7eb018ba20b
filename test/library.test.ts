/**
 * The library as a TypeScript user imports it (shared/index.ts, the package's entry): prepare
 * builds a version's views before its first query, a search then creates none, and gc removes
 * the views of versions no query can still pin, with the CLI's rules for its options.
 */
import { mkdtemp, readdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, test } from "vitest";
import {
  createRuntime,
  gc,
  loadConfig,
  prepare,
  type Runtime,
  vectorSearch,
} from "../shared/index.js";
import { type Dataset, makeDataset, nativeSearch, queries } from "./support/fixtures.js";

const HOUR = 3_600_000;
let ds: Dataset;
let runtime: Runtime;
let viewRoot: string;

/** Views on disk that still have a manifest (gc leaves a removed view's empty folders). */
async function viewsOnDisk(): Promise<string[]> {
  const folder = join(viewRoot, ds.uri.replace(/^\/+/, ""));
  const names = await readdir(folder).catch(() => []);
  const versions = (name: string) => readdir(join(folder, name, "_versions")).catch(() => []);
  const alive = await Promise.all(names.map(async (n) => ((await versions(n)).length ? n : "")));
  return alive.filter(Boolean).sort();
}

beforeAll(async () => {
  ds = await makeDataset({ rounds: [4000, 1500, 6000], unindexedRows: 300 });
  viewRoot = await mkdtemp(join(tmpdir(), "fanout-views-"));
  runtime = createRuntime(loadConfig({ ...process.env, LANCE_FANOUT_VIEW_ROOT: viewRoot }));
});

describe("the library's prepare and gc", () => {
  test("prepare builds the version's views; a second prepare and a search build none", async () => {
    const first = await prepare({ dataset: ds.uri }, { runtime });
    expect(first).toMatchObject({ dataset: ds.uri, version: ds.version, environments: 1 });
    expect(first.views).toBeGreaterThan(ds.segments);
    expect(first.created).toBe(first.views);
    expect(await viewsOnDisk()).toHaveLength(first.views);

    const again = await prepare({ dataset: ds.uri, version: ds.version }, { runtime });
    expect(again).toMatchObject({ views: first.views, created: 0 });
    const [query = []] = queries(1, 3);
    for (const strategy of ["auto", "segments"] as const) {
      const response = await vectorSearch({ dataset: ds.uri, query, k: 10, strategy }, { runtime });
      const native = await nativeSearch(ds, query, 10);
      expect(response.results.map((r) => r._rowid)).toEqual(native.map((h) => h.rowid));
    }
    expect(await viewsOnDisk()).toHaveLength(first.views);
  });

  test("gc keeps every view in the grace period, then removes those no kept version uses", async () => {
    await prepare({ dataset: ds.uri }, { runtime });
    await ds.table.delete("id < 100"); // changes the first group's content: new views
    const next = await prepare({ dataset: ds.uri }, { runtime });
    expect(next.created).toBeGreaterThan(0);
    const before = await viewsOnDisk();

    const [young] = await gc({ dataset: ds.uri, keepVersions: 1 }, { runtime });
    expect(young?.removed).toEqual([]);
    const later = new Date(Date.now() + 2 * HOUR);
    const [dry] = await gc(
      { dataset: ds.uri, keepVersions: 1, now: later, dryRun: true },
      { runtime },
    );
    expect(dry?.removed.length).toBeGreaterThan(0);
    expect(await viewsOnDisk()).toEqual(before);

    const [report] = await gc({ dataset: ds.uri, keepVersions: 1, now: later }, { runtime });
    expect(report?.removed.map((r) => r.view).sort()).toEqual(
      dry?.removed.map((r) => r.view).sort(),
    );
    expect(report?.versions).toEqual([next.version]);
    expect(await viewsOnDisk()).toHaveLength(before.length - (report?.removed.length ?? 0));
    const again = await prepare({ dataset: ds.uri }, { runtime });
    expect(again.created).toBe(0);
  });

  test.each([
    [{ keepVersions: 0 }, /keepVersions/],
    [{ graceMs: 60_000 }, /graceMs/],
    [{ root: "s3://bucket/prefix/deeper" }, /root/],
  ])("gc refuses %j with INVALID_REQUEST and deletes nothing", async (options, message) => {
    const before = await viewsOnDisk();
    await expect(gc({ dataset: ds.uri, ...options }, { runtime })).rejects.toMatchObject({
      code: "INVALID_REQUEST",
      message,
    });
    expect(await viewsOnDisk()).toEqual(before);
  });

  test("prepare refuses a bad request and a missing version with stable codes", async () => {
    await expect(prepare({ dataset: "" }, { runtime })).rejects.toMatchObject({
      code: "INVALID_REQUEST",
    });
    await expect(prepare({ dataset: ds.uri, version: 9999 }, { runtime })).rejects.toMatchObject({
      code: "VERSION_NOT_FOUND",
    });
  });
});
