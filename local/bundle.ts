/**
 * Bundles the handlers and the worker entry with esbuild, as CDK's NodejsFunction does for
 * Lambda, so local workers start as plain Node processes (no TypeScript loader on each start).
 * @module
 */
import { mkdir } from "node:fs/promises";
import { extname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const HERE = fileURLToPath(import.meta.url);
/** The sources (under tsx) or the build (`dist/`, for the `fanout` bin): same layout either way. */
const ROOT = resolve(HERE, "../..");
const EXT = extname(HERE);

export interface FunctionBundles {
  readonly worker: string;
  readonly planner: string;
  readonly segmentSearch: string;
  readonly merge: string;
  readonly gc: string;
}

/**
 * Writes the bundles under `node_modules/.cache/lance-fanout`, where Node resolves the native
 * lancedb package (left external, like in the Lambda asset) from the repository's node_modules.
 */
export async function bundleFunctions(): Promise<FunctionBundles> {
  const outdir = join(ROOT, "node_modules", ".cache", "lance-fanout", "functions");
  await mkdir(outdir, { recursive: true });
  const entryPoints = {
    worker: join(ROOT, "local", `worker${EXT}`),
    planner: join(ROOT, "functions", "planner", `handler${EXT}`),
    "segment-search": join(ROOT, "functions", "segment-search", `handler${EXT}`),
    merge: join(ROOT, "functions", "merge", `handler${EXT}`),
    gc: join(ROOT, "functions", "gc", `handler${EXT}`),
  };
  await build({
    entryPoints,
    outdir,
    outExtension: { ".js": ".mjs" },
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    sourcemap: "inline",
    external: ["@lancedb/lancedb", "apache-arrow"],
    // CommonJS dependencies call require(); give the ESM bundle one.
    banner: {
      js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    },
    logLevel: "error",
  });
  const file = (name: string) => join(outdir, `${name}.mjs`);
  return {
    worker: file("worker"),
    planner: file("planner"),
    segmentSearch: file("segment-search"),
    merge: file("merge"),
    gc: file("gc"),
  };
}
