/**
 * What coverage `fallback` (the default) costs (paths `fallback` and `stack-fallback`): warm
 * queries on a version with N unindexed rows (searched exactly, as one flat task beside the
 * index's) against the same rows once `optimize()` has indexed them, product and native alike,
 * for each N of `--unindexed` (0: the base as built). The data is on the local S3 behind the
 * bench proxy (`--latency-ms`); the product's views are prepared and prewarmed first, native's
 * index prewarmed. One `fallback-cost` record per (N, state).
 * @module
 */

import { loadavg } from "node:os";
import * as lancedb from "@lancedb/lancedb";
import { readManifest } from "../shared/manifest-store.js";
import type { DatasetContext } from "./context.js";
import { FALLBACK_PATHS, type FallbackPath } from "./context.js";
import { moreRows, random, recallAtK, TABLE } from "./datasets.js";
import { openFollower, type Phases, type Setup, withSetup } from "./living.js";
import { nativeSearch } from "./modes.js";
import { type PhaseCounter, requests } from "./s3-phases.js";
import { directObjectStore } from "./stack.js";
import { percentile, round, shuffled, summarize } from "./stats.js";
import { shapeOf } from "./view-census.js";

export async function measureFallback(ctx: DatasetContext, path: FallbackPath): Promise<void> {
  await withSetup(ctx, FALLBACK_PATHS[path], async (setup, counter) => {
    const dbUri = setup.uri.slice(0, setup.uri.lastIndexOf("/"));
    const storageOptions = setup.storage.storageOptions();
    const db = await lancedb.connect(dbUri, { storageOptions, manifestEnabled: false });
    const writer = await db.openTable(TABLE);
    const native = await openFollower(dbUri, storageOptions);
    const rows = moreRows(ctx.spec);
    try {
      for (const unindexed of ctx.options.unindexed) {
        if (unindexed > 0) await writer.add(rows(unindexed));
        await measureState(ctx, path, setup, counter, native, unindexed, "fallback");
        if (unindexed === 0) continue;
        await writer.optimize();
        await measureState(ctx, path, setup, counter, native, unindexed, "indexed");
      }
    } finally {
      writer.close();
      native.close();
      setup.product.close();
    }
  });
}

/** One side's warm samples: durations, S3 GETs and bytes, tasks, answers. */
interface Samples {
  readonly ms: number[];
  readonly ids: (readonly string[])[];
  /** In-process product only: plan / slowest task / merge. */
  readonly phases: Phases[];
  gets: number;
  bytes: number;
  tasks: number;
}

/** Warm samples of the latest version, product and native interleaved in a seeded order. */
async function measureState(
  ctx: DatasetContext,
  path: FallbackPath,
  setup: Setup,
  counter: PhaseCounter,
  native: lancedb.Table,
  unindexed: number,
  state: "fallback" | "indexed",
): Promise<void> {
  await native.checkoutLatest();
  const version = await native.version();
  const shape = shapeOf(await readManifest(directObjectStore(setup.storage), setup.uri, version));
  const prepared = await setup.product.prepare();
  const samples = {
    product: { ms: [], ids: [], phases: [], gets: 0, bytes: 0, tasks: 0 } as Samples,
    native: { ms: [], ids: [], phases: [], gets: 0, bytes: 0, tasks: 0 } as Samples,
  };
  const search = async (side: keyof typeof samples, q: number[]) => {
    if (side === "native") {
      return { ids: (await nativeSearch(native, ctx.spec.search, [q]))[0] ?? [], tasks: 0 };
    }
    const { response, phases } = await setup.product.search(q);
    return { ids: response.results.map((r) => r._rowid), tasks: response.plan.tasks, phases };
  };
  const next = random(ctx.options.seed);
  for (let i = 0; i < ctx.options.warmup + ctx.options.queries; i++) {
    const q = ctx.queries[i % ctx.queries.length] as number[];
    for (const side of shuffled(["product", "native"] as const, next)) {
      const { value, ms, counts } = await counter.measure(() => search(side, q));
      if (i < ctx.options.warmup) continue;
      const cell = samples[side];
      cell.ms.push(ms);
      cell.ids.push(value.ids);
      cell.gets += requests(counts, ["get"]);
      cell.bytes += counts.bytes ?? 0;
      cell.tasks = value.tasks;
      if ("phases" in value && value.phases) cell.phases.push(value.phases);
    }
  }
  const summary = (s: Samples) => ({
    ...summarize(s.ms),
    durationsMs: s.ms.map((v) => round(v)),
    getsPerQuery: round(s.gets / s.ms.length, 2),
    bytesPerQuery: Math.round(s.bytes / s.ms.length),
    tasks: s.tasks,
    phasesP50: s.phases.length
      ? {
          plan: round(
            percentile(
              s.phases.map((p) => p.plan),
              0.5,
            ),
            1,
          ),
          tasks: round(
            percentile(
              s.phases.map((p) => p.tasks),
              0.5,
            ),
            1,
          ),
          merge: round(
            percentile(
              s.phases.map((p) => p.merge),
              0.5,
            ),
            1,
          ),
        }
      : undefined,
  });
  const record = {
    type: "fallback-cost",
    dataset: ctx.info.name,
    path,
    unindexedRows: unindexed,
    state,
    version,
    shape,
    latencyMs: ctx.options.latencyMs,
    k: ctx.spec.search.k,
    nprobes: ctx.spec.search.nprobes,
    refineFactor: ctx.spec.search.refineFactor ?? null,
    prepared: { views: prepared.views, created: prepared.created, ms: prepared.ms },
    product: summary(samples.product),
    native: summary(samples.native),
    // Native's answers as the reference: the product's should be the same rows.
    agreement: round(
      recallAtK(
        samples.product.ids,
        samples.native.ids.map((ids) => [...ids]),
      ),
      4,
    ),
    loadAverage: loadavg().map((l) => round(l, 2)),
  };
  await ctx.emit(record);
  ctx.options.log(
    `${ctx.info.name} ${path} ${unindexed} unindexed, ${state}: v${version} ${shape.segments} segs | ` +
      `product p50 ${record.product.p50} ms (${record.product.tasks} tasks, ${record.product.getsPerQuery} GETs) | ` +
      `native p50 ${record.native.p50} ms (${record.native.getsPerQuery} GETs) | agreement ${record.agreement}`,
  );
}
