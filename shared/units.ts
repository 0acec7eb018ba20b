/**
 * The pieces of work the planner chooses and groups: index segments and, searched flat,
 * fragments no index covers.
 * @module
 */

/** One index segment as the planner sees it: the live fragments it covers and their rows. */
export interface Segment {
  readonly uuid: string;
  /** The dataset version the segment was built at: its place in creation order. */
  readonly created: number;
  readonly fragments: readonly number[];
  /** Live rows. */
  readonly rows: number;
  /** Rows including deleted ones (what the index holds; unchanged by deletes). */
  readonly physicalRows: number;
  /** Size of the segment's index files, or null when the manifest does not record it. */
  readonly indexBytes: number | null;
}

/** A fragment searched flat: its live and physical rows. */
export interface FlatFragment {
  readonly id: number;
  readonly rows: number;
  readonly physicalRows: number;
}
