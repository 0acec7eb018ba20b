/**
 * The CPU a query takes per phase, as the planner logs it (`cpuMs`): every phase of a search is
 * marked, in order, and a phase's CPU is what the process used in it.
 */
import { describe, expect, test } from "vitest";
import { CpuPhases } from "../shared/cpu-phases.js";
import { vectorSearch } from "../shared/search.js";
import { makeDataset, queries, testRuntime } from "./support/fixtures.js";

describe("CpuPhases", () => {
  test("a phase gets the CPU used since the previous mark", () => {
    const cpu = new CpuPhases();
    // 20 ms of this process's CPU, however busy the machine is.
    const start = process.cpuUsage();
    while (process.cpuUsage(start).user < 20_000) Math.sqrt(Math.random());
    cpu.mark("plan");
    cpu.mark("encode");
    const report = cpu.report();
    expect(report.plan).toBeGreaterThanOrEqual(20);
    expect(report.encode).toBeLessThan(report.plan ?? 0);
  });

  test("a search marks parse, plan, encode, tasks and merge; explain stops after plan", async () => {
    const ds = await makeDataset({ rounds: [3000, 2000] });
    const runtime = await testRuntime();
    const [query = []] = queries(1, 3);
    const cpu = new CpuPhases();
    await vectorSearch({ dataset: ds.uri, query, k: 5, select: ["id"] }, { runtime, cpu });
    expect(Object.keys(cpu.report())).toEqual(["parse", "plan", "encode", "tasks", "merge"]);
    const explained = new CpuPhases();
    await vectorSearch(
      { dataset: ds.uri, query, k: 5, explain: true },
      { runtime, cpu: explained },
    );
    expect(Object.keys(explained.report())).toEqual(["parse", "plan"]);
  });
});
