/**
 * Which Lambda architectures the pinned lancedb can run on, read from the lock file: the npm
 * registry's metadata as `npm install` recorded it. A platform build the registry does not
 * serve for the pinned version is mapped to `stubs/lancedb-unpublished-build` by package.json
 * `overrides` (so that `npm ci` accepts the lock), which the lock records as a link; a served
 * one is a registry package of the pinned version with its integrity. Nothing here is a list
 * of versions: pin a release with an arm64 build, `npm install`, and arm64 is accepted again.
 *
 *     node --import tsx infra/lancedb-builds.ts <arm64|x64>   # exit 0 when the lock has the build
 *
 * @module
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { AssetArch } from "./prune-asset.js";
import { LOCK_ROOT } from "./sources.js";

interface LockEntry {
  readonly version?: string;
  readonly integrity?: string;
  readonly link?: boolean;
}

/** The lancedb package Lambda loads on `arch` (Amazon Linux: glibc). */
export function lancedbBuildPackage(arch: AssetArch): string {
  return `@lancedb/lancedb-linux-${arch}-gnu`;
}

/**
 * Why the lock holds no lancedb build for `arch`, or undefined when it does.
 * @param projectRoot directory of package-lock.json. @default {@link LOCK_ROOT}
 */
export function missingLancedbBuild(arch: AssetArch, projectRoot = LOCK_ROOT): string | undefined {
  const lockFile = join(projectRoot, "package-lock.json");
  const packages = (
    JSON.parse(readFileSync(lockFile, "utf8")) as {
      packages?: Record<string, LockEntry>;
    }
  ).packages;
  const pinned = packages?.["node_modules/@lancedb/lancedb"]?.version;
  if (!pinned) return `${lockFile} does not install @lancedb/lancedb`;
  const name = lancedbBuildPackage(arch);
  const build = packages?.[`node_modules/${name}`];
  if (build && !build.link && build.version === pinned && build.integrity) return undefined;
  const found = build?.link
    ? "the lock maps it to a stand-in: package.json overrides"
    : build
      ? `the lock has ${build.version ?? "no version"}`
      : "the lock has none";
  return `@lancedb/lancedb ${pinned} has no Linux ${arch} build: the npm registry serves no ${name}@${pinned} (${found})`;
}

/**
 * @throws Error when the pinned lancedb has no build for `arch`, saying which package version
 *   is missing and what to do instead.
 */
export function assertLancedbBuild(arch: AssetArch, projectRoot?: string): void {
  const missing = missingLancedbBuild(arch, projectRoot);
  if (missing === undefined) return;
  const other = arch === "arm64" ? "x86_64 (the default)" : "arm64";
  throw new Error(
    `${missing}. Deploy ${other}, or use a lance-fanout release that pins a @lancedb/lancedb with one (in lance-fanout's repository: pin it and run npm install, README.md "Versions")`,
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const arch = process.argv[2];
  if (arch !== "arm64" && arch !== "x64") {
    process.stderr.write("usage: node --import tsx infra/lancedb-builds.ts <arm64|x64>\n");
    process.exit(2);
  }
  const missing = missingLancedbBuild(arch);
  process.stdout.write(`${missing ?? `${lancedbBuildPackage(arch)}: in the lock`}\n`);
  process.exit(missing === undefined ? 0 : 1);
}
