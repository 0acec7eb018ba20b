/**
 * How the benchmark orders warm samples (bench/stats.ts twoPasses): every mode is measured early
 * and late in a run, so drift over the run cannot decide a ranking.
 */
import { describe, expect, it } from "vitest";
import { twoPasses } from "../stats.js";

describe("twoPasses", () => {
  it("splits the samples into halves, the second in reversed order", () => {
    const passes = twoPasses(["a", "b", "c"], 2, 7);
    expect(passes).toEqual([
      { order: ["a", "b", "c"], discard: 2, from: 2, to: 6 },
      { order: ["c", "b", "a"], discard: 1, from: 6, to: 9 },
    ]);
  });

  it("times every sample exactly once, and each pass warms up before it times", () => {
    const passes = twoPasses(["a", "b"], 3, 10);
    const timed = passes.flatMap((p) =>
      Array.from({ length: p.to - p.from }, (_, i) => p.from + i),
    );
    expect(timed).toEqual(Array.from({ length: 10 }, (_, i) => 3 + i));
    expect(passes.map((p) => p.discard)).toEqual([3, 1]);
  });

  it("discards nothing in the second pass when the run asks for no warm-up", () => {
    expect(twoPasses(["a"], 0, 4).map((p) => p.discard)).toEqual([0, 0]);
  });

  it("makes one pass of a single sample, and leaves the caller's order alone", () => {
    const order = ["a", "b"];
    expect(twoPasses(order, 1, 1)).toEqual([{ order: ["a", "b"], discard: 1, from: 1, to: 2 }]);
    twoPasses(order, 1, 4);
    expect(order).toEqual(["a", "b"]);
  });
});
