/**
 * Building a view: a shallow clone of a version (a new manifest pointing at the source's files)
 * from which every fragment outside the group is deleted; Lance then keeps only the index
 * segments that still cover a live fragment. The view is verified against its name before use.
 * The source dataset is never written, and nothing here deletes a file (only gc does).
 * @module
 */
import { describeVersion, lanceFacts } from "../dataset-version.js";
import { FanoutError } from "../errors.js";
import { firstVersion, openIfExists, shallowClone } from "../lance/clone.js";
import type { Connection, Table } from "../lance/connect.js";
import { firstRowsOf } from "../lance/tables.js";
import type { Manifest, ManifestSegment } from "../manifest.js";
import { readManifest } from "../manifest-store.js";
import type { ObjectStore } from "../objects.js";
import { type ViewSpec, viewName } from "./identity.js";

export interface OpenView {
  readonly name: string;
  /** True when this process cloned it (it did not exist). */
  readonly created: boolean;
  readonly uri: string;
  readonly table: Table;
  /** Index segments Lance sees in the view (must equal the group's). */
  readonly searchedSegments: number;
  /** Name of the view's vector index. */
  readonly indexName: string;
  /** Size of each index segment's files, or null when the manifest does not record them. */
  readonly segmentBytes: ReadonlyMap<string, number> | null;
  /** Offset of each fragment's first live row (a take of them reads every data file's footer). */
  readonly firstRows: readonly number[];
}

/**
 * Opens the view of `spec` in `connection`'s database (at `folder`), cloning or completing it
 * if needed, and verifies that it holds exactly the group.
 */
export async function materializeView(
  connection: Connection,
  folder: string,
  spec: ViewSpec,
  objects: ObjectStore,
): Promise<OpenView> {
  const name = viewName(spec);
  const uri = `${folder}/${name}.lance`;
  const existing = await openIfExists(connection, name);
  const table = existing ?? (await shallowClone(connection, name, spec.dataset.uri, spec.version));
  let restricted = await restrict(table, uri, spec, objects);
  if ("stale" in restricted) {
    // Not what its name promises (changed by something else): back to the clone it started
    // as, then restrict again. Nothing is deleted.
    await table.checkout(await firstVersion(table));
    await table.restore();
    restricted = await restrict(table, uri, spec, objects);
    if ("stale" in restricted) throw new FanoutError("INTERNAL", restricted.stale);
  }
  // Lance's own count of the view's index segments, against the view's manifest: a view that
  // searched other segments than its group would answer for other rows.
  const read = describeVersion(restricted.manifest, await lanceFacts(table, restricted.manifest));
  const index = read.indices.find((i) => i.name === spec.indexName);
  const lanceSegments = index?.lance?.segments ?? index?.segments.length ?? 0;
  if (lanceSegments !== (index?.segments.length ?? 0)) {
    throw new FanoutError(
      "INTERNAL",
      `view ${name}: Lance reads ${lanceSegments} index segments, its manifest lists ${index?.segments.length}`,
    );
  }
  return {
    name,
    created: existing === undefined,
    uri,
    table,
    searchedSegments: restricted.group.length,
    indexName: spec.indexName,
    segmentBytes: segmentBytes(restricted.group),
    firstRows: firstRowsOf(read.fragments),
  };
}

/** What {@link restrict} learns from a view's manifest. */
interface Restricted {
  readonly manifest: Manifest;
  /** The group's segments: those covering a live fragment of the view. */
  readonly group: ManifestSegment[];
}

/** A view whose contents do not match its name: what differs. */
interface Stale {
  readonly stale: string;
}

/**
 * Deletes the fragments outside the group (a no-op for a finished view), then verifies that
 * the view holds exactly the group's content. Answers the group's index segments as the
 * view's manifest lists them, and where each of its fragments starts; or, for a view that holds
 * other content than its name promises, what differs.
 */
async function restrict(
  table: Table,
  uri: string,
  spec: ViewSpec,
  objects: ObjectStore,
): Promise<Restricted | Stale> {
  const keep = new Set(spec.fragments.map((f) => f.id));
  for (let attempt = 0; ; attempt++) {
    const manifest = await readManifest(objects, uri, await table.version());
    const held = new Map(manifest.fragments.map((f) => [f.id, f.content]));
    const wrong = spec.fragments.filter((f) => held.get(f.id) !== f.content);
    if (wrong.length > 0 || manifest.schema !== spec.schema) {
      const which = wrong.map((f) => f.id).join(", ");
      return { stale: `view ${uri} differs in fragments [${which}] or its schema` };
    }
    const group = manifest.segments.filter(
      (s) => s.name === spec.indexName && s.fragmentIds?.some((id) => held.has(id) && keep.has(id)),
    );
    const effective = group.map((s) => s.uuid).sort();
    if (effective.join() !== spec.segments.join()) {
      return { stale: `view ${uri} covers segments ${effective.join(", ")}` };
    }
    // Lance searches the first vector index on a column: keep only the chosen one, and none in
    // a flat view. An emptied index keeps its oldest segment in the manifest (lance #8208),
    // which a flat view would otherwise list.
    const flat = spec.segments.length === 0;
    const others = new Set(
      manifest.segments
        .filter((s) => s.vector && (flat || s.name !== spec.indexName))
        .map((s) => s.name),
    );
    const live = [...held.keys()];
    if (live.length === keep.size && others.size === 0) return { manifest, group };
    if (attempt > 0) await table.checkoutLatest();
    try {
      if (live.length > keep.size) await table.delete(dropPredicate(live, keep));
      for (const name of others) await table.dropIndex(name);
    } catch (err) {
      // A concurrent creator may have committed the same delete: re-read and check again.
      if (attempt >= 2) throw err;
    }
  }
}

/**
 * A `_rowaddr` predicate matching every fragment of `live` not in `keep`. Row addresses are
 * `fragment_id << 32 | offset`; consecutive dropped fragments share one range.
 */
export function dropPredicate(live: readonly number[], keep: ReadonlySet<number>): string {
  const ranges: [number, number][] = [];
  let previousDropped = false;
  for (const id of [...live].sort((a, b) => a - b)) {
    const drop = !keep.has(id);
    const last = ranges.at(-1);
    if (drop && previousDropped && last) last[1] = id;
    else if (drop) ranges.push([id, id]);
    previousDropped = drop;
  }
  return ranges
    .map(([from, to]) => {
      const start = BigInt(from) << 32n;
      const end = (BigInt(to) + 1n) << 32n;
      return `(_rowaddr >= ${start} AND _rowaddr < ${end})`;
    })
    .join(" OR ");
}

function segmentBytes(segments: readonly ManifestSegment[]): Map<string, number> | null {
  const bytes = new Map<string, number>();
  for (const s of segments) {
    if (s.sizeBytes === null) return null;
    bytes.set(s.uuid, s.sizeBytes);
  }
  return bytes;
}
