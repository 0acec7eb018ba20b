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
/** The sources (under tsx) or the `lance-fanout-cli` package's `dist/`: same layout either way. */
const ROOT = resolve(HERE, "../..");
const EXT = extname(HERE);

/** A function's handler: its source here, the `lance-fanout` package's build once built. */
function handlerEntry(dir: string): string {
  return EXT === ".ts"
    ? join(ROOT, "functions", dir, "handler.ts")
    : fileURLToPath(import.meta.resolve(`lance-fanout/functions/${dir}/handler.js`));
}

export interface FunctionBundles {
  readonly worker: string;
  readonly planner: string;
  readonly segmentSearch: string;
  readonly merge: string;
  readonly gc: string;
}

/**
 * Writes the bundles under `node_modules/.cache/lance-fanout` below ROOT, where Node resolves the
 * native lancedb package (left external, like in the Lambda asset) from the enclosing
 * node_modules: the repository's, or the project's that installed the command.
 */
export async function bundleFunctions(): Promise<FunctionBundles> {
  const outdir = join(ROOT, "node_modules", ".cache", "lance-fanout", "functions");
  await mkdir(outdir, { recursive: true });
  const entryPoints = {
    worker: join(ROOT, "local", `worker${EXT}`),
    planner: handlerEntry("planner"),
    "segment-search": handlerEntry("segment-search"),
    merge: handlerEntry("merge"),
    gc: handlerEntry("gc"),
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
