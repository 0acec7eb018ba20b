/**
 * The prewarm budget of one generation of lancedb caches: which open views had their whole
 * index loaded, and how many index bytes that holds, each segment counted once. A later view of
 * the same segments (after a commit elsewhere in the dataset) adds nothing, and a view that
 * leaves the cache gives its segments back.
 * @module
 */
import { readFooters } from "../lance/tables.js";
import type { OpenView } from "./materialize.js";

export class PrewarmBudget {
  readonly #limitBytes: number;
  /** Segments of each prewarmed view, by view name. */
  readonly #views = new Map<string, readonly string[]>();
  /** Prewarmed segments: their bytes and how many prewarmed views hold them. */
  readonly #segments = new Map<string, { bytes: number; views: number }>();

  constructor(limitBytes: number) {
    this.#limitBytes = limitBytes;
  }

  /** Index bytes prewarmed for the open views. */
  get bytes(): number {
    let sum = 0;
    for (const { bytes } of this.#segments.values()) sum += bytes;
    return sum;
  }

  /**
   * Loads the view's whole index into lancedb's cache once, if it fits the budget, and the
   * footers of its data files, which a task's first read of a fragment would otherwise fetch
   * before the rows themselves (one more round trip). A failed load is forgotten, so a later
   * search tries again; it only costs speed, as searches then read from storage.
   */
  async prewarm(view: OpenView): Promise<void> {
    if (this.#views.has(view.name)) return;
    // None: a flat group's view (no index segment) or sizes the manifest does not record.
    const segments = [...(view.segmentBytes ?? [])];
    let added = 0;
    for (const [uuid, size] of segments) if (!this.#segments.has(uuid)) added += size;
    if (this.bytes + added > this.#limitBytes) return;
    this.#views.set(
      view.name,
      segments.map(([uuid]) => uuid),
    );
    for (const [uuid, size] of segments) {
      const entry = this.#segments.get(uuid) ?? { bytes: size, views: 0 };
      entry.views++;
      this.#segments.set(uuid, entry);
    }
    const index = segments.length > 0 ? view.table.prewarmIndex(view.indexName) : undefined;
    await Promise.all([
      index?.catch(() => this.release(view.name)),
      readFooters(view.table, view.firstRows).catch(() => {}),
    ]);
  }

  /** Forgets that a view was prewarmed: it gives back its segments (unless other views hold them). */
  release(name: string): void {
    for (const uuid of this.#views.get(name) ?? []) {
      const entry = this.#segments.get(uuid);
      if (entry && --entry.views === 0) this.#segments.delete(uuid);
    }
    this.#views.delete(name);
  }
}
