/**
 * The `fanout` command line, run as a user runs it: the README's examples, as written, in a real
 * process of the built bin, against a local dataset and a local stack on free ports; results are
 * compared with native lancedb.
 *
 * `npx fanout` in this repository runs the `lance-fanout-cli` workspace's bin,
 * `packages/cli/dist/cli/fanout.js`, which imports the `lance-fanout` workspace's build. The tests
 * run that file with node, after building both packages, so they test what `npx fanout` runs and
 * never a stale build.
 */
import { execFile, spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import * as lancedb from "@lancedb/lancedb";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { useLocalStack } from "../cli/commands.js";
import { ensureDemoDataset } from "../local/demo-dataset.js";
import { type Stack, startStack } from "../local/stack.js";
import { random } from "./support/fixtures.js";

// lancedb is CommonJS: build Arrow types from the same Arrow instance it uses.
const arrow = createRequire(import.meta.url)("apache-arrow") as typeof import("apache-arrow");

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const BIN = join(ROOT, "packages", "cli", "dist", "cli", "fanout.js");
const DIMENSION = 16;

let work: string;
let stack: Stack;
let demo: { db: string; storageOptions: Record<string, string> };
/** A user's shell: no AWS or lance-fanout variables (the views go to the test's directory). */
let userEnv: Record<string, string>;
/** The variables that point the CLI at this test's stack, as the README's table names them. */
let stackPorts: Record<string, string>;

beforeAll(async () => {
  await promisify(execFile)(process.execPath, [
    "--import",
    "tsx",
    join(ROOT, "scripts", "build-packages.ts"),
    "lance-fanout",
    "lance-fanout-cli",
  ]);
  work = await mkdtemp(join(tmpdir(), "fanout-cli-"));
  stack = await startStack({ dataDir: join(work, ".data"), apiPort: 0, s3Port: 0, lambdaPort: 0 });
  demo = { db: `s3://${stack.bucket}/demo`, storageOptions: stack.s3.storageOptions() };
  await ensureDemoDataset({ ...demo, rows: 6000, segments: 3, dimension: DIMENSION });
  userEnv = {
    PATH: process.env.PATH ?? "",
    HOME: process.env.HOME ?? work,
    AWS_EC2_METADATA_DISABLED: "true",
    LANCE_FANOUT_VIEW_ROOT: join(work, "views"),
  };
  stackPorts = {
    PORT: String(stack.api.port),
    LANCE_FANOUT_S3_PORT: new URL(stack.s3.endpoint).port,
    LANCE_FANOUT_LAMBDA_PORT: new URL(stack.lambda.endpoint).port,
  };
});

afterAll(async () => {
  await stack?.stop();
});

/** The README's `fanout` examples, continuation lines joined. */
async function readmeExamples(): Promise<string[]> {
  const readme = await readFile(join(ROOT, "README.md"), "utf8");
  const section = readme.split("### The `fanout` command")[1] ?? "";
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? "";
  return block
    .replace(/\\\n\s*/g, "")
    .split("\n")
    .filter((line) => line.startsWith("npx fanout "));
}

/** The one README example that starts `npx fanout <start>`, without its comment. */
async function example(start: string): Promise<string> {
  const found = (await readmeExamples()).filter((l) => l.startsWith(`npx fanout ${start}`));
  if (found.length !== 1) throw new Error(`expected one README example "${start}", got ${found}`);
  return (found[0] ?? "").replace(/\s+#[^'"]*$/, "");
}

interface Run {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a command line as a shell would, with `npx fanout` being the built bin, in `work`. */
function run(command: string, env: Record<string, string> = {}, cwd = work): Promise<Run> {
  const line = command.replace(/^npx fanout /, `'${process.execPath}' '${BIN}' `);
  return new Promise((resolve, reject) => {
    const child = spawn("/bin/sh", ["-c", line], { cwd, env: { ...userEnv, ...env } });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    child.on("error", reject);
    child.on("close", (status) => resolve({ status, stdout, stderr }));
  });
}

async function succeeds(command: string, env: Record<string, string> = {}): Promise<string> {
  const out = await run(command, env);
  expect(out.stderr).toBe("");
  expect(out.status).toBe(0);
  return out.stdout;
}

/**
 * A user's mistake: one line `fanout: CODE: message` on stderr, no stack trace; status 1, or 2
 * for a mistake in the command's own words (usage).
 */
async function fails(
  command: string,
  env: Record<string, string> = {},
  status = 1,
): Promise<string> {
  const out = await run(command, env);
  expect(out.status).toBe(status);
  expect(out.stdout).toBe("");
  expect(out.stderr).toMatch(/^fanout: [A-Z_]+: [^\n]+\n$/);
  return out.stderr;
}

interface Hit {
  readonly _rowid: string;
  readonly _distance: number;
}

async function openTable(db: string, name: string, storageOptions: Record<string, string> = {}) {
  return (await lancedb.connect(db, { storageOptions })).openTable(name);
}

async function nativeSearch(table: lancedb.Table, query: number[], k: number): Promise<Hit[]> {
  const rows = await table.vectorSearch(query).limit(k).withRowId().select(["_distance"]).toArray();
  return rows.map((r) => ({ _rowid: String(r._rowid), _distance: Number(r._distance) }));
}

/** Same distances rank by rank; same rows except where rows tie at the k-th distance. */
function expectSameHits(got: readonly Hit[], want: readonly Hit[]) {
  expect(got.map((h) => h._distance)).toEqual(want.map((h) => expect.closeTo(h._distance, 4)));
  const kth = want.at(-1)?._distance ?? 0;
  const inside = (hits: readonly Hit[]) =>
    hits
      .filter((h) => h._distance < kth - 1e-4)
      .map((h) => h._rowid)
      .sort();
  expect(inside(got)).toEqual(inside(want));
}

/** The rows of a `console.table` printout, as records of strings. */
/** The rows of `--format table`: after the summary line, a header and aligned plain columns. */
function printedTable(stdout: string): Record<string, string>[] {
  const [, header = "", ...lines] = stdout.split("\n");
  const names = header.split(/\s+/).filter(Boolean);
  const body = lines.filter((line) => line.trim() && !/^(balance|why)\b/.test(line));
  for (const line of body) expect(line).not.toMatch(/[│┌└']/);
  return body.map((line) => {
    const cells = line.trim().split(/\s+/);
    return Object.fromEntries(names.map((name, i) => [name, cells[i] ?? ""]));
  });
}

const vector = (seed: number, dimension = DIMENSION) => {
  const next = random(seed);
  return Array.from({ length: dimension }, () => next());
};

describe("the README's fanout examples, as written", () => {
  let items: lancedb.Table;

  beforeAll(async () => {
    await succeeds(await example("make-dataset"));
    items = await openTable(join(work, "db"), "items");
  });

  afterAll(() => items?.close());

  test("make-dataset refuses a table of that name that is not its dataset, unless --overwrite", async () => {
    const line = await example("make-dataset");
    const other = line.replace(/--rows \d+/, "--rows 7000");
    expect(await fails(other)).toMatch(
      /^fanout: INVALID_REQUEST: .*already has a table items .*--overwrite/,
    );
    expect(await items.countRows()).toBeGreaterThan(90_000);
  });

  test("make-dataset builds ./db/items.lance with vectors of the asked dimension", async () => {
    const line = await example("make-dataset");
    expect(line).toContain(`--dimension ${DIMENSION}`);
    const field = (await items.schema()).fields.find((f) => f.name === "vector");
    expect(String(field?.type)).toBe(`FixedSizeList[${DIMENSION}]<Float32>`);
    expect(await items.countRows()).toBeGreaterThan(90_000);
    expect((await items.listIndices())[0]?.numSegments).toBeGreaterThanOrEqual(8);
  });

  test("plan on a local path, without a query, shows the plan of the dataset's column", async () => {
    const stdout = await succeeds(await example("plan --dataset"));
    const segments = (await items.listIndices())[0]?.numSegments;
    const rows = await items.countRows();
    expect(stdout).toContain(
      `version ${await items.version()} (written by lance 12.0.0), index vector_idx on vector ` +
        `(IvfPq, l2), ${segments} segments, ${rows} rows indexed and 0 not -> `,
    );
    const groups = printedTable(stdout);
    expect(groups.reduce((sum, g) => sum + Number(g.rows), 0)).toBe(await items.countRows());
    expect(stdout).toMatch(/balance \(max cost \/ mean cost\): \d+\.\d\d/);
    expect(stdout).toMatch(
      /^why: \d+ (task|groups).*, est\. [\d.,]+ ms: the lowest estimate of the \d+ plans auto weighed\. The index is /m,
    );
  });

  test("plan --via http shows the plan the stack's planner makes, and why", async () => {
    const stdout = await succeeds(await example("plan --via http"), stackPorts);
    const why = /^why: (.*)$/m.exec(stdout)?.[1] ?? "";
    // The stack's planner weighs its own slots and cache, which this process does not know.
    expect(why).toMatch(/a segment-search environment caches 1024 MiB, over 1 slot\./);
    expect(why).toMatch(/Other plans: .* est\. [\d.,]+ ms/);
    const [first] = printedTable(stdout);
    expect(first?.kind).toBe("index");
  });

  test("search --via local on a local path prints the same top 10 as native lancedb", async () => {
    const line = await example("search --via local");
    const query = JSON.parse(/--query '([^']+)'/.exec(line)?.[1] ?? "null") as number[];
    const response = JSON.parse(await succeeds(line)) as { version: number; results: Hit[] };
    expect(response.version).toBe(await items.version());
    expectSameHits(response.results, await nativeSearch(items, query, 10));
  });

  test("search --format csv prints a header and one line per row, the row ids unquoted", async () => {
    const line = (await example("search --via local")).replace("--json", "--format csv");
    const query = JSON.parse(/--query '([^']+)'/.exec(line)?.[1] ?? "null") as number[];
    const [header, ...rows] = (await succeeds(line)).trimEnd().split("\n");
    expect(header).toBe("_query_id,_distance,_rowid");
    const native = await nativeSearch(items, query, 10);
    expect(rows.map((row) => row.split(",")[2])).toEqual(native.map((h) => h._rowid));
  });

  test("search --via http reaches the HTTP API on PORT and prints the filtered top 5", async () => {
    const stdout = await succeeds(await example("search --via http"), stackPorts);
    const table = await openTable(demo.db, "demo", demo.storageOptions);
    try {
      expect(stdout).toMatch(new RegExp(`^version ${await table.version()}, index vector_idx, `));
      const rows = printedTable(stdout);
      expect(rows).toHaveLength(5);
      const hits = await table
        .takeRowIds(rows.map((r) => BigInt(r._rowid ?? "")))
        .select(["category"])
        .toArray();
      expect(hits.map((h) => Number(h.category))).toEqual([3, 3, 3, 3, 3]);
    } finally {
      table.close();
    }
  });

  test("search --via lambda invokes the planner on LANCE_FANOUT_LAMBDA_PORT", async () => {
    const stdout = await succeeds(await example("search --via lambda"), stackPorts);
    const table = await openTable(demo.db, "demo", demo.storageOptions);
    try {
      expect(stdout).toMatch(new RegExp(`^version ${await table.version()}, index vector_idx, `));
      expect(printedTable(stdout)).toHaveLength(5);
    } finally {
      table.close();
    }
  });
  test("prepare builds the latest version's views; a second run creates none", async () => {
    const line = await example("prepare --dataset");
    const first = JSON.parse(await succeeds(line));
    const items = await openTable(join(work, "db"), "items");
    expect(first.version).toBe(await items.version());
    items.close();
    expect(first.views).toBeGreaterThan(0);
    expect(first.created).toBeLessThanOrEqual(first.views); // the searches above built some
    expect(JSON.parse(await succeeds(line)).created).toBe(0);
  });

  test("prepare --via lambda builds the demo's views through the planner function", async () => {
    const report = JSON.parse(await succeeds(await example("prepare --via lambda"), stackPorts));
    expect(report.dataset).toBe("s3://lance-fanout/demo/demo.lance");
    expect(report.views).toBeGreaterThan(0);
  });

  test("gc --dry-run reports the dataset's views and removes nothing", async () => {
    const [report] = JSON.parse(await succeeds(await example("gc")));
    expect(report.dryRun).toBe(true);
    expect(report.removed).toEqual([]); // every view is younger than the grace period
    expect(report.kept).toBeGreaterThan(0);
    await fails("npx fanout gc --dataset ./db/items.lance --grace-minutes 5");
  });
});

describe("the user's environment wins", () => {
  const plan = "npx fanout plan --dataset ./db/items.lance";

  test("useLocalStack fills in only what is unset and never sets the allow-list", () => {
    const empty: NodeJS.ProcessEnv = { LANCE_FANOUT_S3_PORT: "1111" };
    useLocalStack(empty);
    expect(empty).toMatchObject({
      AWS_ENDPOINT_URL_S3: "http://127.0.0.1:1111",
      AWS_ENDPOINT_URL_LAMBDA: "http://127.0.0.1:9001",
      AWS_ACCESS_KEY_ID: "S3RVER",
      AWS_SECRET_ACCESS_KEY: "S3RVER",
      AWS_EC2_METADATA_DISABLED: "true",
    });
    expect(empty.LANCE_FANOUT_ALLOWED_DATASETS).toBeUndefined();

    const mine = {
      AWS_ENDPOINT_URL_S3: "http://127.0.0.1:2222",
      AWS_ENDPOINT_URL_LAMBDA: "http://127.0.0.1:3333",
      AWS_ACCESS_KEY_ID: "me",
      AWS_SECRET_ACCESS_KEY: "secret",
      AWS_REGION: "eu-west-1",
      LANCE_FANOUT_ALLOWED_DATASETS: "/data/",
      LANCE_FANOUT_S3_VIEW_PREFIX: "my-views",
    };
    const env: NodeJS.ProcessEnv = { ...mine };
    useLocalStack(env);
    expect(env).toMatchObject(mine);

    const general: NodeJS.ProcessEnv = { AWS_ENDPOINT_URL: "http://127.0.0.1:4444" };
    useLocalStack(general);
    expect(general.AWS_ENDPOINT_URL_S3).toBeUndefined();
    expect(general.AWS_ENDPOINT_URL_LAMBDA).toBeUndefined();
    expect(general.AWS_ENDPOINT_URL).toBe("http://127.0.0.1:4444");
  });

  test("an allow-list the user set is kept: it allows what it names", async () => {
    const stdout = await succeeds(plan, { LANCE_FANOUT_ALLOWED_DATASETS: join(work, "db") });
    expect(stdout).toContain("index vector_idx on vector (IvfPq, l2)");
  });

  test("an allow-list the user set is kept: it refuses what it does not name", async () => {
    const stderr = await fails(plan, {
      LANCE_FANOUT_ALLOWED_DATASETS: `${join(work, "elsewhere")},s3://lance-fanout/`,
    });
    expect(stderr).toBe(
      `fanout: FORBIDDEN_DATASET: dataset ${join(work, "db", "items.lance")} is not in the allow-list\n`,
    );
  });

  test("the local stack's S3 datasets are searchable in-process, as native lancedb answers", async () => {
    const query = vector(7);
    const stdout = await succeeds(
      `npx fanout search --via local --dataset s3://lance-fanout/demo/demo.lance --json --query '${JSON.stringify(query)}'`,
      stackPorts,
    );
    const table = await openTable(demo.db, "demo", demo.storageOptions);
    try {
      expectSameHits(
        (JSON.parse(stdout) as { results: Hit[] }).results,
        await nativeSearch(table, query, 10),
      );
    } finally {
      table.close();
    }
  });

  test("search --via http without --url posts to PORT, with --url to the URL", async () => {
    const query = vector(8);
    const base = `${await example("search --via http")} --json --query '${JSON.stringify(query)}'`;
    const viaPort = JSON.parse(await succeeds(base, stackPorts)) as { results: Hit[] };
    const viaUrl = JSON.parse(
      await succeeds(`${base} --url ${stack.api.url}`, { ...stackPorts, PORT: "1" }),
    ) as { results: Hit[] };
    expect(viaUrl.results).toEqual(viaPort.results);
    const table = await openTable(demo.db, "demo", demo.storageOptions);
    try {
      const native = await table
        .vectorSearch(query)
        .where("category = 3")
        .limit(5)
        .withRowId()
        .select(["_distance"])
        .toArray();
      expectSameHits(
        viaPort.results,
        native.map((r) => ({ _rowid: String(r._rowid), _distance: Number(r._distance) })),
      );
    } finally {
      table.close();
    }
  });

  test("search --via lambda uses the AWS_ENDPOINT_URL_LAMBDA the user set", async () => {
    const query = vector(9);
    const { LANCE_FANOUT_LAMBDA_PORT: _, ...s3AndApi } = stackPorts;
    const stdout = await succeeds(
      `${await example("search --via lambda")} --json --query '${JSON.stringify(query)}'`,
      { ...s3AndApi, AWS_ENDPOINT_URL_LAMBDA: stack.lambda.endpoint },
    );
    const table = await openTable(demo.db, "demo", demo.storageOptions);
    try {
      expectSameHits(
        (JSON.parse(stdout) as { results: Hit[] }).results,
        await nativeSearch(table, query, 5),
      );
    } finally {
      table.close();
    }
  });
});

describe("a random query has the column's dimension", () => {
  beforeAll(async () => {
    // Two vector columns of different dimensions, each with its own index.
    const next = random(3);
    const rows = Array.from({ length: 3000 }, (_, id) => ({
      id,
      vector: Array.from({ length: DIMENSION }, next),
      small: Array.from({ length: 8 }, next),
    }));
    const data = lancedb.makeArrowTable(rows, {
      vectorColumns: {
        vector: { type: new arrow.Float32() },
        small: { type: new arrow.Float32() },
      },
    });
    await mkdir(join(work, "multi"), { recursive: true });
    const db = await lancedb.connect(join(work, "multi"));
    const table = await db.createTable("items", data);
    const ivfPq = (numSubVectors: number) => ({
      config: lancedb.Index.ivfPq({ numPartitions: 2, numSubVectors }),
    });
    await table.createIndex("vector", ivfPq(2));
    await table.createIndex("small", ivfPq(1));
    table.close();
  });

  test("plan --column picks that column's dimension", async () => {
    const stdout = await succeeds("npx fanout plan --dataset ./multi/items.lance --column small");
    expect(stdout).toMatch(/index small_idx on small \(IvfPq, l2\), 1 segments, .* -> 1 task\(s\)/);
  });

  test("search without --query on the column that --column names", async () => {
    const stdout = await succeeds(
      "npx fanout search --dataset ./multi/items.lance --column small -k 3 --json",
    );
    const response = JSON.parse(stdout) as { index: { column: string }; results: Hit[] };
    expect(response.index.column).toBe("small");
    expect(response.results).toHaveLength(3);
  });

  test("without --column, several vector columns are the planner's INVALID_REQUEST", async () => {
    expect(await fails("npx fanout plan --dataset ./multi/items.lance")).toBe(
      "fanout: INVALID_REQUEST: the dataset has several vector columns (vector, small); set column\n",
    );
  });
});

describe("errors print fanout: CODE: message", () => {
  test("a dataset that does not exist", async () => {
    expect(await fails("npx fanout plan --dataset ./db/missing.lance")).toMatch(
      /^fanout: DATASET_NOT_FOUND: /,
    );
  });

  test("a query that is not JSON", async () => {
    expect(
      await fails("npx fanout search --dataset ./db/items.lance --query '[0.1, oops'"),
    ).toMatch(/^fanout: INVALID_REQUEST: --query: /);
  });

  test("a query of the wrong dimension, found in-process or by the HTTP API", async () => {
    const message = `query: vectors have dimension 2, column "vector" has ${DIMENSION}`;
    expect(await fails("npx fanout search --dataset ./db/items.lance --query '[0.1, 0.2]'")).toBe(
      `fanout: INVALID_REQUEST: ${message}\n`,
    );
    expect(
      await fails(
        "npx fanout search --via http --dataset s3://lance-fanout/demo/demo.lance --query '[0.1, 0.2]'",
        stackPorts,
      ),
    ).toBe(`fanout: INVALID_REQUEST: ${message}\n`);
  });

  test("a missing required option or an unknown one is a usage error: status 2", async () => {
    expect(await fails("npx fanout search --query '[0.1]'", {}, 2)).toBe(
      "fanout: INVALID_REQUEST: required option '--dataset <uri>' not specified\n",
    );
    expect(await fails("npx fanout plan --dataset ./db/items.lance --nope", {}, 2)).toBe(
      "fanout: INVALID_REQUEST: unknown option '--nope'\n",
    );
  });

  test("--version prints the package's version", async () => {
    const pkg = join(import.meta.dirname, "..", "package.json");
    const { version } = JSON.parse(await readFile(pkg, "utf8")) as { version: string };
    expect(await succeeds("npx fanout --version")).toBe(`${version}\n`);
  });

  test("an HTTP API that is not there", async () => {
    expect(
      await fails(
        "npx fanout search --via http --dataset s3://lance-fanout/demo/demo.lance --query '[0.1]' --url http://127.0.0.1:1",
      ),
    ).toMatch(/^fanout: INTERNAL: cannot reach the HTTP API at http:\/\/127\.0\.0\.1:1\/search /);
  });
});
