/**
 * This process's CPU time per phase of a query (parse, plan, encode, tasks, merge), for the
 * planner's log line: on Lambda a planner runs one query at a time, so the process's CPU between
 * two marks is the query's. In one process the tasks' own CPU falls in `tasks`.
 * @module
 */

export type Phase = "parse" | "plan" | "encode" | "tasks" | "merge";

export class CpuPhases {
  #last = process.cpuUsage();
  readonly #ms: Partial<Record<Phase, number>> = {};

  /** Ends `phase` now: the CPU since the previous mark (or the start) is its. */
  mark(phase: Phase): void {
    const used = process.cpuUsage(this.#last);
    this.#last = process.cpuUsage();
    this.#ms[phase] = (this.#ms[phase] ?? 0) + (used.user + used.system) / 1000;
  }

  /** CPU ms per phase, rounded to 0.01 ms. */
  report(): Partial<Record<Phase, number>> {
    return Object.fromEntries(
      Object.entries(this.#ms).map(([phase, ms]) => [phase, Math.round(ms * 100) / 100]),
    );
  }
}
