/**
 * What a living dataset's commits did, read from storage: the views under the dataset's view
 * folder (a view exists once it has a `_versions/*.manifest`), which of them hold index segments,
 * and how a commit changed the dataset's fragments and segments.
 * @module
 */
import type { DatasetLocation } from "../shared/dataset.js";
import { type DatasetVersion, describeVersion } from "../shared/dataset-version.js";
import type { Manifest } from "../shared/manifest.js";
import type { ObjectStore } from "../shared/objects.js";
import { versionViews } from "../shared/views/version-views.js";

export interface ViewCensus {
  /** Views with a manifest. */
  readonly views: ReadonlySet<string>;
  /** Every object under the view folder, and their bytes (half-removed views included). */
  readonly objects: number;
  readonly bytes: number;
}

const VIEW_MANIFEST = /^(view-[0-9a-f]{32})\.lance\/_versions\/[^/]+\.manifest$/;

/** Lists `folder` (the dataset's view folder URI, without a trailing slash). */
export async function viewCensus(objects: ObjectStore, folder: string): Promise<ViewCensus> {
  const listed = await objects.list(`${folder}/`);
  const views = new Set<string>();
  for (const o of listed) {
    const name = VIEW_MANIFEST.exec(o.uri.slice(folder.length + 1))?.[1];
    if (name) views.add(name);
  }
  return { views, objects: listed.length, bytes: listed.reduce((s, o) => s + o.bytes, 0) };
}

export interface ViewKinds {
  /** Views holding index segments. */
  readonly index: number;
  /** Views of fragments searched flat (the unindexed tail). */
  readonly flat: number;
  /** Views no plan of this version uses (none expected). */
  readonly other: number;
}

/** Sorts `names` by what they hold, from every plan `manifest`'s version can make. */
export function viewKinds(
  names: Iterable<string>,
  manifest: Manifest,
  dataset: DatasetLocation,
  maxTasks: number,
): ViewKinds {
  const specs = versionViews(recorded(manifest), dataset, {
    maxTasks,
    coverages: ["require", "fallback"],
    widths: "all",
  });
  const out = { index: 0, flat: 0, other: 0 };
  for (const name of names) {
    const spec = specs.get(name);
    if (!spec) out.other++;
    else if (spec.segments.length > 0) out.index++;
    else out.flat++;
  }
  return out;
}

export interface ManifestChange {
  readonly fragmentsAdded: number;
  readonly fragmentsRemoved: number;
  /** Same id, other content (a delete's new deletion file). */
  readonly fragmentsChanged: number;
  readonly segmentsAdded: number;
  readonly segmentsRemoved: number;
}

/** How `after` differs from `before`: fragments by id and content, segments by uuid. */
export function manifestChange(before: Manifest, after: Manifest): ManifestChange {
  const old = new Map(before.fragments.map((f) => [f.id, f.content]));
  const now = new Map(after.fragments.map((f) => [f.id, f.content]));
  const oldSegments = new Set(before.segments.map((s) => s.uuid));
  const newSegments = new Set(after.segments.map((s) => s.uuid));
  return {
    fragmentsAdded: [...now.keys()].filter((id) => !old.has(id)).length,
    fragmentsRemoved: [...old.keys()].filter((id) => !now.has(id)).length,
    fragmentsChanged: [...now].filter(([id, c]) => old.has(id) && old.get(id) !== c).length,
    segmentsAdded: [...newSegments].filter((u) => !oldSegments.has(u)).length,
    segmentsRemoved: [...oldSegments].filter((u) => !newSegments.has(u)).length,
  };
}

/** The shape of a version: rows, fragments, vector index segments, rows no segment covers. */
export function shapeOf(manifest: Manifest): {
  rows: number;
  fragments: number;
  segments: number;
  unindexedRows: number;
} {
  const vector = manifest.segments.filter((s) => s.vector);
  const covered = new Set(vector.flatMap((s) => s.fragmentIds ?? []));
  const { fragments } = recorded(manifest);
  return {
    rows: fragments.reduce((s, f) => s + f.liveRows, 0),
    fragments: fragments.length,
    segments: vector.length,
    unindexedRows: fragments.filter((f) => !covered.has(f.id)).reduce((s, f) => s + f.liveRows, 0),
  };
}

/**
 * A version of a bench dataset read from its manifest alone: lancedb 0.39 wrote it, so its
 * manifest records every count and metric Lance would otherwise be asked for.
 */
function recorded(manifest: Manifest): DatasetVersion {
  return describeVersion(manifest, { listed: [], scanner: new Map(), rows: new Map() });
}
