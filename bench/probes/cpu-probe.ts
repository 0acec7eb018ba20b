/**
 * CPU per query, per mode (in-process, warm, sequential): `tsx bench/probes/cpu-probe.ts synth-many`.
 * Wall time on a busy machine says little about what fan-out could do on free cores; CPU time
 * per query is robust to other load and bounds the best fan-out speed-up on P free cores at
 * native CPU / (fan-out CPU / P).
 * @module
 */
import { join } from "node:path";
import { loadConfig } from "../../shared/config.js";
import type { SearchRequest } from "../../shared/request.js";
import { createRuntime } from "../../shared/runtime.js";
import { vectorSearch } from "../../shared/search.js";
import { CACHE_DIR, DATASETS, type DatasetSpec, ensureDataset, loadQueries } from "../datasets.js";
import { nativeSearch, openNative, PRODUCT_HAS_STRATEGY } from "../modes.js";

const name = process.argv[2] ?? "synth-many";
const count = Number(process.argv[3] ?? 20);
const info = await ensureDataset(DATASETS[name] as DatasetSpec);
const queries = await loadQueries(info, count);
const runtime = createRuntime(
  loadConfig({
    ...process.env,
    LANCE_FANOUT_VIEW_ROOT: join(CACHE_DIR, "views"),
    LANCE_FANOUT_MAX_TASKS: "1000",
    LANCE_FANOUT_PREWARM: "eager",
  }),
);
const table = await openNative(info.dir, {}, info.version, true);
const p = info.spec.search;
type Run = (q: number[]) => Promise<unknown>;
const widths = [...new Set([1, 2, 4, 8, info.segments])];
const modes: [string, Run][] = [
  ["native", (q) => nativeSearch(table, p, [q])],
  ...widths.map((g): [string, Run] => [
    `segments/${g}`,
    (q) =>
      vectorSearch(
        {
          dataset: info.uri,
          query: q,
          k: p.k,
          nprobes: p.nprobes,
          refineFactor: p.refineFactor,
          version: info.version,
          maxTasks: g,
          ...(PRODUCT_HAS_STRATEGY ? { strategy: "segments" } : {}),
        } as SearchRequest,
        { runtime },
      ),
  ]),
];
for (const [, run] of modes) for (const q of queries.slice(0, 3)) await run(q);
for (const [id, run] of modes) {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  for (const q of queries) await run(q);
  const cpu = process.cpuUsage(c0);
  const wall = (performance.now() - t0) / queries.length;
  const cpuMs = (cpu.user + cpu.system) / 1000 / queries.length;
  console.log(
    `${name} ${id.padEnd(12)} wall ${wall.toFixed(1)} ms/query, CPU ${cpuMs.toFixed(1)} ms/query, ` +
      `cores used ${(cpuMs / wall).toFixed(2)}`,
  );
}
process.exit(0);
