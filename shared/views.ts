/**
 * Segment views: the one place that restricts a Lance search to some index segments.
 *
 * The Node SDK cannot pass `index_segments` to a search, so a view is a shallow clone of a
 * version (a new manifest pointing at the source's files) from which every fragment outside the
 * group is deleted; Lance then keeps only the index segments that still cover a live fragment.
 * A view is named from what it holds (index, segments, the group's fragments' content, schema),
 * not from the version it was cloned from, so every later version whose group holds the same
 * content reuses it, warm. It is verified before use and cached open. The source dataset is
 * never written, and nothing here deletes (only gc does, see shared/gc.ts). Replace this module
 * with `index_segments` once the Node SDK exposes it.
 * @module
 */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { Session } from "@lancedb/lancedb";
import { LRUCache } from "lru-cache";
import pLimit from "p-limit";
import type { FanoutConfig } from "./config.js";
import { type DatasetLocation, splitS3Uri } from "./dataset.js";
import { FanoutError } from "./errors.js";
import { digest, type ManifestSegment } from "./manifest.js";
import { readManifest } from "./manifest-store.js";
import type { ObjectStore } from "./objects.js";
import {
  type Connection,
  connectDatabase,
  firstRowsOf,
  readFooters,
  type Table,
} from "./tables.js";

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

/**
 * lancedb's caches, the connections that fill them, the views opened through those and what
 * was loaded into them: one generation at a time (see {@link ViewCache.openAll}).
 */
interface Generation {
  /** One lancedb cache for every view of the generation, bounded by the configured sizes. */
  readonly session: Session;
  readonly connections: Map<string, Promise<Connection>>;
  readonly views: LRUCache<string, Promise<OpenView>>;
  /** Segments of the open views this process prewarmed (started), by view name. */
  readonly warmedViews: Map<string, readonly string[]>;
  /** Prewarmed segments: their bytes and how many open prewarmed views hold them. */
  readonly warmedSegments: Map<string, { bytes: number; views: number }>;
}

/**
 * Caches are renewed once they hold more than their fresh size plus this share of the index
 * cache's bound (16 MiB in a segment-search of 2048 MB), so that they are not reloaded on every
 * commit that replaces a view. lancedb 0.31 kept about 1 MiB per dropped session (its S3 store's
 * pooled connections); 0.39 keeps none (`scripts/session-leak.ts`: +0.02 MiB per renewal, 40 cycles).
 */
const RENEW_SLACK = 1 / 64;

export class ViewCache {
  readonly #config: FanoutConfig;
  readonly #objects: ObjectStore;
  #generation: Generation;
  /** What the caches held right after the last renewal had loaded a version's views. */
  #freshBytes = 0;
  #hits = 0;

  constructor(config: FanoutConfig, objects: ObjectStore) {
    this.#config = config;
    this.#objects = objects;
    this.#generation = this.#newGeneration();
  }

  #newGeneration(): Generation {
    const generation: Generation = {
      session: new Session(
        BigInt(Math.floor(this.#config.indexCacheBytes)),
        BigInt(Math.floor(this.#config.metadataCacheBytes)),
      ),
      connections: new Map(),
      views: new LRUCache({
        max: this.#config.viewCacheSize,
        dispose: (view, name) => {
          release(generation, name);
          void view.then((v) => v.table.close()).catch(() => {});
        },
      }),
      warmedViews: new Map(),
      warmedSegments: new Map(),
    };
    return generation;
  }

  /**
   * Opens and loads every view of `specs` (a version's views, from a warm task), at most
   * `concurrency` at once; answers how many were not open yet. First it starts a new
   * generation of lancedb caches when they hold more than the slack over what the open views
   * needed when they were last loaded afresh: lancedb keys its caches by view URI and evicts
   * only at their size bound, so the views each commit replaces would otherwise stay until
   * then, hundreds of MiB in a segment-search after a few hundred commits (bench/README.md).
   * The views are then loaded again into the new caches, off the query path. The old
   * generation is not closed: a search still using one of its views finishes, and lancedb
   * frees its caches once unreferenced (see {@link collectGarbage}).
   */
  async openAll(specs: readonly ViewSpec[], concurrency: number): Promise<number> {
    const slack = this.#config.indexCacheBytes * RENEW_SLACK;
    const renewed = this.cachedBytes > this.#freshBytes + slack;
    if (renewed) {
      this.#generation = this.#newGeneration();
      await collectGarbage();
    }
    const limit = pLimit(concurrency);
    const opened = await Promise.all(
      specs.map((spec) =>
        limit(async () => {
          const known = this.isOpen(spec);
          await this.prewarm(await this.open(spec));
          return !known;
        }),
      ),
    );
    if (renewed) this.#freshBytes = this.cachedBytes;
    return opened.filter(Boolean).length;
  }

  /**
   * Index bytes this process has prewarmed for its open views, each segment counted once: a
   * later view of the same segments (after a commit elsewhere in the dataset) adds nothing, and
   * a view that leaves the cache gives its segments back.
   */
  get prewarmedBytes(): number {
    let sum = 0;
    for (const { bytes } of this.#generation.warmedSegments.values()) sum += bytes;
    return sum;
  }

  /**
   * Loads the view's whole index into lancedb's cache once (unless `prewarm` is off or it does
   * not fit the budget), so later tasks on this view read no index data from storage, and the
   * footers of its data files, which a task's first read of a fragment would otherwise fetch
   * before the rows themselves (one more round trip). The segment-search calls it after its
   * search: a cold search does not compete with the load. A failed load is forgotten, so a
   * later search tries again.
   */
  async prewarm(view: OpenView): Promise<void> {
    const generation = this.#generation;
    const { warmedViews, warmedSegments } = generation;
    if (this.#config.prewarm === "off" || warmedViews.has(view.name)) return;
    // None: a flat group's view (no index segment) or sizes the manifest does not record.
    const segments = [...(view.segmentBytes ?? [])];
    let added = 0;
    for (const [uuid, size] of segments) if (!warmedSegments.has(uuid)) added += size;
    if (this.prewarmedBytes + added > this.#config.indexCacheBytes * 0.8) return;
    warmedViews.set(
      view.name,
      segments.map(([uuid]) => uuid),
    );
    for (const [uuid, size] of segments) {
      const entry = warmedSegments.get(uuid) ?? { bytes: size, views: 0 };
      entry.views++;
      warmedSegments.set(uuid, entry);
    }
    const index = segments.length > 0 ? view.table.prewarmIndex(view.indexName) : undefined;
    // A failed prewarm only costs speed: searches read from storage as they would without it.
    await Promise.all([
      index?.catch(() => release(generation, view.name)),
      readFooters(view.table, view.firstRows).catch(() => {}),
    ]);
  }

  /** Bytes lancedb's caches hold for this process's views (index and metadata entries). */
  get cachedBytes(): number {
    return Number(this.#generation.session.sizeBytes());
  }

  /** Views served from this process's cache so far. */
  get hits(): number {
    return this.#hits;
  }

  /** Opens (creating or completing it if needed) and verifies the view of one group. */
  open(spec: ViewSpec): Promise<OpenView> {
    const name = viewName(spec);
    const { views } = this.#generation;
    const cached = views.get(name);
    if (cached) {
      this.#hits++;
      return cached;
    }
    const view = this.#ensure(name, spec);
    view.catch(() => views.delete(name));
    views.set(name, view);
    return view;
  }

  /** Whether this process has the view open (or opening) already. */
  isOpen(spec: ViewSpec): boolean {
    return this.#generation.views.has(viewName(spec));
  }

  /** Forgets an open view (e.g. its files were collected): the next open verifies it anew. */
  evict(view: OpenView): void {
    this.#generation.views.delete(view.name);
  }

  async #ensure(name: string, spec: ViewSpec): Promise<OpenView> {
    const root = `${this.#root(spec.dataset)}/${viewFolder(spec.dataset)}`;
    const connection = await this.#connection(root, spec.dataset.kind);
    const uri = `${root}/${name}.lance`;
    const existing = await openIfExists(connection, name);
    const table = existing ?? (await clone(connection, name, spec));
    let restricted: Restricted;
    try {
      restricted = await this.#restrict(table, uri, spec);
    } catch (err) {
      if (!(err instanceof StaleView)) throw err;
      // Not what its name promises (changed by something else): back to the clone it started
      // as, then restrict again. Nothing is deleted.
      await table.checkout(await firstVersion(table));
      await table.restore();
      restricted = await this.#restrict(table, uri, spec);
    }
    const { group, firstRows } = restricted;
    const index = (await table.listIndices()).find((i) => i.name === spec.indexName);
    const searchedSegments = index?.numSegments ?? 0;
    if (searchedSegments !== spec.segments.length) {
      throw new FanoutError(
        "INTERNAL",
        `view ${name} holds ${searchedSegments} index segments, expected ${spec.segments.length}`,
      );
    }
    const view = {
      name,
      created: existing === undefined,
      uri,
      table,
      searchedSegments,
      indexName: spec.indexName,
      segmentBytes: segmentBytes(group),
      firstRows,
    };
    if (this.#config.prewarm === "eager") await this.prewarm(view);
    return view;
  }

  /**
   * Deletes the fragments outside the group (a no-op for a finished view), then verifies that
   * the view holds exactly the group's content. Answers the group's index segments as the
   * view's manifest lists them, and where each of its fragments starts.
   */
  async #restrict(table: Table, uri: string, spec: ViewSpec): Promise<Restricted> {
    const keep = new Set(spec.fragments.map((f) => f.id));
    for (let attempt = 0; ; attempt++) {
      const manifest = await readManifest(this.#objects, uri, await table.version());
      const held = new Map(manifest.fragments.map((f) => [f.id, f.content]));
      const wrong = spec.fragments.filter((f) => held.get(f.id) !== f.content);
      if (wrong.length > 0 || manifest.schema !== spec.schema) {
        const which = wrong.map((f) => f.id).join(", ");
        throw new StaleView(`view ${uri} differs in fragments [${which}] or its schema`);
      }
      const group = manifest.segments.filter(
        (s) => s.name === spec.indexName && s.fragmentIds?.some((id) => keep.has(id)),
      );
      const effective = group.map((s) => s.uuid).sort();
      if (effective.join() !== spec.segments.join()) {
        throw new StaleView(`view ${uri} covers segments ${effective.join(", ")}`);
      }
      // Lance searches the first vector index on a column: keep only the chosen one, and none
      // in a flat view. Lance 8 drops the segments that cover no live fragment, but Lance 12
      // keeps an emptied index's oldest segment (lance #8208), which a flat view would list.
      const flat = spec.segments.length === 0;
      const others = new Set(
        manifest.segments
          .filter((s) => s.metric !== null && (flat || s.name !== spec.indexName))
          .map((s) => s.name),
      );
      const live = [...held.keys()];
      if (live.length === keep.size && others.size === 0) {
        return { group, firstRows: firstRowsOf(manifest.fragments) };
      }
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

  #root(dataset: DatasetLocation): string {
    return viewRoot(this.#config, dataset);
  }

  #connection(root: string, kind: "s3" | "local"): Promise<Connection> {
    const { connections, session } = this.#generation;
    let connection = connections.get(root);
    if (!connection) {
      connection = connectDatabase(root, kind, this.#config.s3, { session });
      connection.catch(() => connections.delete(root));
      connections.set(root, connection);
    }
    return connection;
  }
}

/**
 * Where the views of a dataset live: `LANCE_FANOUT_VIEW_ROOT` for local datasets, the view
 * prefix in the dataset's own bucket for S3 (lancedb 0.31 writes cross-bucket shallow clones to
 * the wrong store).
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

/**
 * Runs a full garbage collection, then the finalizers it queued. lancedb frees a session (and
 * every cache entry in it) only when the JavaScript handles of the session, its connections and
 * tables are collected, and V8 does not see the native memory behind them: a segment-search,
 * which allocates little JavaScript, otherwise kept the old generations (31 commits of the
 * living bench: +8.7 MiB per commit and worker). Node exposes `gc` only behind a flag, which can
 * be set at run time.
 */
export async function collectGarbage(): Promise<void> {
  gc ??= exposeGc();
  gc();
  await new Promise(setImmediate);
}

let gc: (() => void) | undefined;

function exposeGc(): () => void {
  setFlagsFromString("--expose-gc");
  return runInNewContext("gc") as () => void;
}

/** Forgets that a view was prewarmed: it gives back its segments (unless other views hold them). */
function release(generation: Generation, name: string): void {
  for (const uuid of generation.warmedViews.get(name) ?? []) {
    const entry = generation.warmedSegments.get(uuid);
    if (entry && --entry.views === 0) generation.warmedSegments.delete(uuid);
  }
  generation.warmedViews.delete(name);
}

/** What {@link ViewCache} learns from a view's manifest when it restricts and verifies it. */
interface Restricted {
  readonly group: ManifestSegment[];
  readonly firstRows: number[];
}

function segmentBytes(segments: readonly ManifestSegment[]): Map<string, number> | null {
  const bytes = new Map<string, number>();
  for (const s of segments) {
    if (s.sizeBytes === null) return null;
    bytes.set(s.uuid, s.sizeBytes);
  }
  return bytes;
}

/** The version a view was cloned as: its oldest (a shallow clone keeps its source's number). */
async function firstVersion(table: Table): Promise<number> {
  const versions = (await table.listVersions()).map((v) => v.version);
  return Math.min(...versions);
}

/** A view whose contents do not match its name. */
class StaleView extends FanoutError {
  constructor(message: string) {
    super("INTERNAL", message);
  }
}

/**
 * Shallow-clones `spec.version` under `name`. Another process may have created it first, or
 * (S3) lancedb re-opens the clone without its storage options and throws although the clone is
 * there: then open it as usual.
 */
async function clone(connection: Connection, name: string, spec: ViewSpec): Promise<Table> {
  try {
    const cloned = await connection.cloneTable(name, spec.dataset.uri, {
      sourceVersion: spec.version,
      isShallow: true,
    });
    // lancedb 0.31 answers the clone opened outside the connection's session, in caches of its
    // own (6 GiB of index by default) that would hold the whole index past the configured size
    // (test/memory.test.ts): search it through the connection instead.
    cloned.close();
  } catch (err) {
    const table = await openIfExists(connection, name);
    if (table) return table;
    throw err;
  }
  return connection.openTable(name);
}

async function openIfExists(connection: Connection, name: string): Promise<Table | undefined> {
  try {
    return await connection.openTable(name);
  } catch (err) {
    if (/not found|does not exist/i.test(String(err))) return undefined;
    throw err;
  }
}
