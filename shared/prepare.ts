/**
 * Prepare: build and verify the views a version's plans will use, and load a typical query's
 * into every environment, before its first query (`fanout prepare`, and on AWS on every commit
 * or on a schedule). Views are named by content, so after a commit only the groups it changed
 * get new views; the rest exist and are verified.
 * @module
 */
import { randomUUID } from "node:crypto";
import pLimit from "p-limit";
import { z } from "zod";
import type { DatasetLocation } from "./dataset.js";
import type { DatasetVersion } from "./dataset-version.js";
import { FanoutError } from "./errors.js";
import { chooseIndex, type IndexChoice } from "./index-choice.js";
import { type Invoker, inProcessInvoker } from "./invoker.js";
import { splitPlan } from "./planner.js";
import { parseSearchRequest } from "./request.js";
import { defaultRuntime, type Runtime } from "./runtime.js";
import type { ExecutionProfile } from "./strategy.js";
import type { PreparedView, ViewTask } from "./tasks.js";
import { groupFieldsOf, pinnedVersion, type ViewSpec, viewSpecOfGroup } from "./views/identity.js";
import { versionViews } from "./views/version-views.js";

export const prepareRequestSchema = z.strictObject({
  dataset: z.string().min(1).max(2048),
  /** @default the latest version */
  version: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional(),
});
export type PrepareRequest = z.input<typeof prepareRequestSchema>;

export interface PrepareResponse {
  readonly dataset: string;
  readonly version: number;
  /** Views of the version's plans. */
  readonly views: number;
  /** Of those, views this call created (the others existed and were verified). */
  readonly created: number;
  /**
   * Distinct segment-search environments that hold the views of a typical query's plan now (at
   * most the deployment's `prepareEnvironments`; fewer when invokes finished fast enough to
   * reach one twice).
   */
  readonly environments: number;
  readonly ms: number;
}

/** Views built at once: each is a few storage round trips, and they share the functions' concurrency. */
const CONCURRENCY = 8;

/** The k of a typical query, whose plan's views every environment loads. */
const TYPICAL_K = 10;

/**
 * Builds the views `auto` and `segments` plans of `version` (default: the latest) can use, for
 * every vector index and the unindexed tail, with the deployment's `maxTasks` and coverage; each
 * is built or verified where tasks run (one segment-search invoke per view on Lambda). Then
 * `prepareEnvironments` concurrent invokes load the views of a typical query's plan into as
 * many environments (with several slots, each slot's share of them loads its groups' views): a task lands in whichever environment is free, and one that had to open
 * its view itself would pay the cold read prepare exists to take off the query path. Every
 * width's views in every environment would hold the index once per width.
 * @example
 * const { views, created } = await prepare({ dataset: "s3://bucket/db/items.lance" });
 */
export async function prepare(
  request: PrepareRequest,
  options: { readonly runtime?: Runtime; readonly invoker?: Invoker } = {},
): Promise<PrepareResponse> {
  const parsed = prepareRequestSchema.safeParse(request);
  if (!parsed.success) {
    throw new FanoutError("INVALID_REQUEST", `prepare: ${parsed.error.issues[0]?.message}`);
  }
  const runtime = options.runtime ?? defaultRuntime();
  const invoker = options.invoker ?? inProcessInvoker(runtime);
  const started = performance.now();
  const location = runtime.resolveDataset(parsed.data.dataset);
  const version = parsed.data.version ?? (await runtime.tables.latestVersion(location));
  // A missing dataset or version is a 404 here.
  const read = await runtime.versions.read(location, version);
  const specs = versionViews(read, location, {
    maxTasks: runtime.config.maxTasks,
    coverages: [runtime.config.coverage],
    widths: "likely",
  });
  const pinned = {
    requestId: randomUUID(),
    dataset: location.uri,
    version,
    schema: read.manifest.schema,
  };
  const limit = pLimit(CONCURRENCY);
  const prepared: PreparedView[] = await Promise.all(
    [...specs.values()].map((spec) => {
      const task: ViewTask = { ...pinned, ...groupFieldsOf(spec), prepare: true };
      return limit(() => invoker.prepareView(task));
    }),
  );
  const typical = typicalViews(read, location, runtime, invoker.profile).map(groupFieldsOf);
  // Each slot serves the groups g with g mod slots = its number: it loads those views only.
  const { slots: n } = invoker.profile;
  const slots = Array.from({ length: n }, (_, slot) =>
    typical.filter((_, group) => group % n === slot),
  );
  const copies = Math.ceil(runtime.config.prepareEnvironments / n);
  const warmed = await Promise.all(
    slots.flatMap((warm, slot) =>
      warm.length === 0
        ? []
        : Array.from({ length: copies }, () => invoker.warmViews({ ...pinned, warm }, slot)),
    ),
  );
  return {
    dataset: location.uri,
    version,
    views: prepared.length,
    created: prepared.filter((p) => p.created).length,
    environments: new Set(warmed.map((w) => w.environment)).size,
    ms: Math.round(performance.now() - started),
  };
}

/**
 * The views of the plan a typical query gets at this version: one vector, k = 10, `auto`, the
 * deployment's coverage and `maxTasks`, the default index. None when such a query is refused.
 */
function typicalViews(
  read: DatasetVersion,
  location: DatasetLocation,
  runtime: Runtime,
  profile: ExecutionProfile,
): ViewSpec[] {
  const { coverage, maxTasks } = runtime.config;
  let index: IndexChoice;
  try {
    index = chooseIndex(read, { allowMissing: coverage === "fallback" });
  } catch (err) {
    if (err instanceof FanoutError) return [];
    throw err;
  }
  if (coverage === "require" && index.unindexed.length > 0) return [];
  const request = parseSearchRequest({
    dataset: location.uri,
    query: new Array<number>(index.dimension).fill(0),
    k: TYPICAL_K,
  });
  const { units, split } = splitPlan(index, coverage, request, maxTasks, {
    profile,
    storage: location.kind,
  });
  const pinned = pinnedVersion(read, location);
  return [...split.groups, ...units.flat].map((g) => viewSpecOfGroup(pinned, index.name, g));
}
