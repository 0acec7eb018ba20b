import { describe, expect, test } from "vitest";
import { groupFragments, groupSegments, SEGMENT_COST, segmentCost } from "../shared/grouping.js";
import type { Segment } from "../shared/units.js";

const uuid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`;
/** Segment i, created at version i (creation order = index order). */
const segment = (i: number, rows: number, fragments = [i]): Segment => ({
  uuid: uuid(i),
  created: i,
  rows,
  physicalRows: rows,
  indexBytes: null,
  fragments,
});

/** Round-robin over segments in uuid order: what the planner must beat. */
function roundRobinMaxCost(segments: readonly Segment[], groups: number): number {
  const costs = Array<number>(groups).fill(0);
  segments.forEach((s, i) => {
    costs[i % groups] = (costs[i % groups] ?? 0) + segmentCost(1, s.rows);
  });
  return Math.max(...costs);
}

describe("groupSegments", () => {
  test("balances uneven segments better than round-robin", () => {
    const segments = [100_000, 1_000, 90_000, 1_000, 80_000, 1_000, 70_000, 2_000].map((rows, i) =>
      segment(i, rows),
    );
    const groups = groupSegments(segments, 2);
    const costs = groups.map((g) => g.cost);
    expect(Math.max(...costs)).toBeLessThan(roundRobinMaxCost(segments, 2));
    expect(Math.max(...costs) / Math.min(...costs)).toBeLessThan(1.1);
    expect(groups.flatMap((g) => g.segments).sort()).toEqual(segments.map((s) => s.uuid));
  });

  test("counts a fixed cost per segment, so many small segments are not piled onto one task", () => {
    // One big segment against eight tiny ones: by rows alone all tiny ones would share a task
    // with nothing else, yet each costs a segment's fixed overhead.
    const segments = [
      segment(0, 400_000),
      ...Array.from({ length: 8 }, (_, i) => segment(i + 1, 100)),
    ];
    const groups = groupSegments(segments, 3);
    const withBig = groups.find((g) => g.segments.includes(uuid(0)));
    expect(withBig?.segments).toHaveLength(1);
    const small = groups.filter((g) => g !== withBig).map((g) => g.segments.length);
    expect(small.sort()).toEqual([4, 4]);
    expect(SEGMENT_COST.perSegment).toBeGreaterThan(10_000);
  });

  test("an appended segment joins one group and leaves every other group as it was", () => {
    const before = [120_000, 30_000, 8_000, 50_000, 9_000, 12_000].map((r, i) => segment(i, r));
    const after = [...before, segment(6, 20_000)];
    for (const width of [2, 3, 4]) {
      const old = groupSegments(before, width);
      const now = groupSegments(after, width);
      const changed = now.filter((g, i) => JSON.stringify(g) !== JSON.stringify(old[i]));
      expect(changed).toHaveLength(1);
      expect(changed[0]?.segments).toContain(uuid(6));
    }
    // Below the width a new segment opens its own group; the others stay.
    const wide = groupSegments(after, 10);
    expect(wide.slice(0, 6)).toEqual(groupSegments(before, 10));
    expect(wide[6]?.segments).toEqual([uuid(6)]);
  });

  test("deletes change no group: balance is on physical rows", () => {
    const segments = [90_000, 40_000, 30_000, 20_000, 10_000].map((r, i) => segment(i, r));
    const deleted = segments.map((s, i) => (i === 1 ? { ...s, rows: 1_000 } : s));
    const strip = (groups: readonly { segments: readonly string[] }[]) =>
      groups.map((g) => g.segments);
    expect(strip(groupSegments(deleted, 2))).toEqual(strip(groupSegments(segments, 2)));
  });

  test("is deterministic whatever the input order", () => {
    const segments = [5, 9, 3, 7, 7, 1, 2].map((r, i) => segment(i, r * 10_000));
    const a = groupSegments(segments, 3);
    const b = groupSegments([...segments].reverse(), 3);
    expect(b).toEqual(a);
  });

  test("makes min(segments, maxGroups) groups", () => {
    const segments = [1, 2, 3].map((r, i) => segment(i, r));
    expect(groupSegments(segments, 10)).toHaveLength(3);
    expect(groupSegments(segments, 2)).toHaveLength(2);
    expect(groupSegments(segments, 1)[0]?.segments).toHaveLength(3);
  });

  test("keeps segments that share a fragment in one group", () => {
    const segments = [
      segment(0, 10, [1, 2]),
      segment(1, 10, [2]),
      segment(2, 10, [3]),
      segment(3, 10, [4]),
    ];
    const groups = groupSegments(segments, 4);
    expect(groups).toHaveLength(3);
    expect(groups.some((g) => g.segments.includes(uuid(0)) && g.segments.includes(uuid(1)))).toBe(
      true,
    );
  });

  test("rejects a non-positive group count", () => {
    expect(() => groupSegments([segment(0, 1)], 0)).toThrow(TypeError);
  });
});

describe("groupFragments", () => {
  test("spreads unindexed fragments over groups by rows, each fragment once", () => {
    const fragments = [9000, 1000, 5000, 4000, 1000].map((rows, id) => ({
      id,
      rows,
      physicalRows: rows,
    }));
    const groups = groupFragments(fragments, 2);
    expect(groups.map((g) => g.rows).sort()).toEqual([10_000, 10_000]);
    expect(groups.flatMap((g) => g.fragments).sort()).toEqual([0, 1, 2, 3, 4]);
    expect(groups.every((g) => g.segments.length === 0)).toBe(true);
    expect(groupFragments(fragments, 8)).toHaveLength(5);
  });
});
