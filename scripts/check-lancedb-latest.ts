/**
 * Tries the registry's newest @lancedb/lancedb on this project without touching it:
 *
 *     npm run check:lancedb-latest [-- --version 0.40.0] [-- --keep]
 *
 * Copies the work tree (tracked and untracked files, not node_modules) to a temporary folder,
 * `npm ci`s it, installs that lancedb and its Linux x64 build with `--no-save`, runs the suites
 * that exercise lancedb (views, dataset variants, strategies against native, living datasets,
 * hardening, memory bounds) and prints which pass. It also says which Linux builds the registry
 * serves for that version (infra/lancedb-builds.ts reads the same from the lock once pinned).
 * Not part of CI: it needs the registry and takes a few minutes.
 * @module
 */
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Command } from "commander";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** The suites whose outcome depends on lancedb's behaviour. */
const SUITES = [
  "test/lancedb-workarounds.test.ts",
  "test/old-writer.test.ts",
  "test/views.test.ts",
  "test/datasets.test.ts",
  "test/strategy.test.ts",
  "test/search.test.ts",
  "test/no-delete.test.ts",
  "test/living.test.ts",
  "test/hardening.test.ts",
  "test/memory.test.ts",
];

interface VitestReport {
  readonly testResults: readonly {
    readonly name: string;
    readonly status: string;
    readonly assertionResults: readonly { readonly status: string; readonly fullName: string }[];
  }[];
}

function npm(args: string[], cwd: string): string {
  return execFileSync("npm", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
}

/** The registry's Linux builds of `version`, glibc, by architecture. */
function linuxBuilds(version: string): string[] {
  return ["x64", "arm64"].filter((arch) => {
    const name = `@lancedb/lancedb-linux-${arch}-gnu@${version}`;
    return spawnSync("npm", ["view", name, "version"], { encoding: "utf8" }).stdout.trim() !== "";
  });
}

/** Copies what git sees of the work tree (so uncommitted changes are tried too). */
function copyWorkTree(to: string): void {
  const files = execFileSync("git", ["ls-files", "-co", "--exclude-standard", "-z"], {
    cwd: ROOT,
    encoding: "utf8",
  })
    .split("\0")
    .filter(Boolean);
  for (const file of files) {
    mkdirSync(dirname(join(to, file)), { recursive: true });
    cpSync(join(ROOT, file), join(to, file));
  }
}

function main(): void {
  const options = new Command()
    .option("--version <version>", "the lancedb version to try (default: the registry's latest)")
    .option("--keep", "keep the temporary copy")
    .parse()
    .opts<{ version?: string; keep?: boolean }>();
  const pinned = (
    JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
      dependencies: Record<string, string>;
    }
  ).dependencies["@lancedb/lancedb"];
  const version = options.version ?? npm(["view", "@lancedb/lancedb", "version"], ROOT).trim();
  process.stdout.write(`pinned @lancedb/lancedb ${pinned}; trying ${version}\n`);
  process.stdout.write(`linux glibc builds on the registry: ${linuxBuilds(version).join(", ")}\n`);

  const copy = mkdtempSync(join(tmpdir(), "fanout-lancedb-latest-"));
  try {
    copyWorkTree(copy);
    npm(["ci", "--no-audit", "--no-fund", "--prefer-offline"], copy);
    npm(
      [
        "install",
        "--no-save",
        "--no-audit",
        "--no-fund",
        `@lancedb/lancedb@${version}`,
        `@lancedb/lancedb-linux-x64-gnu@${version}`,
      ],
      copy,
    );
    const installed = (
      JSON.parse(
        readFileSync(join(copy, "node_modules/@lancedb/lancedb/package.json"), "utf8"),
      ) as { version: string }
    ).version;
    process.stdout.write(`installed ${installed} in ${copy}; running ${SUITES.length} suites\n`);
    const report = join(copy, "vitest-report.json");
    // Through npm, so the suites run on the lock's Node like `npm test`.
    spawnSync(
      "npm",
      ["exec", "--", "vitest", "run", "--reporter=json", `--outputFile=${report}`, ...SUITES],
      { cwd: copy, stdio: ["ignore", "ignore", "inherit"] },
    );
    const results = (JSON.parse(readFileSync(report, "utf8")) as VitestReport).testResults;
    let failed = 0;
    for (const suite of results) {
      const tests = suite.assertionResults;
      const bad = tests.filter((t) => t.status === "failed");
      failed += bad.length;
      const name = suite.name.slice(copy.length + 1);
      process.stdout.write(
        `${bad.length === 0 ? "pass" : "FAIL"}  ${name} (${tests.length - bad.length}/${tests.length})\n`,
      );
      for (const t of bad) process.stdout.write(`        ${t.fullName}\n`);
    }
    process.stdout.write(
      `lancedb ${installed}: ${failed === 0 ? "every suite passes" : `${failed} test(s) fail`}\n`,
    );
    process.exitCode = failed === 0 ? 0 : 1;
  } finally {
    if (!options.keep) rmSync(copy, { recursive: true, force: true });
  }
}

main();
