/**
 * Segment views: naming, creation, reuse, completion of half-written views, concurrency.
 */
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import * as lancedb from "@lancedb/lancedb";
import { beforeAll, describe, expect, test } from "vitest";
import { loadConfig } from "../shared/config.js";
import type { DatasetLocation } from "../shared/dataset.js";
import type { DatasetVersion } from "../shared/dataset-version.js";
import { chooseIndex } from "../shared/index-choice.js";
import { readManifest } from "../shared/manifest-store.js";
import { createRuntime, type Runtime } from "../shared/runtime.js";
import { vectorSearch } from "../shared/search.js";
import { type ViewSpec, viewFolder, viewName } from "../shared/views/identity.js";
import { dropPredicate } from "../shared/views/materialize.js";
import { type Dataset, makeDataset, queries, testRuntime } from "./support/fixtures.js";

let ds: Dataset;
let specs: ViewSpec[];

beforeAll(async () => {
  ds = await makeDataset({ rounds: [4000, 2000, 3000] });
  await ds.table.createIndex("vector", {
    config: lancedb.Index.ivfFlat({ numPartitions: 2 }),
    name: "flat",
  });
  const runtime = await testRuntime();
  const dataset = runtime.resolveDataset(ds.uri);
  const version = await ds.table.version();
  specs = specOfSegments(await runtime.versions.read(dataset, version), dataset);
});

/** One spec per segment of vector_idx, at the version. */
function specOfSegments(read: DatasetVersion, dataset: DatasetLocation): ViewSpec[] {
  const contents = new Map(read.fragments.map((f) => [f.id, f.content]));
  return chooseIndex(read, { indexName: "vector_idx" }).segments.map((s) => ({
    dataset,
    version: read.version,
    indexName: "vector_idx",
    segments: [s.uuid],
    fragments: s.fragments.map((id) => ({ id, content: contents.get(id) ?? "" })),
    schema: read.manifest.schema,
  }));
}

function folderOf(runtime: Runtime): string {
  return join(runtime.config.localViewRoot, viewFolder(runtime.resolveDataset(ds.uri)));
}

async function viewVersions(runtime: Runtime, name: string): Promise<number> {
  return (await readdir(join(folderOf(runtime), `${name}.lance`, "_versions"))).filter((f) =>
    f.endsWith(".manifest"),
  ).length;
}

describe("segment views", () => {
  test("dropPredicate covers exactly the fragments outside the group, merging neighbours", () => {
    expect(dropPredicate([0, 1, 2, 5, 7], new Set([2]))).toBe(
      `(_rowaddr >= 0 AND _rowaddr < ${2n << 32n}) OR (_rowaddr >= ${5n << 32n} AND _rowaddr < ${8n << 32n})`,
    );
    expect(dropPredicate([3, 4], new Set([3, 4]))).toBe("");
  });

  test("names follow content, not versions: index, group, fragment content and schema", () => {
    const [a, b] = specs;
    if (!a || !b) throw new Error("expected two segments");
    expect(viewName(a)).toBe(viewName({ ...a }));
    expect(viewName(a)).toBe(viewName({ ...a, version: a.version - 1 }));
    expect(viewName(a)).not.toBe(viewName(b));
    expect(viewName(a)).not.toBe(viewName({ ...a, indexName: "flat" }));
    const [first, ...rest] = a.fragments;
    if (!first) throw new Error("no fragment");
    const changed = [{ ...first, content: "0".repeat(32) }, ...rest];
    expect(viewName(a)).not.toBe(viewName({ ...a, fragments: changed }));
    expect(viewName(a)).not.toBe(viewName({ ...a, schema: "1".repeat(32) }));
  });

  test("a view holds only its group's fragments, one segment and only the chosen index", async () => {
    const runtime = await testRuntime();
    const spec = specs[0];
    if (!spec) throw new Error("no segment");
    const view = await runtime.views.open(spec);
    expect(view.searchedSegments).toBe(1);
    expect((await view.table.listIndices()).map((i) => i.name)).toEqual(["vector_idx"]);
    const rows = spec.fragments.length;
    expect((await view.table.stats()).fragmentStats.numFragments).toBe(rows);
  });

  test("a flat view of unindexed fragments lists no vector index (Lance 12 keeps an emptied index's oldest segment)", async () => {
    const own = await makeDataset({ rounds: [3000, 2000], unindexedRows: 500 });
    const runtime = await testRuntime();
    const read = await runtime.versions.read(
      runtime.resolveDataset(own.uri),
      await own.table.version(),
    );
    const { manifest } = read;
    const unindexed = chooseIndex(read, { indexName: "vector_idx" }).unindexed;
    expect(unindexed).toHaveLength(1);
    const view = await runtime.views.open({
      dataset: runtime.resolveDataset(own.uri),
      version: manifest.version,
      indexName: "vector_idx",
      segments: [],
      fragments: unindexed.map((f) => ({
        id: f.id,
        content: manifest.fragments.find((m) => m.id === f.id)?.content ?? "",
      })),
      schema: manifest.schema,
    });
    expect(view.searchedSegments).toBe(0);
    expect(await view.table.listIndices()).toEqual([]);
    expect(await view.table.countRows()).toBe(500);
  });

  test("firstRows are where each fragment's live rows start: prewarm's take reads every fragment", async () => {
    const own = await makeDataset({
      rounds: [3000, 2000],
      deleteWhere: "id < 5 OR (id >= 12000 AND id < 12010)",
    });
    const runtime = await testRuntime();
    const location = runtime.resolveDataset(own.uri);
    const perSegment = specOfSegments(
      await runtime.versions.read(location, await own.table.version()),
      location,
    );
    const [first] = perSegment;
    if (!first) throw new Error("no segment");
    const view = await runtime.views.open({
      ...first,
      segments: perSegment.flatMap((s) => s.segments).sort(),
      fragments: perSegment.flatMap((s) => s.fragments).sort((a, b) => a.id - b.id),
    });
    const rows = await view.table
      .takeOffsets([...view.firstRows])
      .select(["id"])
      .toArrow();
    expect(Array.from(rows.getChild("id")?.toArray() ?? [], Number)).toEqual([5, 12_010, 15_000]);
  });

  test("prewarm loads each view's index once, within the budget, and never when off", async () => {
    const [a, b] = specs;
    if (!a || !b) throw new Error("expected two segments");
    const version = a.version;
    const segments = (await readManifest((await testRuntime()).objects, ds.uri, version)).segments;
    const bytesOf = (spec: ViewSpec) =>
      segments
        .filter((s) => spec.segments.includes(s.uuid))
        .reduce((n, s) => n + (s.sizeBytes ?? 0), 0);
    expect(bytesOf(a)).toBeGreaterThan(0);

    const eager = await testRuntime({ LANCE_FANOUT_PREWARM: "eager" });
    const view = await eager.views.open(a);
    await eager.views.prewarm(view); // a second call is a no-op
    await eager.views.open(b);
    expect(eager.views.prewarmedBytes).toBe(bytesOf(a) + bytesOf(b));

    // A budget (80% of the cache) that holds the first view but not both: the second is skipped.
    const tight = createRuntime({
      ...eager.config,
      indexCacheBytes: Math.ceil((bytesOf(a) + 1) / 0.8),
    });
    await tight.views.open(a);
    await tight.views.open(b);
    expect(tight.views.prewarmedBytes).toBe(bytesOf(a));

    const off = await testRuntime({ LANCE_FANOUT_PREWARM: "off" });
    await off.views.prewarm(await off.views.open(a));
    expect(off.views.prewarmedBytes).toBe(0);
  });

  test("prewarm counts each view in full (lancedb caches by view URI), and a failed prewarm is retried", async () => {
    const own = await makeDataset({ rounds: [4000, 2000] });
    const runtime = await testRuntime({ LANCE_FANOUT_PREWARM: "eager" });
    const dataset = runtime.resolveDataset(own.uri);
    const at = async () =>
      specOfSegments(
        await runtime.versions.read(runtime.resolveDataset(own.uri), await own.table.version()),
        dataset,
      );
    const [before] = await at();
    if (!before) throw new Error("no segment");
    await runtime.views.open(before);
    const bytes = runtime.views.prewarmedBytes;
    expect(bytes).toBeGreaterThan(0);
    // A delete in the group's fragment: a new view of the same segment, which lancedb caches
    // again under the new view's URI.
    const fragment = before.fragments[0]?.id ?? 0;
    await own.table.delete(`_rowaddr = ${BigInt(fragment) << 32n}`);
    const after = (await at()).find((s) => s.segments[0] === before.segments[0]);
    if (!after) throw new Error("segment gone");
    const view = await runtime.views.open(after);
    expect(view.name).not.toBe(viewName(before));
    expect(runtime.views.prewarmedBytes).toBe(2 * bytes);

    const cold = await testRuntime({ LANCE_FANOUT_PREWARM: "background" });
    const open = await cold.views.open(after);
    let calls = 0;
    const failing = {
      ...open,
      table: {
        prewarmIndex: () =>
          ++calls === 1 ? Promise.reject(new Error("S3 down")) : Promise.resolve(),
      } as unknown as typeof open.table,
    };
    await cold.views.prewarm(failing);
    expect(cold.views.prewarmedBytes).toBe(0);
    await cold.views.prewarm(failing);
    expect(calls).toBe(2);
    expect(cold.views.prewarmedBytes).toBe(bytes);
  });

  test("the caches are held to their bound: a task past it starts a new generation", async () => {
    const search = async (runtime: Runtime) => {
      await vectorSearch(
        {
          dataset: ds.uri,
          query: queries(1, 41)[0] ?? [],
          k: 10,
          nprobes: 4,
          strategy: "single",
          indexName: "vector_idx",
        },
        { runtime },
      );
      return runtime.views.cachedBytes;
    };
    const roomy = await testRuntime({ LANCE_FANOUT_PREWARM: "off" });
    const loaded = await search(roomy);
    // An index cache under what one search loads (index and metadata entries together).
    const bound = Math.floor(loaded / 2);
    const tight = createRuntime({ ...roomy.config, indexCacheBytes: bound });
    expect(await search(tight)).toBeLessThanOrEqual(bound);
    expect(await tight.views.trim()).toBe(false);
  });

  test("is created once and reused: by the cache in-process, from storage across processes", async () => {
    const runtime = await testRuntime();
    const spec = specs[1];
    if (!spec) throw new Error("no segment");
    const first = await runtime.views.open(spec);
    const again = await runtime.views.open(spec);
    expect(again).toBe(first);
    expect(runtime.views.hits).toBe(1);
    const versions = await viewVersions(runtime, first.name);
    // A second process (a new runtime on the same view root) opens the finished view as is.
    const other = createRuntime(
      loadConfig({ ...process.env, LANCE_FANOUT_VIEW_ROOT: runtime.config.localViewRoot }),
    );
    await other.views.open(spec);
    expect(await viewVersions(runtime, first.name)).toBe(versions);
  });

  test("concurrent creators of the same view both succeed with one view", async () => {
    const a = await testRuntime();
    const b = createRuntime(
      loadConfig({ ...process.env, LANCE_FANOUT_VIEW_ROOT: a.config.localViewRoot }),
    );
    const spec = specs[2];
    if (!spec) throw new Error("no segment");
    const [va, vb] = await Promise.all([a.views.open(spec), b.views.open(spec)]);
    expect(va.name).toBe(vb.name);
    expect(va.searchedSegments).toBe(1);
    expect(vb.searchedSegments).toBe(1);
    expect(await readdir(folderOf(a))).toEqual([`${va.name}.lance`]);
  });

  test("a half-written view (cloned, not yet restricted) is completed before use", async () => {
    const runtime = await testRuntime();
    const spec = specs[0];
    if (!spec) throw new Error("no segment");
    const db = await lancedb.connect(folderOf(runtime));
    const half = await db.cloneTable(viewName(spec), ds.uri, {
      sourceVersion: spec.version,
      isShallow: true,
    });
    expect((await half.listIndices()).find((i) => i.name === "vector_idx")?.numSegments).toBe(
      specs.length,
    );
    const view = await runtime.views.open(spec);
    expect(view.searchedSegments).toBe(1);
    expect(await view.table.countRows()).toBeLessThan(await ds.table.countRows());
  });

  test("a stale view (changed by something else) is restored to its clone and restricted again", async () => {
    const runtime = await testRuntime();
    const spec = specs[3] ?? specs[0];
    if (!spec) throw new Error("no segment");
    const built = await runtime.views.open(spec);
    const rows = await built.table.countRows();
    await built.table.delete("id % 5 = 0");
    // A shallow clone starts at its source's version number, not at 1.
    expect(Math.min(...(await built.table.listVersions()).map((v) => v.version))).toBeGreaterThan(
      1,
    );
    const other = createRuntime(
      loadConfig({ ...process.env, LANCE_FANOUT_VIEW_ROOT: runtime.config.localViewRoot }),
    );
    const repaired = await other.views.open(spec);
    expect(repaired.searchedSegments).toBe(1);
    expect(await repaired.table.countRows()).toBe(rows);
  });
});
