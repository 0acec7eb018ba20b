/**
 * Prepare: build, verify and load the views a version's plans will use, before its first query
 * (`fanout prepare`, and on AWS on every commit or on a schedule). Views are named by content,
 * so after a commit only the groups it changed get new views; the rest exist and are verified.
 * @module
 */
import { randomUUID } from "node:crypto";
import pLimit from "p-limit";
import { z } from "zod";
import { FanoutError } from "./errors.js";
import { type Invoker, inProcessInvoker } from "./invoker.js";
import { defaultRuntime, type Runtime } from "./runtime.js";
import type { PreparedView, ViewTask, WarmTask } from "./tasks.js";
import { versionViews } from "./version-views.js";

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
   * Distinct segment-search environments that hold every view now (at most the deployment's
   * `prepareEnvironments`; fewer when invokes finished fast enough to reach one twice).
   */
  readonly environments: number;
  readonly ms: number;
}

/** Views built at once: each is a few storage round trips, and they share the functions' concurrency. */
const CONCURRENCY = 8;

/**
 * Builds the views `auto` and `segments` plans of `version` (default: the latest) can use, for
 * every vector index and the unindexed tail, with the deployment's `maxTasks` and coverage; each
 * is verified and loaded where tasks run (one segment-search invoke per view on Lambda). Then
 * `prepareEnvironments` concurrent invokes load all of them into as many environments: a task
 * lands in whichever environment is free, and one that had to open its view itself would pay
 * the cold read prepare exists to take off the query path.
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
  await runtime.tables.at(location, version); // a missing dataset or version is a 404 here
  const manifest = await runtime.manifests.read(location.uri, version);
  const specs = versionViews(manifest, location, {
    maxTasks: runtime.config.maxTasks,
    coverages: [runtime.config.coverage],
    widths: "likely",
  });
  const pinned = {
    requestId: randomUUID(),
    dataset: location.uri,
    version,
    schema: manifest.schema,
  };
  const groups = [...specs.values()].map((spec) => ({
    indexName: spec.indexName,
    segments: [...spec.segments],
    fragments: [...spec.fragments],
  }));
  const limit = pLimit(CONCURRENCY);
  const prepared: PreparedView[] = await Promise.all(
    groups.map((group) => {
      const task: ViewTask = { ...pinned, ...group, prepare: true };
      return limit(() => invoker.prepareView(task));
    }),
  );
  return {
    dataset: location.uri,
    version,
    views: prepared.length,
    created: prepared.filter((p) => p.created).length,
    environments: await warmEnvironments(invoker, { ...pinned, warm: groups }, runtime),
    ms: Math.round(performance.now() - started),
  };
}

/** Sends the warm task to `prepareEnvironments` environments at once; answers how many it reached. */
async function warmEnvironments(invoker: Invoker, task: WarmTask, runtime: Runtime) {
  if (task.warm.length === 0) return 0;
  const copies = Array.from({ length: runtime.config.prepareEnvironments }, () =>
    invoker.warmViews(task),
  );
  return new Set((await Promise.all(copies)).map((w) => w.environment)).size;
}
