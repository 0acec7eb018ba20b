/**
 * Garbage collection of views: a view goes when no plan of a version a query may still search
 * uses it, and it is older than the grace period. Kept versions: the newest
 * `LANCE_FANOUT_GC_KEEP_VERSIONS`, every version committed within the grace period, and the one
 * that was the latest when the grace period began (a query pins the latest version when it
 * starts, and no query outlives the grace period). A query that still needs a collected view
 * (time travel to an old version) builds it again. The only code that deletes anything, and only
 * under the view prefix.
 * @module
 */
import { z } from "zod";
import { FanoutError } from "./errors.js";
import type { StoredObject } from "./objects.js";
import { LIMITS } from "./request.js";
import { defaultRuntime, type Runtime } from "./runtime.js";
import { datasetOfFolder, viewFolder, viewRoot } from "./views/identity.js";
import { versionViews } from "./views/version-views.js";

export const gcOptionsSchema = z.strictObject({
  /** One dataset; @default every dataset with views under the view root of `root` */
  dataset: z.string().min(1).max(2048).optional(),
  /** List what would go without deleting. */
  dryRun: z.boolean().optional(),
  /** @default the configuration's (`LANCE_FANOUT_GC_KEEP_VERSIONS`) */
  keepVersions: z.number().int().min(1).optional(),
  /**
   * @default the configuration's (`LANCE_FANOUT_GC_GRACE_MINUTES`); longer than the longest
   * query deadline, so no view a running query uses can go.
   */
  graceMs: z.number().int().gt(LIMITS.maxTimeoutMs).optional(),
  /** @default now */
  now: z.date().optional(),
  /**
   * Where to look for datasets when `dataset` is not given: `s3://bucket` (the view prefix in
   * that bucket) or `local` (`LANCE_FANOUT_VIEW_ROOT`). @default local
   */
  root: z
    .string()
    .regex(/^(local|s3:\/\/[^/]+\/?)$/, "must be local or s3://bucket")
    .optional(),
});
export type GcOptions = z.infer<typeof gcOptionsSchema>;

export interface GcReport {
  readonly dataset: string;
  /** Versions whose plans' views were kept. */
  readonly versions: readonly number[];
  readonly kept: number;
  readonly removed: readonly {
    readonly view: string;
    readonly objects: number;
    readonly bytes: number;
  }[];
  readonly dryRun: boolean;
}

const VIEW = /^(.*)\/(view-[0-9a-f]{32})\.lance\//;

/**
 * Collects the dead views of one dataset, or of every dataset found under a view root (`fanout
 * gc`, and on AWS the hourly gc function).
 * @example
 * const [report] = await gc({ dataset: "s3://bucket/db/items.lance", dryRun: true });
 */
export async function gc(
  options: GcOptions = {},
  { runtime = defaultRuntime() }: { readonly runtime?: Runtime } = {},
): Promise<GcReport[]> {
  const parsed = gcOptionsSchema.safeParse(options);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new FanoutError("INVALID_REQUEST", `gc: ${issue?.path.join(".")}: ${issue?.message}`);
  }
  return collect(parsed.data, runtime);
}

async function collect(options: GcOptions, runtime: Runtime): Promise<GcReport[]> {
  const datasets = options.dataset ? [options.dataset] : await datasetsUnder(options, runtime);
  const reports: GcReport[] = [];
  for (const dataset of datasets) reports.push(await collectDataset(dataset, options, runtime));
  return reports;
}

async function datasetsUnder(options: GcOptions, runtime: Runtime): Promise<string[]> {
  const root =
    options.root === undefined || options.root === "local"
      ? runtime.config.localViewRoot
      : viewRoot(runtime.config, {
          kind: "s3",
          uri: `${options.root.replace(/\/+$/, "")}/x.lance`,
        });
  const folders = new Set<string>();
  for (const object of await runtime.objects.list(`${root}/`)) {
    const folder = VIEW.exec(object.uri.slice(root.length + 1))?.[1];
    if (folder) folders.add(folder);
  }
  // Views of a dataset this deployment may not read (another deployment's sharing the bucket, or
  // a prefix no longer allowed) stay: without its versions nothing tells which are live.
  return [...folders].map((folder) => datasetOfFolder(root, folder)).filter(mayRead(runtime));
}

function mayRead(runtime: Runtime): (dataset: string) => boolean {
  return (dataset) => {
    try {
      runtime.resolveDataset(dataset);
      return true;
    } catch (err) {
      if (err instanceof FanoutError && err.code === "FORBIDDEN_DATASET") return false;
      throw err;
    }
  };
}

async function collectDataset(
  dataset: string,
  options: GcOptions,
  runtime: Runtime,
): Promise<GcReport> {
  const location = runtime.resolveDataset(dataset);
  const now = options.now ?? new Date();
  const graceMs = options.graceMs ?? runtime.config.gc.graceMs;
  const versions = await keptVersions(location, runtime, {
    keep: options.keepVersions ?? runtime.config.gc.keepVersions,
    since: new Date(now.getTime() - graceMs),
  });
  const live = new Set<string>();
  for (const version of versions) {
    const read = await runtime.versions.read(location, version);
    const views = versionViews(read, location, {
      maxTasks: runtime.config.maxTasks,
      coverages: ["require", "fallback"],
      widths: "all",
    });
    for (const name of views.keys()) live.add(name);
  }
  const folder = `${viewRoot(runtime.config, location)}/${viewFolder(location)}`;
  const byView = new Map<string, StoredObject[]>();
  for (const object of await runtime.objects.list(`${folder}/`)) {
    const name = VIEW.exec(object.uri.slice(folder.length))?.[2];
    if (name) byView.set(name, [...(byView.get(name) ?? []), object]);
  }
  const removed: GcReport["removed"][number][] = [];
  for (const [view, objects] of byView) {
    const newest = Math.max(...objects.map((o) => o.modified.getTime()));
    if (live.has(view) || now.getTime() - newest < graceMs) continue;
    if (!options.dryRun) await removeView(objects, runtime);
    removed.push({
      view,
      objects: objects.length,
      bytes: objects.reduce((n, o) => n + o.bytes, 0),
    });
  }
  return {
    dataset: location.uri,
    versions,
    kept: byView.size - removed.length,
    removed,
    dryRun: options.dryRun ?? false,
  };
}

/**
 * The versions a query may still search: the newest `keep`, those committed since `since`, and
 * the one that was the latest at `since`. None when the dataset is gone.
 */
async function keptVersions(
  location: ReturnType<Runtime["resolveDataset"]>,
  runtime: Runtime,
  { keep, since }: { keep: number; since: Date },
): Promise<number[]> {
  let all: { version: number; timestamp: Date }[];
  try {
    all = await runtime.tables.versions(location);
  } catch (err) {
    if (err instanceof FanoutError && err.code === "DATASET_NOT_FOUND") return [];
    throw err;
  }
  const newestFirst = [...all].sort((a, b) => b.version - a.version);
  const kept = new Set(newestFirst.slice(0, keep).map((v) => v.version));
  for (const v of newestFirst) if (v.timestamp >= since) kept.add(v.version);
  const atSince = newestFirst.find((v) => v.timestamp < since);
  if (atSince) kept.add(atSince.version);
  return [...kept].sort((a, b) => a - b);
}

/** Manifests first: a half-removed view then reads as missing and is rebuilt, never as broken. */
async function removeView(objects: readonly StoredObject[], runtime: Runtime): Promise<void> {
  const manifests = objects.filter((o) => o.uri.includes("/_versions/"));
  await runtime.objects.remove(manifests.map((o) => o.uri));
  await runtime.objects.remove(objects.filter((o) => !manifests.includes(o)).map((o) => o.uri));
}
