/**
 * Groups index segments (or, without an index, fragments) into balanced task groups that stay
 * put while the dataset changes: units are taken in the order they were created, each into the
 * group with the lowest cost so far, costed by physical rows. A later segment or fragment comes
 * last, so every earlier assignment stays; a delete changes no physical row count. Every view
 * of an unchanged group survives a commit (shared/views/identity.ts names views by content).
 * Pure and deterministic: equal inputs give equal groups.
 * @module
 */
import type { FlatFragment, Segment } from "./units.js";

/**
 * Estimated cost of searching a segment, in row-equivalents. A segment has a fixed cost
 * (opening its IVF structure, ranking its partitions, one more delta to merge) comparable to tens
 * of thousands of rows (measured: a 30k-row and a 150k-row segment search in 3.2 and 3.5 ms).
 * Calibrated by the benchmark; keep both constants here.
 */
export const SEGMENT_COST = { perRow: 1, perSegment: 50_000 } as const;

export interface Group {
  /** Segment uuids, sorted. */
  readonly segments: readonly string[];
  /** Live fragments covered by the group's segments, sorted. */
  readonly fragments: readonly number[];
  /** Live rows. */
  readonly rows: number;
  /** Estimated cost in row-equivalents of its physical rows (see {@link SEGMENT_COST}). */
  readonly cost: number;
  /** Size of its segments' index files; 0 for fragments searched flat; null when not recorded. */
  readonly indexBytes: number | null;
}

export function segmentCost(segments: number, rows: number): number {
  return segments * SEGMENT_COST.perSegment + rows * SEGMENT_COST.perRow;
}

/**
 * Segments that share a fragment must be searched together (a view keeps every segment that
 * covers one of its fragments), so they form one unit before grouping.
 */
function units(segments: readonly Segment[]): Segment[][] {
  const byFragment = new Map<number, Segment[]>();
  const unitOf = new Map<Segment, Set<Segment>>();
  for (const segment of segments) {
    let unit = new Set([segment]);
    for (const id of segment.fragments) {
      for (const other of byFragment.get(id) ?? []) {
        const otherUnit = unitOf.get(other);
        if (otherUnit && otherUnit !== unit) {
          for (const s of unit) otherUnit.add(s);
          for (const s of unit) unitOf.set(s, otherUnit);
          unit = otherUnit;
        }
      }
      byFragment.set(id, [...(byFragment.get(id) ?? []), segment]);
    }
    unitOf.set(segment, unit);
  }
  return [...new Set(unitOf.values())].map((u) => [...u]);
}

/**
 * Assigns segments to at most `maxGroups` groups in creation order (dataset version, then uuid),
 * each to the group with the lowest cost so far (ties: lowest group index).
 */
export function groupSegments(segments: readonly Segment[], maxGroups: number): Group[] {
  return pack(
    units(segments).map((unit) => ({
      key: unit.map((s) => `${String(s.created).padStart(16, "0")}:${s.uuid}`).sort()[0] as string,
      segments: unit.map((s) => s.uuid),
      fragments: unit.flatMap((s) => s.fragments),
      rows: unit.reduce((sum, s) => sum + s.rows, 0),
      cost: segmentCost(
        unit.length,
        unit.reduce((sum, s) => sum + s.physicalRows, 0),
      ),
      indexBytes: sumOrNull(unit.map((s) => s.indexBytes)),
    })),
    maxGroups,
  );
}

/**
 * Assigns fragments searched flat (no index) to at most `maxGroups` groups by the same rule, in
 * fragment id order (their creation order), so a dataset without an index still fans out.
 */
export function groupFragments(fragments: readonly FlatFragment[], maxGroups: number): Group[] {
  return pack(
    fragments.map((f) => ({
      key: String(f.id).padStart(16, "0"),
      segments: [],
      fragments: [f.id],
      rows: f.rows,
      cost: segmentCost(0, f.physicalRows),
      indexBytes: 0,
    })),
    maxGroups,
  );
}

/** One indivisible piece of work; `key` is its creation order. */
interface Item extends Group {
  readonly key: string;
}

/** List scheduling in creation order into at most `maxGroups` groups; empty groups dropped. */
function pack(items: readonly Item[], maxGroups: number): Group[] {
  if (!Number.isInteger(maxGroups) || maxGroups < 1) {
    throw new TypeError(`Expected \`maxGroups\` to be a positive integer, got ${maxGroups}`);
  }
  const sorted = [...items].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const bins = Array.from({ length: Math.min(maxGroups, items.length) }, () => ({
    segments: [] as string[],
    fragments: [] as number[],
    rows: 0,
    cost: 0,
    indexBytes: [] as (number | null)[],
  }));
  for (const item of sorted) {
    const bin = bins.reduce((best, b) => (b.cost < best.cost ? b : best));
    bin.segments.push(...item.segments);
    bin.fragments.push(...item.fragments);
    bin.rows += item.rows;
    bin.cost += item.cost;
    bin.indexBytes.push(item.indexBytes);
  }
  return bins.map((bin) => ({
    segments: bin.segments.sort(),
    fragments: [...new Set(bin.fragments)].sort((a, b) => a - b),
    rows: bin.rows,
    cost: bin.cost,
    indexBytes: sumOrNull(bin.indexBytes),
  }));
}

function sumOrNull(values: readonly (number | null)[]): number | null {
  let sum = 0;
  for (const v of values) {
    if (v === null) return null;
    sum += v;
  }
  return sum;
}
