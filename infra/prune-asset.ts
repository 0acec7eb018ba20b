/**
 * Prunes an installed `node_modules` for one Lambda architecture (used by
 * `infra/native-modules.ts` on the native modules of every function asset):
 *
 * 1. checks the lancedb native binary is the function's architecture (`npm ci` installs for the
 *    host unless `npm_config_cpu` says otherwise, and a wrong binary would only fail on Lambda);
 * 2. deletes every installed package the function cannot load: optional dependencies without a
 *    platform (lancedb's `openai` and `@huggingface/transformers` embedding extras) and native
 *    builds for other platforms, then type declarations, source maps and READMEs of dependencies
 *    (licenses stay);
 * 3. strips the binary's symbols (~20 MB less) when a `strip` for its architecture is installed,
 *    and otherwise says so and goes on;
 * 4. fails if the result is over Lambda's 250 MB unzipped limit.
 * @module
 */
import { spawnSync } from "node:child_process";
import {
  closeSync,
  existsSync,
  lstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmSync,
} from "node:fs";
import { dirname, join, relative } from "node:path";

/** A Lambda instruction set, named as Node names it (`process.arch`). */
export type AssetArch = "arm64" | "x64";

/** Lambda's limit on a function's unzipped deployment package (function and layers). */
export const LAMBDA_UNZIPPED_LIMIT_BYTES = 262_144_000;

/** ELF `e_machine` of each architecture. */
export const ELF_MACHINE: Readonly<Record<AssetArch, number>> = { x64: 62, arm64: 183 };

export interface PruneOptions {
  readonly arch: AssetArch;
  /**
   * The strip command, `"off"` to keep symbols.
   * @default the first of `<arch>-linux-gnu-strip`, `strip` (when the host has that
   *   architecture) and `llvm-strip` that is installed; the `LANCE_FANOUT_STRIP` variable overrides
   */
  readonly strip?: string;
  /** Strip commands tried in order when `strip` is not given. @default {@link stripCandidates} */
  readonly stripCandidates?: readonly string[];
  /** Where progress goes. @default process.stderr */
  readonly log?: (line: string) => void;
}

export interface PruneReport {
  readonly arch: AssetArch;
  /** The native binary, relative to the asset. */
  readonly binary: string;
  /** The strip command used, or `undefined` when the binary kept its symbols. */
  readonly strippedWith: string | undefined;
  /** Package directories deleted, relative to the asset. */
  readonly removedPackages: readonly string[];
  readonly bytesBefore: number;
  readonly bytesAfter: number;
}

/** `@lancedb/lancedb-linux-arm64-gnu` or `@lancedb/lancedb-linux-x64-gnu`. */
export function lancedbBinaryPackage(arch: AssetArch): string {
  return `@lancedb/lancedb-linux-${arch}-gnu`;
}

/** The ELF machine of a file, or `undefined` when it is not a 64-bit little-endian ELF. */
export function elfMachine(file: string): number | undefined {
  const header = Buffer.alloc(20);
  const fd = openSync(file, "r");
  try {
    if (readSync(fd, header, 0, header.length, 0) < header.length) return undefined;
  } finally {
    closeSync(fd);
  }
  const isElf64Le = header.readUInt32BE(0) === 0x7f454c46 && header[4] === 2 && header[5] === 1;
  return isElf64Le ? header.readUInt16LE(18) : undefined;
}

/** Bytes of every regular file under `dir` (symbolic links count as nothing). */
export function directorySize(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) total += directorySize(path);
    else if (entry.isFile()) total += lstatSync(path).size;
  }
  return total;
}

/**
 * Prunes, checks and strips `dir` (a package.json and its installed node_modules) in place.
 * @throws Error on a wrong or missing binary, or a result over the Lambda limit.
 */
export function pruneAsset(assetDir: string, options: PruneOptions): PruneReport {
  const { arch } = options;
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const bytesBefore = directorySize(assetDir);
  const binary = findBinary(assetDir, arch);

  const removedPackages = removeUnreachablePackages(assetDir, arch);
  removeFiles(
    join(assetDir, "node_modules"),
    /\.d\.[cm]?ts$|\.map$|^(readme|changelog|history)\.md$/i,
  );
  rmSync(join(assetDir, "node_modules", ".bin"), { recursive: true, force: true });
  rmSync(join(assetDir, "node_modules", ".package-lock.json"), { force: true });
  // The lock file copied in for `npm ci` lists every dev dependency of the project.
  rmSync(join(assetDir, "package-lock.json"), { force: true });

  const strippedWith = strip(
    binary,
    arch,
    options.strip ?? process.env.LANCE_FANOUT_STRIP,
    options.stripCandidates ?? stripCandidates(arch),
    log,
  );
  const bytesAfter = directorySize(assetDir);
  const report: PruneReport = {
    arch,
    binary: relative(assetDir, binary),
    strippedWith,
    removedPackages,
    bytesBefore,
    bytesAfter,
  };
  log(
    `lance-fanout native modules ${arch}: ${mb(bytesBefore)} -> ${mb(bytesAfter)} unzipped, ` +
      `${removedPackages.length} unused packages removed, binary ${
        strippedWith ? `stripped with ${strippedWith}` : "NOT stripped"
      } (${assetDir})`,
  );
  assertUnderLambdaLimit(assetDir, bytesAfter, arch);
  return report;
}

/**
 * The lancedb native binary of `arch` under `assetDir`, checked by ELF machine.
 * @throws Error when it is missing or of another architecture.
 */
export function findBinary(assetDir: string, arch: AssetArch): string {
  const pkg = join(assetDir, "node_modules", lancedbBinaryPackage(arch));
  const file = existsSync(pkg)
    ? readdirSync(pkg).find((name) => name.endsWith(".node"))
    : undefined;
  if (!file) {
    const installed = existsSync(join(assetDir, "node_modules", "@lancedb"))
      ? readdirSync(join(assetDir, "node_modules", "@lancedb")).join(", ")
      : "none";
    throw new Error(
      `${lancedbBinaryPackage(arch)} is not in the asset (installed: ${installed}): bundle with ` +
        `npm_config_os=linux npm_config_cpu=${arch} npm_config_libc=glibc (${assetDir})`,
    );
  }
  const path = join(pkg, file);
  const machine = elfMachine(path);
  if (machine !== ELF_MACHINE[arch]) {
    throw new Error(
      `${path} has ELF machine ${machine ?? "none"}, expected ${ELF_MACHINE[arch]} for ${arch}`,
    );
  }
  return path;
}

interface PackageJson {
  readonly dependencies?: Readonly<Record<string, string>>;
  readonly peerDependencies?: Readonly<Record<string, string>>;
  readonly optionalDependencies?: Readonly<Record<string, string>>;
  readonly os?: readonly string[];
  readonly cpu?: readonly string[];
  readonly libc?: readonly string[];
}

function readPackage(dir: string): PackageJson {
  return JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as PackageJson;
}

/** Node's lookup of `name` from a package directory: the nearest `node_modules/name` upwards. */
function resolvePackage(from: string, name: string, root: string): string | undefined {
  for (let dir = from; ; dir = dirname(dir)) {
    const candidate = join(dir, "node_modules", name);
    if (existsSync(join(candidate, "package.json"))) return candidate;
    if (dir === root || dirname(dir) === dir) return undefined;
  }
}

/** Whether an optional dependency is a native build the function can load on Lambda. */
function isLoadableNativeBuild(pkg: PackageJson, arch: AssetArch): boolean {
  if (!pkg.os && !pkg.cpu) return false; // not a platform build: an optional feature
  return (
    (pkg.os?.includes("linux") ?? true) &&
    (pkg.cpu?.includes(arch) ?? true) &&
    (pkg.libc?.includes("glibc") ?? true)
  );
}

/** Deletes installed packages not reachable from the asset's dependencies; returns them. */
function removeUnreachablePackages(assetDir: string, arch: AssetArch): string[] {
  const reachable = new Set<string>();
  const visit = (from: string, name: string, optional: boolean) => {
    const dir = resolvePackage(from, name, assetDir);
    if (!dir || reachable.has(dir)) return;
    const pkg = readPackage(dir);
    if (optional && !isLoadableNativeBuild(pkg, arch)) return;
    reachable.add(dir);
    for (const dep of Object.keys({ ...pkg.dependencies, ...pkg.peerDependencies })) {
      visit(dir, dep, false);
    }
    for (const dep of Object.keys(pkg.optionalDependencies ?? {})) visit(dir, dep, true);
  };
  for (const dep of Object.keys(readPackage(assetDir).dependencies ?? {})) {
    visit(assetDir, dep, false);
  }
  const removed: string[] = [];
  const sweep = (nodeModules: string) => {
    if (!existsSync(nodeModules)) return;
    for (const entry of readdirSync(nodeModules, { withFileTypes: true })) {
      if (!entry.isDirectory() || entry.name.startsWith(".")) continue;
      const path = join(nodeModules, entry.name);
      const packages = entry.name.startsWith("@")
        ? readdirSync(path).map((name) => join(path, name))
        : [path];
      for (const dir of packages) {
        if (reachable.has(dir)) sweep(join(dir, "node_modules"));
        else {
          rmSync(dir, { recursive: true, force: true });
          removed.push(relative(assetDir, dir));
        }
      }
      if (entry.name.startsWith("@") && readdirSync(path).length === 0)
        rmSync(path, { recursive: true });
    }
  };
  sweep(join(assetDir, "node_modules"));
  return removed.sort();
}

function removeFiles(dir: string, pattern: RegExp): void {
  if (!existsSync(dir)) return;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) removeFiles(path, pattern);
    else if (pattern.test(entry.name)) rmSync(path, { force: true });
  }
}

/** The strip commands able to handle `arch`'s binaries, best first. */
export function stripCandidates(arch: AssetArch, hostArch: string = process.arch): string[] {
  const prefix = arch === "arm64" ? "aarch64" : "x86_64";
  return [`${prefix}-linux-gnu-strip`, ...(hostArch === arch ? ["strip"] : []), "llvm-strip"];
}

function isInstalled(command: string): boolean {
  return spawnSync(command, ["--version"], { stdio: "ignore" }).error === undefined;
}

function strip(
  binary: string,
  arch: AssetArch,
  requested: string | undefined,
  candidates: readonly string[],
  log: (line: string) => void,
): string | undefined {
  if (requested === "off") return undefined;
  const tool = requested || candidates.find(isInstalled);
  if (!tool) {
    log(
      `lance-fanout native modules ${arch}: no strip for ${arch} is installed (tried ${candidates.join(", ")}); ` +
        `the binary keeps its symbols. On Debian/Ubuntu: apt-get install binutils-${
          arch === "arm64" ? "aarch64" : "x86-64"
        }-linux-gnu`,
    );
    return undefined;
  }
  const result = spawnSync(tool, ["--strip-unneeded", binary], { encoding: "utf8" });
  if (result.error || result.status !== 0) {
    throw new Error(
      `${tool} --strip-unneeded ${binary} failed: ${result.error?.message ?? result.stderr}`,
    );
  }
  if (elfMachine(binary) !== ELF_MACHINE[arch]) {
    throw new Error(`${binary} is no longer a ${arch} ELF file after ${tool}`);
  }
  return tool;
}

/** Bytes as "148.9 MB". */
export function mb(bytes: number): string {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

/** @throws Error when `bytes` (of `dir`) exceed Lambda's unzipped limit. */
export function assertUnderLambdaLimit(dir: string, bytes: number, arch: AssetArch): void {
  if (bytes > LAMBDA_UNZIPPED_LIMIT_BYTES) {
    throw new Error(
      `the ${arch} asset is ${mb(bytes)} unzipped, over Lambda's ${mb(LAMBDA_UNZIPPED_LIMIT_BYTES)} limit (${dir})`,
    );
  }
}
