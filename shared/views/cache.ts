/**
 * The views a process holds open, in one generation of lancedb caches at a time, and the
 * renewal that starts a new generation once the caches hold views no longer used.
 * @module
 */
import type { Session } from "@lancedb/lancedb";
import { LRUCache } from "lru-cache";
import pLimit from "p-limit";
import { cachedPromise } from "../cached.js";
import type { FanoutConfig } from "../config.js";
import type { DatasetLocation } from "../dataset.js";
import { type Connection, collectGarbage, connectDatabase, newSession } from "../lance/connect.js";
import type { ObjectStore } from "../objects.js";
import { type ViewSpec, viewFolder, viewName, viewRoot } from "./identity.js";
import { materializeView, type OpenView } from "./materialize.js";
import { PrewarmBudget } from "./prewarm.js";

/**
 * lancedb's caches, the connections that fill them, the views opened through those and what
 * was prewarmed into them: one generation at a time (see {@link ViewCache.warm}).
 */
interface Generation {
  /** One lancedb cache for every view of the generation, bounded by the configured sizes. */
  readonly session: Session;
  readonly connections: Map<string, Promise<Connection>>;
  readonly views: LRUCache<string, Promise<OpenView>>;
  readonly prewarmed: PrewarmBudget;
  /** The caches' entries and bytes when last measured (see {@link ViewCache.trim}). */
  measured: { readonly items: number; readonly bytes: number };
}

/**
 * Caches are renewed once they hold more than their fresh size plus this share of the index
 * cache's bound (16 MiB in a segment-search of 2048 MB), so that they are not reloaded on every
 * commit that replaces a view.
 */
const RENEW_SLACK = 1 / 64;

/** Views are prewarmed while their index files fit in this share of the index cache. */
const PREWARM_SHARE = 0.8;

/**
 * lancedb's own bound, as a multiple of the process's. lancedb weighs each IVF_PQ partition it
 * caches with the codebook (256 centroids x the dimension) counted again: on synth-1m (128-d,
 * 20 segments) an index holding 31.7 MiB needed a bound of 8-12 times that, and a process at a
 * segment-search's 1 GiB evicted and re-read index files on every query while holding ~113 MiB. So
 * lancedb gets a bound it does not reach, and {@link ViewCache.trim} bounds the caches by what
 * they hold (`sizeBytes`, which counts shared buffers once and follows the process's RSS).
 */
const LANCEDB_BOUND_FACTOR = 1024;

/** The caches' size is measured again once their entries grow by this factor. */
const REMEASURE_GROWTH = 1.25;

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
    const prewarmed = new PrewarmBudget(this.#config.indexCacheBytes * PREWARM_SHARE);
    return {
      session: newSession(
        this.#config.indexCacheBytes * LANCEDB_BOUND_FACTOR,
        this.#config.metadataCacheBytes,
      ),
      connections: new Map(),
      views: new LRUCache({
        max: this.#config.viewCacheSize,
        dispose: (view, name) => {
          prewarmed.release(name);
          void view.then((v) => v.table.close()).catch(() => {});
        },
      }),
      prewarmed,
      measured: { items: 0, bytes: 0 },
    };
  }

  /**
   * Opens and loads every view of `specs` (a version's views, from a warm task), at most
   * `concurrency` at once; answers how many were not open yet. First it starts a new
   * generation of lancedb caches when they hold more than the slack over what the open views
   * needed when they were last loaded afresh: lancedb keys its caches by view URI and evicts
   * only at their size bound, so the views each commit replaces would otherwise stay until
   * then. The views are then loaded again into the new caches, off the query path.
   */
  async warm(specs: readonly ViewSpec[], concurrency: number): Promise<number> {
    const slack = this.#config.indexCacheBytes * RENEW_SLACK;
    const renewed = this.cachedBytes > this.#freshBytes + slack;
    if (renewed) await this.#renew();
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
   * Starts a new generation once lancedb's caches hold more than the index cache's bound, as
   * lancedb itself does not evict below {@link LANCEDB_BOUND_FACTOR} times it. `sizeBytes` does
   * not tell index entries from metadata ones, so both count against it (the metadata of a
   * process's views is small; prewarms fill at most {@link PREWARM_SHARE} of it). Called after
   * each task, so a process holds at most its bound and one task's reads. Answers whether it
   * renewed.
   */
  async trim(): Promise<boolean> {
    const bound = this.#config.indexCacheBytes;
    if (this.#projectedBytes() <= bound || this.#measure() <= bound) return false;
    await this.#renew();
    this.#freshBytes = 0;
    return true;
  }

  /**
   * The caches' bytes as last measured, scaled by their entry count (kept by lancedb, free to
   * read); none (infinite) once the entries have grown by a quarter since, which calls for a
   * measure (`sizeBytes` walks every entry: ~16 ms at 10,000). A process whose views are all
   * loaded adds no entry, and measures nothing.
   */
  #projectedBytes(): number {
    const items = this.#generation.session.approxNumItems();
    const last = this.#generation.measured;
    const fresh = last.items > 0 && items < last.items * REMEASURE_GROWTH;
    return fresh ? (last.bytes / last.items) * items : Number.POSITIVE_INFINITY;
  }

  #measure(): number {
    const items = this.#generation.session.approxNumItems();
    const bytes = this.cachedBytes;
    this.#generation.measured = { items, bytes };
    return bytes;
  }

  /**
   * A new generation of caches. The old one is not closed: a search still using one of its
   * views finishes, and lancedb frees its caches once unreferenced (see {@link collectGarbage}).
   */
  async #renew(): Promise<void> {
    this.#generation = this.#newGeneration();
    await collectGarbage();
  }

  /** Index bytes this process has prewarmed for its open views. */
  get prewarmedBytes(): number {
    return this.#generation.prewarmed.bytes;
  }

  /**
   * Loads the view's whole index and its data files' footers into lancedb's cache once (unless
   * `prewarm` is off or it does not fit the budget), so later tasks on this view read no index
   * data from storage. The segment-search calls it after its search: a cold search does not
   * compete with the load.
   */
  async prewarm(view: OpenView): Promise<void> {
    if (this.#config.prewarm === "off") return;
    await this.#generation.prewarmed.prewarm(view);
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
    if (views.has(name)) this.#hits++;
    return cachedPromise(views, name, () => this.#materialize(spec));
  }

  /** Whether this process has the view open (or opening) already. */
  isOpen(spec: ViewSpec): boolean {
    return this.#generation.views.has(viewName(spec));
  }

  /** Forgets an open view (e.g. its files were collected): the next open verifies it anew. */
  evict(view: OpenView): void {
    this.#generation.views.delete(view.name);
  }

  async #materialize(spec: ViewSpec): Promise<OpenView> {
    const folder = `${viewRoot(this.#config, spec.dataset)}/${viewFolder(spec.dataset)}`;
    const connection = await this.#connection(folder, spec.dataset);
    const view = await materializeView(connection, folder, spec, this.#objects);
    if (this.#config.prewarm === "eager") await this.prewarm(view);
    return view;
  }

  #connection(folder: string, dataset: DatasetLocation): Promise<Connection> {
    const { connections, session } = this.#generation;
    return cachedPromise(connections, folder, () =>
      connectDatabase(folder, dataset.kind, this.#config.s3, { session }),
    );
  }
}
