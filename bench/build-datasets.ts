/**
 * Builds (or finds cached) benchmark datasets: `tsx bench/build-datasets.ts synth-1m synth-many`.
 * `--scale 0.1` builds a scaled-down copy (rows, base and partitions / 10) to time a build first.
 * @module
 */
import { DATASETS, type DatasetSpec, ensureDataset } from "./datasets.js";

export function scaled(spec: DatasetSpec, scale: number): DatasetSpec {
  if (scale === 1) return spec;
  return {
    ...spec,
    name: `${spec.name}@${scale}`,
    rows: Math.round(spec.rows * scale),
    baseRows: Math.round(spec.baseRows * scale),
    partitions: Math.max(2, Math.round(spec.partitions * scale)),
  };
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const scaleAt = args.indexOf("--scale");
  const scale = scaleAt >= 0 ? Number(args.splice(scaleAt, 2)[1]) : 1;
  for (const name of args) {
    const spec = DATASETS[name];
    if (!spec)
      throw new Error(`unknown dataset ${name}; known: ${Object.keys(DATASETS).join(", ")}`);
    const info = await ensureDataset(scaled(spec, scale), (line) => console.log(line));
    console.log(JSON.stringify({ ...info, spec: undefined }));
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
