/**
 * The words `plan.reason` gives for a plan: what the cost model weighed and its estimates.
 */
import { describe, expect, test } from "vitest";
import type { Group } from "../shared/grouping.js";
import { planReason, type ReasonFacts } from "../shared/plan-reason.js";
import type { Split } from "../shared/strategy.js";

const MIB = 1024 * 1024;

function group(indexBytes: number | null): Group {
  return { segments: ["s"], fragments: [0], rows: 1000, cost: 1000, indexBytes };
}

function split(groups: Group[], considered: Split["considered"]): Split {
  return {
    strategy: groups.length > 1 ? "segments" : "single",
    groups,
    chunks: [[0, 1]],
    estimatedMs: 12.345,
    refineInMerge: false,
    considered,
  };
}

const facts: ReasonFacts = {
  requested: "auto",
  kind: "index",
  units: 8,
  cachedPerFileByte: 1,
  queries: 1,
  profile: { indexCacheBytes: 4 * MIB, slots: 4 },
};

const weighed: Split["considered"] = [
  { strategy: "single", groups: 1, chunks: 1, estimatedMs: 678 },
  { strategy: "segments", groups: 2, chunks: 1, estimatedMs: 12.345 },
  { strategy: "segments", groups: 8, chunks: 1, estimatedMs: 117.2 },
];

describe("planReason", () => {
  test("a fan-out names the index's bytes against the cache, the slots and the other plans", () => {
    const reason = planReason(split([group(1.5 * MIB), group(1.5 * MIB)], weighed), {
      ...facts,
      cachedPerFileByte: 1.8,
    });
    expect(reason).toBe(
      "2 groups (2 tasks), est. 12 ms: the lowest estimate of the 3 plans auto weighed. " +
        "The index is 3.0 MiB in 8 segments (about 5.4 MiB in a cache); a segment-search " +
        "environment caches 4.0 MiB, over 4 slots. It is 1.4 caches large: groups spread over " +
        "the slots keep their share of it cached instead of reading it from storage on every " +
        "query. Other plans: 8 groups (8 tasks) est. 117 ms; 1 task est. 678 ms.",
    );
  });

  test("an index that fits one cache keeps one task", () => {
    const reason = planReason(split([group(MIB)], weighed.slice(0, 1)), facts);
    expect(reason).toMatch(/^1 task, est\. 12 ms: the only plan auto could weigh\./);
    expect(reason).toContain("It fits one cache: more groups would add invokes");
  });

  test("with one slot, more groups hold no more of an index over the cache", () => {
    const reason = planReason(split([group(10 * MIB)], weighed), {
      ...facts,
      profile: { indexCacheBytes: 4 * MIB, slots: 1 },
    });
    expect(reason).toContain("with one slot every environment holds every group");
    expect(reason).toContain("about 3 slots would hold it all: segmentSearchSlots");
  });

  test("a requested strategy, an unrecorded size, one segment and a batch are said so", () => {
    const reason = planReason(split([group(null)], []), {
      ...facts,
      requested: "single",
      units: 1,
      queries: 100,
    });
    expect(reason).toContain('strategy "single" was asked for');
    expect(reason).toContain("does not record its size");
    expect(reason).toContain("One segment: an index is split by segment only");
    expect(reason).toContain("100 queries: a batch can also split into chunks");
  });

  test("without an index, fragments are searched exactly", () => {
    const reason = planReason(split([group(0)], []), { ...facts, kind: "flat", units: 3 });
    expect(reason).toContain("No vector index to split: 3 fragments are searched exactly.");
  });
});
