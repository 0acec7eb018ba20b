/**
 * Builds the publishable packages under packages/ from the sources, which stay in the top-level
 * folders: `lance-fanout` (shared/, functions/), `lance-fanout-cli` (cli/, local/) and
 * `lance-fanout-cdk` (infra/). The command line and the construct import the library by its
 * package name once built, so each package ships its own code only and depends on the others.
 *
 *     tsx scripts/build-packages.ts [package ...]   # default: all three
 *
 * npm runs it on `npm ci` (prepare) and before `npm pack` (each package's prepack).
 * @module
 */
import { execFileSync } from "node:child_process";
import { cpSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const LIBRARY = "lance-fanout";
/** The library's folders, imported as `../shared/...` from a sibling folder. */
const LIBRARY_FOLDERS = ["shared", "functions"];

interface PackageBuild {
  readonly dir: string;
  /** The folders it ships (the others are the library's). */
  readonly folders: readonly string[];
  /** Ships the lock its synths install the native modules from (infra/sources.ts). */
  readonly nativeLock?: boolean;
}

const PACKAGES: Readonly<Record<string, PackageBuild>> = {
  [LIBRARY]: { dir: "packages/lance-fanout", folders: LIBRARY_FOLDERS },
  "lance-fanout-cli": { dir: "packages/cli", folders: ["cli", "local"] },
  "lance-fanout-cdk": { dir: "packages/cdk", folders: ["infra"], nativeLock: true },
};

function build(name: string): void {
  const spec = PACKAGES[name];
  if (!spec) throw new Error(`Unknown package ${name}; known: ${Object.keys(PACKAGES).join(", ")}`);
  const dir = join(ROOT, spec.dir);
  const dist = join(dir, "dist");
  rmSync(dist, { recursive: true, force: true });
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  execFileSync(process.execPath, [tsc, "-p", join(dir, "tsconfig.json")], { stdio: "inherit" });
  if (name !== LIBRARY) importLibraryByName(dist, spec.folders);
  if (spec.nativeLock) copyNativeLock(dist);
  // What a registry shows of a package: its README, and the license its package.json names.
  for (const file of ["README.md", "LICENSE"]) cpSync(join(ROOT, file), join(dir, file));
}

/**
 * tsc also emitted the library modules the package imports: drop them, and point the imports
 * at the `lance-fanout` package instead (every shipped module is one folder deep, so they are
 * exactly the `../shared/` and `../functions/` specifiers).
 */
function importLibraryByName(dist: string, folders: readonly string[]): void {
  for (const folder of LIBRARY_FOLDERS) rmSync(join(dist, folder), { recursive: true });
  const specifier = new RegExp(`(["'\`])\\.\\./(${LIBRARY_FOLDERS.join("|")})/`, "g");
  for (const folder of folders) {
    for (const file of readdirSync(join(dist, folder), { recursive: true, encoding: "utf8" })) {
      if (!/\.(js|d\.ts)$/.test(file)) continue;
      const path = join(dist, folder, file);
      const text = readFileSync(path, "utf8");
      writeFileSync(path, text.replace(specifier, `$1${LIBRARY}/$2/`));
    }
  }
}

/**
 * The lock, the native modules' versions and the stand-ins of lancedb's unpublished builds, as
 * `infra/native-modules.ts` reads them from the repository: the package's `dist/` is its
 * LOCK_ROOT. The package.json also makes `dist/` ES modules.
 */
function copyNativeLock(dist: string): void {
  const root = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
    dependencies: Record<string, string>;
    overrides?: Record<string, string>;
  };
  const dependencies = {
    "@lancedb/lancedb": root.dependencies["@lancedb/lancedb"],
    "apache-arrow": root.dependencies["apache-arrow"],
  };
  const manifest = { private: true, type: "module", dependencies, overrides: root.overrides };
  writeFileSync(join(dist, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  cpSync(join(ROOT, "package-lock.json"), join(dist, "package-lock.json"));
  cpSync(join(ROOT, "stubs"), join(dist, "stubs"), { recursive: true });
}

const names = process.argv.slice(2);
for (const name of names.length ? names : Object.keys(PACKAGES)) build(name);
