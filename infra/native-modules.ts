/**
 * Puts the native modules into a function asset: the one step of bundling esbuild cannot do.
 * Run by `NodejsFunction`'s `afterBundling` hook (see `infra/bundling.ts`):
 *
 *     node --import tsx infra/native-modules.ts <assetDir> <arm64|x64>
 *
 * `@lancedb/lancedb` and `apache-arrow` are installed with `npm ci` from the project's lock file
 * for Linux, glibc and the function's architecture (not the host's), then pruned and stripped by
 * `infra/prune-asset.ts`. The result is cached per architecture under
 * `node_modules/.cache/lance-fanout/native/`, keyed by the lock file, the versions and these
 * scripts, so the three functions of a synth (and later synths) share one install; each asset
 * gets a copy.
 * @module
 */
import { spawnSync } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import {
  type AssetArch,
  assertUnderLambdaLimit,
  directorySize,
  findBinary,
  mb,
  type PruneOptions,
  pruneAsset,
} from "./prune-asset.js";
import { infraModule, LOCK_ROOT } from "./sources.js";

/** Packages installed into the asset instead of bundled (they must be in package.json `dependencies`). */
export const NATIVE_MODULES = ["@lancedb/lancedb", "apache-arrow"] as const;

/**
 * The environment of the `npm ci`: the Linux glibc build for `arch` whatever the host is (without
 * it an arm64 function silently gets the host's x64 binary), from the npm cache when it can,
 * quietly.
 */
export function installEnvironment(arch: AssetArch): Record<string, string> {
  return {
    npm_config_os: "linux",
    npm_config_cpu: arch,
    npm_config_libc: "glibc",
    npm_config_prefer_offline: "true",
    npm_config_audit: "false",
    npm_config_fund: "false",
    npm_config_update_notifier: "false",
  };
}

export interface NativeModulesOptions {
  readonly arch: AssetArch;
  /** Directory with package.json, package-lock.json and stubs/. @default {@link LOCK_ROOT} */
  readonly projectRoot?: string;
  /** @default `<projectRoot>/node_modules/.cache/lance-fanout/native` */
  readonly cacheRoot?: string;
  /** The strip command, or `"off"`. @default see {@link PruneOptions.strip} */
  readonly strip?: string;
  /** @default process.stderr */
  readonly log?: (line: string) => void;
}

/**
 * Installs the pruned native modules of `arch` into `assetDir` (node_modules and a package.json
 * naming them), from the cache or with a fresh `npm ci`.
 * @returns whether the cache served them
 * @throws Error when a module is not a dependency, `npm ci` fails, the binary is not `arch`'s,
 *   or the asset is over Lambda's unzipped limit.
 */
export function installNativeModules(assetDir: string, options: NativeModulesOptions): boolean {
  const { arch } = options;
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const root = options.projectRoot ?? LOCK_ROOT;
  const lock = readFileSync(join(root, "package-lock.json"));
  const project = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
    dependencies?: Record<string, string>;
    overrides?: Record<string, string>;
  };
  const declared = project.dependencies;
  const dependencies = Object.fromEntries(
    NATIVE_MODULES.map((name) => {
      const version = declared?.[name];
      if (!version) throw new Error(`${name} must be in the dependencies of ${root}/package.json`);
      return [name, version];
    }),
  );
  // The lock is only in sync with the overrides that map lancedb's unpublished platform builds
  // to the stand-in under stubs/ (infra/lancedb-builds.ts).
  const overrides = project.overrides ?? {};
  const key = createHash("sha256")
    .update(lock)
    .update(JSON.stringify(dependencies))
    .update(JSON.stringify(overrides))
    .update(arch)
    .update(readFileSync(infraModule("prune-asset")))
    .update(readFileSync(infraModule("native-modules")))
    .digest("hex")
    .slice(0, 20);
  const cache = join(
    options.cacheRoot ?? join(root, "node_modules", ".cache", "lance-fanout", "native"),
    `${arch}-${key}`,
  );
  const cached = existsSync(join(cache, "node_modules"));
  if (!cached) {
    build(cache, { arch, root, lock, dependencies, overrides, strip: options.strip, log });
  }

  cpSync(join(cache, "node_modules"), join(assetDir, "node_modules"), { recursive: true });
  writeFileSync(join(assetDir, "package.json"), JSON.stringify({ dependencies }));
  findBinary(assetDir, arch);
  const bytes = directorySize(assetDir);
  assertUnderLambdaLimit(assetDir, bytes, arch);
  log(
    `lance-fanout asset ${arch}: ${mb(bytes)} unzipped, native modules ${cached ? "from the cache" : "installed"} (${assetDir})`,
  );
  return cached;
}

/** `npm ci` and prune into a temporary directory, then move it into place (first writer wins). */
function build(
  cache: string,
  input: {
    readonly arch: AssetArch;
    readonly root: string;
    readonly lock: Buffer;
    readonly dependencies: Record<string, string>;
    readonly overrides: Record<string, string>;
    readonly strip: string | undefined;
    readonly log: (line: string) => void;
  },
): void {
  const tmp = `${cache}.tmp-${randomUUID()}`;
  mkdirSync(tmp, { recursive: true });
  try {
    const { dependencies, overrides } = input;
    writeFileSync(join(tmp, "package.json"), JSON.stringify({ dependencies, overrides }));
    writeFileSync(join(tmp, "package-lock.json"), input.lock);
    const stubs = join(input.root, "stubs");
    if (existsSync(stubs)) cpSync(stubs, join(tmp, "stubs"), { recursive: true });
    const npm = spawnSync("npm", ["ci", "--no-audit", "--no-fund"], {
      cwd: tmp,
      env: { ...process.env, ...installEnvironment(input.arch) },
      encoding: "utf8",
    });
    if (npm.error || npm.status !== 0) {
      throw new Error(`npm ci for ${input.arch} failed: ${npm.error?.message ?? npm.stderr}`);
    }
    pruneAsset(tmp, { arch: input.arch, strip: input.strip, log: input.log });
    try {
      renameSync(tmp, cache);
    } catch (err) {
      // Another synth finished the same install first: use theirs.
      if (!existsSync(join(cache, "node_modules"))) throw err;
    }
    // One install per architecture is enough: drop those of older lock files or scripts.
    const name = basename(cache);
    const stale = new RegExp(`^${input.arch}-[0-9a-f]+$`);
    for (const entry of readdirSync(dirname(cache))) {
      if (entry !== name && stale.test(entry)) {
        rmSync(join(dirname(cache), entry), { recursive: true, force: true });
      }
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

function isArch(value: string | undefined): value is AssetArch {
  return value === "arm64" || value === "x64";
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [assetDir, arch] = process.argv.slice(2);
  if (!assetDir || !isArch(arch)) {
    process.stderr.write(
      "usage: node --import tsx infra/native-modules.ts <assetDir> <arm64|x64>\n",
    );
    process.exit(2);
  }
  try {
    installNativeModules(assetDir, { arch });
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
}
