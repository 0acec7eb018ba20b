/**
 * Where a synth takes the handlers and the native modules' lock from. From the sources (under
 * tsx) they are this repository's; in the `lance-fanout-cdk` package, the handlers are the
 * installed `lance-fanout` package's build and the lock is the copy the package ships next to
 * its build (scripts/build-packages.ts).
 * @module
 */
import { dirname, extname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = fileURLToPath(import.meta.url);
/** `.ts` under tsx, `.js` once built. */
export const MODULE_EXT = extname(HERE);
const FROM_SOURCES = MODULE_EXT === ".ts";

/** The directory with the package.json, package-lock.json and stubs/ the native modules come from. */
export const LOCK_ROOT = resolve(dirname(HERE), "..");

/** A module of infra/ as it is here: `native-modules` is native-modules.ts or .js. */
export function infraModule(name: string): string {
  return join(dirname(HERE), `${name}${MODULE_EXT}`);
}

/** The entry of a function's handler (`planner`, `segment-search`, `merge`, `gc`). */
export function handlerEntry(dir: string): string {
  return FROM_SOURCES
    ? join(LOCK_ROOT, "functions", dir, "handler.ts")
    : fileURLToPath(import.meta.resolve(`lance-fanout/functions/${dir}/handler.js`));
}
