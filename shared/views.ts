/**
 * Segment views: the one place that restricts a Lance search to some index segments.
 *
 * The Node SDK cannot pass `index_segments` to a search, so a view is a shallow clone of the
 * pinned version (a new manifest pointing at the source's files) from which every fragment
 * outside the group is deleted; Lance then keeps only the index segments that still cover a
 * live fragment. Views are named from what they contain, created once, verified before use and
 * cached open. The source dataset is never written. Replace this module with `index_segments`
 * once the Node SDK exposes it.
 * @module
 */
import { createHash } from "node:crypto";
import { Session } from "@lancedb/lancedb";
import { LRUCache } from "lru-cache";
import type { FanoutConfig } from "./config.js";
import { type DatasetLocation, splitS3Uri } from "./dataset.js";
import { FanoutError } from "./errors.js";
import type { ManifestSegment } from "./manifest.js";
import { readManifest } from "./manifest-store.js";
import type { ObjectStore } from "./objects.js";
import { type Connection, connectDatabase, type Table } from "./tables.js";

export interface ViewSpec {
  readonly dataset: DatasetLocation;
  readonly version: number;
  readonly indexName: string;
  /** Segment uuids of the group, sorted. */
  readonly segments: readonly string[];
  /** Live fragments of the group, sorted. */
  readonly fragments: readonly number[];
}

export interface OpenView {
  readonly name: string;
  readonly table: Table;
  /** Index segments Lance sees in the view (must equal the group's). */
  readonly searchedSegments: number;
  /** Name of the view's vector index. */
  readonly indexName: string;
  /** Size of the view's index files, or null when the manifest does not record it. */
  readonly indexBytes: number | null;
}

/** Deterministic view name: the same group of the same version always maps to one view. */
export function viewName(spec: ViewSpec): string {
  const key = [
    spec.dataset.uri,
    spec.version,
    spec.indexName,
    spec.segments.join(","),
    spec.fragments.join(","),
  ].join("\n");
  return `view-${createHash("sha256").update(key).digest("hex").slice(0, 32)}`;
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

export class ViewCache {
  readonly #config: FanoutConfig;
  readonly #objects: ObjectStore;
  readonly #connections = new Map<string, Promise<Connection>>();
  readonly #views: LRUCache<string, Promise<OpenView>>;
  /** One lancedb cache for every view of this process, bounded by the configured size. */
  readonly #session: Session;
  #hits = 0;
  /** Index bytes of the views this process has prewarmed (started), by view name. */
  readonly #warmed = new Map<string, number>();
  #warmedBytes = 0;

  constructor(config: FanoutConfig, objects: ObjectStore) {
    this.#config = config;
    this.#objects = objects;
    this.#session = new Session(BigInt(Math.floor(config.indexCacheBytes)));
    this.#views = new LRUCache({
      max: config.viewCacheSize,
      dispose: (view, name) => {
        this.#warmedBytes -= this.#warmed.get(name) ?? 0;
        this.#warmed.delete(name);
        void view.then((v) => v.table.close()).catch(() => {});
      },
    });
  }

  /** Index bytes this process has prewarmed for its open views. */
  get prewarmedBytes(): number {
    return this.#warmedBytes;
  }

  /**
   * Loads the view's whole index into lancedb's cache once (unless `prewarm` is off or it does
   * not fit the budget), so later tasks on this view read no index data from storage. The
   * segment-search calls it after its search: a cold search does not compete with the load.
   */
  async prewarm(view: OpenView): Promise<void> {
    const bytes = view.indexBytes;
    // No bytes: a flat group's view (no index segment) or sizes the manifest does not record.
    if (this.#config.prewarm === "off" || !bytes || this.#warmed.has(view.name)) return;
    if (this.#warmedBytes + bytes > this.#config.indexCacheBytes * 0.8) return;
    this.#warmed.set(view.name, bytes);
    this.#warmedBytes += bytes;
    // A failed prewarm only costs speed: searches read from storage as they would without it.
    await view.table.prewarmIndex(view.indexName).catch(() => {});
  }

  /** Views served from this process's cache so far. */
  get hits(): number {
    return this.#hits;
  }

  /** Opens (creating or completing it if needed) and verifies the view of one group. */
  open(spec: ViewSpec): Promise<OpenView> {
    const name = viewName(spec);
    const cached = this.#views.get(name);
    if (cached) {
      this.#hits++;
      return cached;
    }
    const view = this.#ensure(name, spec);
    view.catch(() => this.#views.delete(name));
    this.#views.set(name, view);
    return view;
  }

  async #ensure(name: string, spec: ViewSpec): Promise<OpenView> {
    const root = this.#root(spec.dataset);
    const connection = await this.#connection(root, spec.dataset.kind);
    const uri = `${root}/${name}.lance`;
    let table = (await openIfExists(connection, name)) ?? (await clone(connection, name, spec));
    let group: readonly ManifestSegment[];
    try {
      group = await this.#restrict(table, uri, spec);
    } catch (err) {
      if (!(err instanceof StaleView)) throw err;
      // Not what its name promises (damaged, or written by something else): build it anew.
      table.close();
      await connection.dropTable(name).catch(() => {});
      table = await clone(connection, name, spec);
      group = await this.#restrict(table, uri, spec);
    }
    const index = (await table.listIndices()).find((i) => i.name === spec.indexName);
    if (index && OWN_INDEX_FILES.has(index.indexType)) {
      await this.#copyIndexFiles(spec.dataset.uri, uri, group);
    }
    const searchedSegments = index?.numSegments ?? 0;
    if (searchedSegments !== spec.segments.length) {
      throw new FanoutError(
        "INTERNAL",
        `view ${name} holds ${searchedSegments} index segments, expected ${spec.segments.length}`,
      );
    }
    const view = {
      name,
      table,
      searchedSegments,
      indexName: spec.indexName,
      indexBytes: indexBytes(group),
    };
    if (this.#config.prewarm === "eager") await this.prewarm(view);
    return view;
  }

  /**
   * Deletes the fragments outside the group (a no-op for a finished view), then verifies.
   * Answers the group's index segments as the view's manifest lists them.
   */
  async #restrict(table: Table, uri: string, spec: ViewSpec): Promise<ManifestSegment[]> {
    const keep = new Set(spec.fragments);
    for (let attempt = 0; ; attempt++) {
      const manifest = await readManifest(this.#objects, uri, await table.version());
      const live = manifest.fragments.map((f) => f.id);
      const missing = spec.fragments.filter((id) => !live.includes(id));
      if (missing.length > 0)
        throw new StaleView(`view ${uri} lacks fragments ${missing.join(", ")}`);
      const group = manifest.segments.filter(
        (s) => s.name === spec.indexName && s.fragmentIds?.some((id) => keep.has(id)),
      );
      const effective = group.map((s) => s.uuid).sort();
      if (effective.join() !== spec.segments.join()) {
        throw new StaleView(`view ${uri} covers segments ${effective.join(", ")}`);
      }
      // Lance searches the first vector index on a column: keep only the chosen one.
      const others = new Set(
        manifest.segments
          .filter((s) => s.metric !== null && s.name !== spec.indexName)
          .map((s) => s.name),
      );
      if (live.length === keep.size && others.size === 0) return group;
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

  /** Copies the group's index files from the dataset into the view (see OWN_INDEX_FILES). */
  async #copyIndexFiles(
    datasetUri: string,
    viewUri: string,
    group: readonly ManifestSegment[],
  ): Promise<void> {
    const files = group.flatMap((s) => s.files.map((f) => `_indices/${s.uuid}/${f}`));
    if (group.some((s) => s.files.length === 0)) {
      throw new FanoutError("INTERNAL", `the manifest of ${viewUri} does not list its index files`);
    }
    await Promise.all(
      files.map(async (file) => {
        const from = `${datasetUri}/${file}`;
        if (!(await this.#objects.copyIfMissing(from, `${viewUri}/${file}`))) {
          throw new FanoutError("INTERNAL", `index file ${from} not found`);
        }
      }),
    );
  }

  #root(dataset: DatasetLocation): string {
    if (dataset.kind === "local") return this.#config.localViewRoot;
    if (!this.#config.s3ViewPrefix) {
      throw new FanoutError(
        "INTERNAL",
        "LANCE_FANOUT_S3_VIEW_PREFIX is not set: S3 datasets need a writable view prefix",
      );
    }
    // lancedb 0.31 writes cross-bucket shallow clones to the wrong store: same bucket only.
    return `s3://${splitS3Uri(dataset.uri).bucket}/${this.#config.s3ViewPrefix}`;
  }

  #connection(root: string, kind: "s3" | "local"): Promise<Connection> {
    let connection = this.#connections.get(root);
    if (!connection) {
      connection = connectDatabase(root, kind, this.#config.s3, { session: this.#session });
      connection.catch(() => this.#connections.delete(root));
      this.#connections.set(root, connection);
    }
    return connection;
  }
}

/**
 * Index types whose files Lance 8 (lancedb 0.31) opens under the view's own `_indices/` instead
 * of the dataset the view was cloned from, so a view needs its own copy of the group's files
 * (server-side on S3, once per view). The others follow the clone's base path.
 */
const OWN_INDEX_FILES: ReadonlySet<string> = new Set(["IvfRq"]);

function indexBytes(segments: readonly ManifestSegment[]): number | null {
  let sum = 0;
  for (const s of segments) {
    if (s.sizeBytes === null) return null;
    sum += s.sizeBytes;
  }
  return sum;
}

/** A view whose contents do not match its name. */
class StaleView extends FanoutError {
  constructor(message: string) {
    super("INTERNAL", message);
  }
}

/**
 * Shallow-clones the pinned version under `name`. Another process may have created it first, or
 * (S3) lancedb re-opens the clone without its storage options and throws although the clone is
 * there: then open it as usual.
 */
async function clone(connection: Connection, name: string, spec: ViewSpec): Promise<Table> {
  try {
    return await connection.cloneTable(name, spec.dataset.uri, {
      sourceVersion: spec.version,
      isShallow: true,
    });
  } catch (err) {
    const table = await openIfExists(connection, name);
    if (table) return table;
    throw err;
  }
}

async function openIfExists(connection: Connection, name: string): Promise<Table | undefined> {
  try {
    return await connection.openTable(name);
  } catch (err) {
    if (/not found|does not exist/i.test(String(err))) return undefined;
    throw err;
  }
}
