/**
 * What names a segment view and where it lives. A view is named from what it holds (index,
 * segments, the group's fragments' content, schema), not from the version it was cloned from,
 * so every later version whose group holds the same content reuses it, warm. The planner (for
 * tasks) and prepare and gc (for a version's views) build every view identity here.
 * @module
 */
import type { FanoutConfig } from "../config.js";
import { type DatasetLocation, splitS3Uri } from "../dataset.js";
import type { DatasetVersion } from "../dataset-version.js";
import { FanoutError } from "../errors.js";
import { digest } from "../manifest.js";

/** One fragment of a group, with the digest of what it holds (`ManifestFragment.content`). */
export interface ViewFragment {
  readonly id: number;
  readonly content: string;
}

export interface ViewSpec {
  readonly dataset: DatasetLocation;
  /** A version holding this content: cloned when the view does not exist yet. */
  readonly version: number;
  readonly indexName: string;
  /** Segment uuids of the group, sorted. */
  readonly segments: readonly string[];
  /** Live fragments of the group, sorted by id. */
  readonly fragments: readonly ViewFragment[];
  /** Digest of the dataset's schema (`Manifest.schema`). */
  readonly schema: string;
}

/** A group of a version's plan: its segments and the live fragments they cover. */
export interface GroupOfSegments {
  readonly segments: readonly string[];
  readonly fragments: readonly number[];
}

/** A pinned version, as much of it as names its views. */
export interface PinnedVersion {
  readonly dataset: DatasetLocation;
  readonly version: number;
  readonly schema: string;
  /** What each live fragment holds (`ManifestFragment.content`). */
  readonly contents: ReadonlyMap<number, string>;
}

export function pinnedVersion(read: DatasetVersion, dataset: DatasetLocation): PinnedVersion {
  return {
    dataset,
    version: read.version,
    schema: read.manifest.schema,
    contents: new Map(read.fragments.map((f) => [f.id, f.content])),
  };
}

/** The view that searches `group` of the index `indexName` at the pinned version. */
export function viewSpecOfGroup(
  pinned: PinnedVersion,
  indexName: string,
  group: GroupOfSegments,
): ViewSpec {
  return {
    dataset: pinned.dataset,
    version: pinned.version,
    indexName,
    segments: group.segments,
    fragments: group.fragments.map((id) => ({ id, content: pinned.contents.get(id) ?? "" })),
    schema: pinned.schema,
  };
}

/** A view's group as a task carries it (shared/tasks.ts `groupFields`). */
export function groupFieldsOf(spec: ViewSpec) {
  return {
    indexName: spec.indexName,
    segments: [...spec.segments],
    fragments: [...spec.fragments],
  };
}

/** Deterministic view name: equal content (whatever the version) always maps to one view. */
export function viewName(spec: ViewSpec): string {
  const key = [
    spec.dataset.uri,
    spec.indexName,
    spec.segments.join(","),
    spec.fragments.map((f) => `${f.id}:${f.content}`).join(","),
    spec.schema,
  ].join("\n");
  return `view-${digest(key)}`;
}

/**
 * The folder of a dataset's views under the view root: the dataset's own key (its path for a
 * local dataset), so a listing of the root tells which dataset each view belongs to (gc).
 */
export function viewFolder(dataset: Pick<DatasetLocation, "kind" | "uri">): string {
  return dataset.kind === "s3" ? splitS3Uri(dataset.uri).key : dataset.uri.replace(/^\/+/, "");
}

/** The dataset a view folder belongs to: the inverse of {@link viewFolder}. */
export function datasetOfFolder(root: string, folder: string): string {
  return root.startsWith("s3://") ? `s3://${splitS3Uri(root).bucket}/${folder}` : `/${folder}`;
}

/**
 * Where the views of a dataset live: `LANCE_FANOUT_VIEW_ROOT` for local datasets, the view
 * prefix in the dataset's own bucket for S3 (lancedb writes a clone into another bucket to the
 * source's bucket: test/lancedb-workarounds.test.ts).
 */
export function viewRoot(
  config: FanoutConfig,
  dataset: Pick<DatasetLocation, "kind" | "uri">,
): string {
  if (dataset.kind === "local") return config.localViewRoot;
  if (!config.s3ViewPrefix) {
    throw new FanoutError(
      "INTERNAL",
      "LANCE_FANOUT_S3_VIEW_PREFIX is not set: S3 datasets need a writable view prefix",
    );
  }
  return `s3://${splitS3Uri(dataset.uri).bucket}/${config.s3ViewPrefix}`;
}
