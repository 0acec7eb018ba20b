/**
 * The packages as a user gets them: each publishable workspace packed (`npm pack` builds it),
 * installed into an empty folder with `--omit=dev`, then used as the README says, its code
 * blocks taken from the README as written:
 * - `fanout --version`, `--help`, and the README's install block (make-dataset, plan);
 * - the library example searches the dataset it made, and equals native lancedb on it;
 * - `fanout serve` (the README's line) answers health, and the search it prints answers;
 * - the README's CDK app synthesises with the construct, bundling for real.
 * Nothing here resolves from this repository: the folder has only what npm installed.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdir, mkdtemp, readdir, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, dirname, join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { beforeAll, describe, expect, test } from "vitest";
import { freePort } from "../../local/net.js";
import { readmeBlocks } from "../support/readme.js";
import { userShellEnv } from "../support/user-shell.js";

const ROOT = resolve(fileURLToPath(import.meta.url), "../../..");
const WORKSPACES = ["packages/lance-fanout", "packages/cli", "packages/cdk"];
const run = promisify(execFile);

let app: string;
/**
 * A user's shell: this machine's environment (its CA certificates for the npm registry, say)
 * without what npm, vitest and this repository set, this Node first on PATH, and no AWS.
 */
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  const work = await mkdtemp(join(tmpdir(), "fanout-install-"));
  const packs = join(work, "packs");
  app = join(work, "app");
  await mkdir(packs);
  await mkdir(app);
  const systemPath = (process.env.PATH ?? "")
    .split(delimiter)
    .filter((dir) => !dir.includes("node_modules"));
  env = {
    ...userShellEnv(),
    PATH: [dirname(process.execPath), ...systemPath].join(delimiter),
    CDK_DISABLE_CLI_TELEMETRY: "true",
    npm_config_prefer_offline: "true",
    npm_config_audit: "false",
    npm_config_fund: "false",
    npm_config_update_notifier: "false",
  };
  const workspaces = WORKSPACES.flatMap((w) => ["--workspace", w]);
  const packed = await run("npm", ["pack", ...workspaces, "--pack-destination", packs], {
    cwd: ROOT,
    env: { ...env, PATH: process.env.PATH },
    maxBuffer: 64 << 20,
  });
  const tarballs = packed.stdout
    .split("\n")
    .filter((line) => line.endsWith(".tgz"))
    .map((name) => join(packs, name));
  expect(tarballs).toHaveLength(WORKSPACES.length);
  const root = JSON.parse(await readFile(join(ROOT, "package.json"), "utf8")) as {
    devDependencies: Record<string, string>;
  };
  const cdk = ["aws-cdk-lib", "constructs", "aws-cdk"].map(
    (name) => `${name}@${root.devDependencies[name]}`,
  );
  await writeFile(join(app, "package.json"), '{ "name": "app", "private": true }\n');
  await run("npm", ["install", "--omit=dev", ...tarballs, ...cdk], {
    cwd: app,
    env,
    maxBuffer: 64 << 20,
  });
});

/** One shell line in the app folder, as a user types it. */
async function sh(line: string): Promise<string> {
  const { stdout } = await run("sh", ["-c", line], { cwd: app, env, maxBuffer: 64 << 20 });
  return stdout;
}

/** The first `lang` block of a README section. */
function readmeBlock(heading: string, lang: string): string {
  return readmeBlocks(heading, lang)[0] ?? "";
}

async function untilHealthy(url: string, child: ChildProcess, out: () => string): Promise<void> {
  const deadline = Date.now() + 240_000;
  while (
    !(await fetch(url).then(
      (r) => r.ok,
      () => false,
    ))
  ) {
    if (child.exitCode !== null) throw new Error(`fanout serve exited:\n${out()}`);
    if (Date.now() > deadline) throw new Error(`fanout serve not healthy in 240 s:\n${out()}`);
    await sleep(500);
  }
}

/** Whether process group `group` (negative) has no process left, waiting up to `ms`. */
async function gone(group: number, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      process.kill(group, 0);
    } catch {
      return true;
    }
    if (Date.now() >= deadline) return false;
    await sleep(200);
  }
}

/** Command lines of the processes that run something under `dir`. */
async function processesUnder(dir: string): Promise<string[]> {
  const found = await run("pgrep", ["-af", dir]).catch(() => ({ stdout: "" }));
  return found.stdout.split("\n").filter(Boolean);
}

describe("installed from the packs, with --omit=dev", () => {
  test("fanout --version and --help", async () => {
    expect((await sh("npx fanout --version")).trim()).toBe("0.1.0");
    expect(await sh("npx fanout --help")).toMatch(/serve[\s\S]*search[\s\S]*make-dataset/);
  });

  test("the README's install block makes a dataset and plans it", async () => {
    const lines = readmeBlock("## Install the packages", "sh")
      .split("\n")
      .filter((line) => line.startsWith("npx fanout ") && !line.startsWith("npx fanout serve"));
    expect(lines).toHaveLength(2);
    for (const line of lines) await sh(line);
    const plan = await sh("npx fanout plan --dataset ./db/items.lance");
    expect(plan).toMatch(/4 segments/);
  });

  test("the README's library example searches that dataset, as native lancedb does", async () => {
    await writeFile(join(app, "search.mjs"), readmeBlock("## Use it as a library", "js"));
    expect(await sh("node search.mjs")).toMatch(/version \d+, \d+ task\(s\):/);
    // The same search against native lancedb, installed with the library.
    await writeFile(
      join(app, "compare.mjs"),
      `import * as lancedb from "@lancedb/lancedb";
import { vectorSearch } from "lance-fanout";
const query = Array.from({ length: 16 }, (_, i) => i / 16);
const { results } = await vectorSearch({ dataset: "./db/items.lance", query, k: 10, nprobes: 64, filter: "category = 3" });
const table = await (await lancedb.connect("./db")).openTable("items");
const native = await table.vectorSearch(query).nprobes(64).where("category = 3").limit(10).withRowId().toArray();
console.log(JSON.stringify({ ours: results.map((r) => r._rowid), native: native.map((r) => String(r._rowid)) }));
`,
    );
    const { ours, native } = JSON.parse(await sh("node compare.mjs")) as Record<string, string[]>;
    expect(ours).toHaveLength(10);
    expect(ours).toEqual(native);
  });

  test("the README's fanout serve answers health and the search it prints, and Ctrl-C stops it", async () => {
    const line = readmeBlock("## Install the packages", "sh")
      .split("\n")
      .find((l) => l.startsWith("npx fanout serve"));
    if (!line) throw new Error("README.md's install block has no fanout serve");
    const [port, s3, lambda] = [await freePort(), await freePort(), await freePort()];
    const ports = {
      PORT: String(port),
      LANCE_FANOUT_S3_PORT: String(s3),
      LANCE_FANOUT_LAMBDA_PORT: String(lambda),
    };
    // A process group of its own, as a terminal's foreground job: Ctrl-C signals all of it.
    const child = spawn("sh", ["-c", line], {
      cwd: app,
      env: { ...env, ...ports },
      detached: true,
    });
    const group = -(child.pid ?? 0);
    let out = "";
    const keep = (chunk: Buffer) => {
      out += chunk.toString();
    };
    child.stdout.on("data", keep);
    child.stderr.on("data", keep);
    try {
      await untilHealthy(`http://127.0.0.1:${port}/health`, child, () => out);
      const curl = /^\s*(curl -s [^\n]*\\\n[^\n]*)$/m.exec(out)?.[1];
      if (!curl) throw new Error(`fanout serve printed no curl:\n${out}`);
      const answer = JSON.parse(await sh(curl.replace(/\\\n\s*/, " "))) as {
        results: { category: number }[];
      };
      expect(answer.results.length).toBeGreaterThan(0);
      expect(answer.results.every((r) => r.category === 3)).toBe(true);
      expect(out).toMatch(/The search below, warm: auto ran \d+ tasks? in/);
      process.kill(group, "SIGINT");
      // Every process of the job ends, and so do the function workers (groups of their own).
      expect(await gone(group, 30_000), out).toBe(true);
      expect(await processesUnder(app)).toEqual([]);
    } finally {
      if (!(await gone(group, 0))) process.kill(group, "SIGKILL");
    }
  });

  test("the README's CDK app synthesises with the construct, bundled for real", async () => {
    await writeFile(join(app, "app.mjs"), readmeBlock("## Deploy to AWS", "js"));
    await writeFile(join(app, "cdk.json"), '{ "app": "node app.mjs" }\n');
    await sh("npx cdk synth --no-notices -q");
    const template = JSON.parse(
      await readFile(join(app, "cdk.out", "Search.template.json"), "utf8"),
    ) as { Resources: Record<string, { Type: string; Properties: { Handler?: string } }> };
    const functions = Object.values(template.Resources).filter(
      (r) => r.Type === "AWS::Lambda::Function" && r.Properties.Handler === "index.handler",
    );
    // planner, two segment-search slots, merge, gc
    expect(functions).toHaveLength(5);
    const assets = (await readdir(join(app, "cdk.out"))).filter((d) => d.startsWith("asset."));
    for (const asset of assets) {
      const dir = join(app, "cdk.out", asset);
      const files = await readdir(dir);
      if (!files.includes("index.mjs")) continue;
      const build = join(dir, "node_modules", "@lancedb", "lancedb-linux-x64-gnu");
      expect((await readdir(build)).some((f) => f.endsWith(".node"))).toBe(true);
    }
  });
});
