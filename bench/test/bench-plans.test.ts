/**
 * What a benchmark block records of the plans its queries ran: the report tells `auto` running a
 * fixed mode's plan from a choice of its own by them, so a plan that changed inside a block must show.
 */
import { describe, expect, it } from "vitest";
import { timeQueries } from "../big-index.js";

const plan = (groups: number) => ({ groups, chunks: 1, refine: "none", signature: `s${groups}` });

describe("a big-index block", () => {
  it("records every plan its queries ran, in the order first seen, not only the last", async () => {
    const ran = [plan(6), plan(1), plan(6)];
    let i = 0;
    const timed = await timeQueries(async () => {
      const p = ran[i++] as ReturnType<typeof plan>;
      return { ids: ["1"], tasks: p.groups, plan: p };
    }, [[0], [1], [2]]);
    expect(timed.plans).toEqual([plan(6), plan(1)]);
    expect(timed.ms).toHaveLength(3);
  });

  it("records no plan for native answers", async () => {
    const timed = await timeQueries(async () => ({ ids: ["1"], tasks: 1 }), [[0]]);
    expect(timed.plans).toEqual([]);
  });
});
