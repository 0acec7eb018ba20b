/**
 * One cold native search in a fresh process (spawned by run.ts): connect, open, checkout and
 * search with empty caches. Prints one JSON line: init (module load) and search milliseconds.
 * Input: a JSON argument { dbUri, storageOptions, version, params, queries }.
 * @module
 */
const t0 = performance.now();
const { nativeSearch, openNative } = await import("./modes.js");
const t1 = performance.now();
const input = JSON.parse(process.argv[2] ?? "{}") as {
  dbUri: string;
  storageOptions: Record<string, string>;
  version: number;
  params: { k: number; nprobes: number; refineFactor: number };
  queries: number[][];
};
const started = performance.now();
const table = await openNative(input.dbUri, input.storageOptions, input.version);
const ids = await nativeSearch(table, input.params, input.queries);
const ms = performance.now() - started;
table.close();
const usage = process.resourceUsage();
process.stdout.write(
  `${JSON.stringify({
    initMs: t1 - t0,
    ms,
    ids,
    peakRssMiB: Math.round(usage.maxRSS / 1024),
    userCpuMs: Math.round(usage.userCPUTime / 1000),
    systemCpuMs: Math.round(usage.systemCPUTime / 1000),
    pid: process.pid,
  })}\n`,
);
process.exit(0);
