/**
 * Hedged tasks: a task late against recent task times is sent once more, the first answer wins,
 * the other is abandoned, and a budget bounds the extra invokes.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, test } from "vitest";
import { Hedger } from "../shared/hedge.js";

/** An attempt answering `value` after `ms`, recording its start and whether it was aborted. */
function attemptOf(plan: { ms: number; value?: string; fails?: boolean }[]) {
  const log: { aborted: boolean }[] = [];
  const attempt = async (signal: AbortSignal) => {
    const step = plan[log.length] ?? { ms: 0 };
    const entry = { aborted: false };
    const number = log.push(entry);
    signal.addEventListener("abort", () => {
      entry.aborted = true;
    });
    await sleep(step.ms);
    if (step.fails) throw new Error(`attempt ${number} failed`);
    return step.value ?? "answer";
  };
  return { attempt, log };
}

/** A hedger that has seen `n` fast tasks. */
async function warmed(n = 20, settings = {}) {
  const hedger = new Hedger({ floorMs: 40, ...settings });
  for (let i = 0; i < n; i++) await hedger.run("k", async () => "fast");
  return hedger;
}

describe("Hedger", () => {
  test("sends nothing twice before it knows enough task times", async () => {
    const hedger = await warmed(5);
    expect(hedger.delayMs("k")).toBeUndefined();
    const { attempt, log } = attemptOf([{ ms: 150 }]);
    expect(await hedger.run("k", attempt)).toBe("answer");
    expect(log).toHaveLength(1);
    expect(hedger.hedged).toBe(0);
  });

  test("a late task is sent again; the first answer wins and the other is abandoned", async () => {
    const hedger = await warmed();
    expect(hedger.delayMs("k")).toBe(40);
    // Tasks of another key (another dataset, slot or batch size) have no times yet.
    expect(hedger.delayMs("other")).toBeUndefined();
    const { attempt, log } = attemptOf([
      { ms: 2_000, value: "straggler" },
      { ms: 10, value: "hedge" },
    ]);
    const started = performance.now();
    expect(await hedger.run("k", attempt)).toBe("hedge");
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(log).toEqual([{ aborted: true }, { aborted: true }]);
    expect(hedger.hedged).toBe(1);
  });

  test("the budget bounds the extra invokes: 5% of the tasks", async () => {
    const hedger = await warmed(20, { budget: 0.05 });
    const slow = () => attemptOf([{ ms: 80 }, { ms: 1 }]).attempt;
    await hedger.run("k", slow());
    await hedger.run("k", slow());
    // 21 tasks at 0.05 earn one hedge; the second straggler waits for its own answer.
    expect(hedger.hedged).toBe(1);
    for (let i = 0; i < 18; i++) await hedger.run("k", async () => "fast");
    await hedger.run("k", slow());
    expect(hedger.hedged).toBe(2);
  });

  test("fails only when every attempt failed, with the first one's error", async () => {
    const hedger = await warmed();
    const both = attemptOf([
      { ms: 100, fails: true },
      { ms: 10, fails: true },
    ]);
    await expect(hedger.run("k", both.attempt)).rejects.toThrow("attempt 1 failed");
    const second = await warmed();
    const one = attemptOf([
      { ms: 100, fails: true },
      { ms: 10, value: "hedge" },
    ]);
    expect(await second.run("k", one.attempt)).toBe("hedge");
  });

  test("the query's deadline aborts every attempt", async () => {
    const hedger = await warmed();
    const deadline = new AbortController();
    const attempt = (signal: AbortSignal) =>
      new Promise<string>((_, reject) =>
        signal.addEventListener("abort", () => reject(signal.reason)),
      );
    const running = hedger.run("k", attempt, deadline.signal);
    setTimeout(() => deadline.abort(new Error("deadline")), 100);
    await expect(running).rejects.toThrow("deadline");
    expect(hedger.hedged).toBe(1);
  });
});
