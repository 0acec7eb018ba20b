/**
 * How a function's asset is built, with local esbuild (no Docker): one ES module per handler
 * with the AWS SDK bundled in, and next to it the two packages esbuild cannot bundle (lancedb's
 * native module and the Arrow instance it shares), installed for the function's architecture,
 * pruned and stripped by `infra/native-modules.ts`.
 * @module
 */
import { Architecture } from "aws-cdk-lib/aws-lambda";
import { type BundlingOptions, OutputFormat } from "aws-cdk-lib/aws-lambda-nodejs";
import { installEnvironment, NATIVE_MODULES } from "./native-modules.js";
import type { AssetArch } from "./prune-asset.js";
import { infraModule, MODULE_EXT } from "./sources.js";

/** Node's name (`process.arch`, npm's `cpu`) for a Lambda architecture. */
export function assetArch(architecture: Architecture): AssetArch {
  if (architecture.name === Architecture.ARM_64.name) return "arm64";
  if (architecture.name === Architecture.X86_64.name) return "x64";
  throw new TypeError(`Expected an arm64 or x86_64 architecture, got ${architecture.name}`);
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
    // Everything else is bundled, the AWS SDK included: the versions the code was tested with,
    // not the runtime's copy.
    externalModules: [...NATIVE_MODULES],
    environment: installEnvironment(arch),
    commandHooks: {
      beforeBundling: () => [],
      beforeInstall: () => [],
      // Runs in the project root after esbuild; the sources need tsx (installed here).
      afterBundling: (_inputDir, outputDir) => [
        `node ${MODULE_EXT === ".ts" ? "--import tsx " : ""}${quote(infraModule("native-modules"))} ${quote(outputDir)} ${arch}`,
      ],
    },
  };
}

function quote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}
