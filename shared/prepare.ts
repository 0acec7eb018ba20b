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
import type { PreparedView, ViewTask } from "./tasks.js";
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
  readonly ms: number;
}

/** Views built at once: each is a few storage round trips, and they share the functions' concurrency. */
const CONCURRENCY = 8;

/**
 * Builds the views `auto` and `segments` plans of `version` (default: the latest) can use, for
 * every vector index and the unindexed tail, with the deployment's `maxTasks` and coverage; each
 * is verified and loaded where tasks run (one segment-search invoke per view on Lambda).
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
  const requestId = randomUUID();
  const limit = pLimit(CONCURRENCY);
  const prepared: PreparedView[] = await Promise.all(
    [...specs.values()].map((spec) =>
      limit(() => {
        const task: ViewTask = {
          requestId,
          dataset: location.uri,
          version,
          indexName: spec.indexName,
          segments: [...spec.segments],
          fragments: [...spec.fragments],
          schema: spec.schema,
          prepare: true,
        };
        return invoker.prepareView(task);
      }),
    ),
  );
  return {
    dataset: location.uri,
    version,
    views: prepared.length,
    created: prepared.filter((p) => p.created).length,
    ms: Math.round(performance.now() - started),
  };
}
