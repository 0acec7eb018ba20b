/**
 * The prewarm budget of one generation of lancedb caches: which open views had their whole
 * index loaded, and how many index bytes that holds. Each view counts in full: lancedb keys its
 * cache by the view's URI, so two views of one segment hold two copies of its index.
 * @module
 */
import { readFooters } from "../lance/tables.js";
import type { OpenView } from "./materialize.js";

export class PrewarmBudget {
  readonly #limitBytes: number;
  /** Index bytes of each prewarmed view, by view name. */
  readonly #views = new Map<string, number>();

  constructor(limitBytes: number) {
    this.#limitBytes = limitBytes;
  }

  /** Index bytes prewarmed for the open views. */
  get bytes(): number {
    let sum = 0;
    for (const bytes of this.#views.values()) sum += bytes;
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
    const bytes = segments.reduce((sum, [, size]) => sum + size, 0);
    if (this.bytes + bytes > this.#limitBytes) return;
    this.#views.set(view.name, bytes);
    const index = segments.length > 0 ? view.table.prewarmIndex(view.indexName) : undefined;
    await Promise.all([
      index?.catch(() => this.release(view.name)),
      readFooters(view.table, view.firstRows).catch(() => {}),
    ]);
  }

  /**
   * Forgets that a view was prewarmed (it was closed, or its load failed). lancedb keeps a
   * closed view's entries until the generation is renewed; `ViewCache.trim` bounds those.
   */
  release(name: string): void {
    this.#views.delete(name);
  }
}
