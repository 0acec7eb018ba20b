/**
 * How a function's asset is built, with local esbuild (no Docker): one ES module per handler
 * with the AWS SDK bundled in, and the two packages esbuild cannot bundle (lancedb's native
 * module and the Arrow instance it shares) installed next to it by `npm ci` for the function's
 * architecture, then pruned and stripped by `infra/prune-asset.ts`.
 * @module
 */
import { join } from "node:path";
import { Architecture } from "aws-cdk-lib/aws-lambda";
import { type BundlingOptions, OutputFormat } from "aws-cdk-lib/aws-lambda-nodejs";
import type { AssetArch } from "./prune-asset.js";

/** Packages installed into the asset instead of bundled (they must be in package.json `dependencies`). */
export const NATIVE_MODULES = ["@lancedb/lancedb", "apache-arrow"] as const;

/** Node's name (`process.arch`, npm's `cpu`) for a Lambda architecture. */
export function assetArch(architecture: Architecture): AssetArch {
  if (architecture.name === Architecture.ARM_64.name) return "arm64";
  if (architecture.name === Architecture.X86_64.name) return "x64";
  throw new TypeError(`Expected an arm64 or x86_64 architecture, got ${architecture.name}`);
}

/**
 * The environment of the asset's `npm ci`: install the Linux glibc build for `arch` whatever the
 * host is (without it an arm64 function silently gets the host's x64 binary), quietly.
 */
export function installEnvironment(arch: AssetArch): Record<string, string> {
  return {
    npm_config_os: "linux",
    npm_config_cpu: arch,
    npm_config_libc: "glibc",
    npm_config_audit: "false",
    npm_config_fund: "false",
    npm_config_update_notifier: "false",
  };
}

/** Bundling options of every lance-fanout function for one architecture. */
export function fanoutBundling(architecture: Architecture): BundlingOptions {
  const arch = assetArch(architecture);
  return {
    format: OutputFormat.ESM,
    mainFields: ["module", "main"],
    // CommonJS dependencies bundled into an ES module still call `require`.
    banner:
      "import { createRequire as __fanoutCreateRequire } from 'node:module'; const require = __fanoutCreateRequire(import.meta.url);",
    minify: true,
    keepNames: true,
    sourceMap: true,
    sourcesContent: false,
    // Pin the SDK the code was tested with instead of the runtime's copy.
    bundleAwsSDK: true,
    nodeModules: [...NATIVE_MODULES],
    environment: installEnvironment(arch),
    commandHooks: {
      beforeBundling: () => [],
      beforeInstall: () => [],
      // The hook runs in the project root (where tsx is installed), after `npm ci`.
      afterBundling: (inputDir, outputDir) => [
        `node --import tsx ${quote(join(inputDir, "infra", "prune-asset.ts"))} ${quote(outputDir)} ${arch}`,
      ],
    },
  };
}

function quote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}
