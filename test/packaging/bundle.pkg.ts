/**
 * The deployable assets, built for real: `npx cdk synth` of both architectures with local
 * esbuild bundling, no AWS credentials and no AWS endpoint, then
 * - each asset holds the lancedb binary of its function's architecture (ELF machine) and no
 *   other platform's build or unused optional dependency, and is under 200 MB unzipped;
 * - the bundles of this machine's architecture, run behind the local Lambda service with the
 *   environment the template gives them, answer searches on a real dataset in the local S3 as
 *   native lancedb does;
 * - every S3 request they made is allowed by the IAM statements the template gives their role;
 * - an architecture the pinned lancedb has no build of (its lock says) is refused by synth;
 * - where it has one, the arm64 bundles do the same on an arm64 Node of the functions'
 *   runtime, emulated by qemu on other machines (`./arm64-node.ts`).
 * The test output gives load and search times.
 *
 * Run with `npx vitest run --config test/packaging/vitest.config.ts`.
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, utimes } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { InvokeCommand, LambdaClient } from "@aws-sdk/client-lambda";
import { GetObjectCommand, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { missingLancedbBuild } from "../../infra/lancedb-builds.js";
import { directorySize, elfMachine } from "../../infra/prune-asset.js";
import { bundleFunctions } from "../../local/bundle.js";
import { type LocalLambda, startLocalLambda } from "../../local/lambda.js";
import { freePort } from "../../local/net.js";
import { type LocalS3, startLocalS3 } from "../../local/s3.js";
import { type Dataset, makeDataset, nativeSearch, queries } from "../support/fixtures.js";
import { arm64NodeCommand } from "./arm64-node.js";
import {
  type IamStatement,
  isAllowed,
  type RecordingProxy,
  type S3Access,
  s3Accesses,
  startS3AuthProxy,
} from "./s3-access.js";

const ROOT = resolve(fileURLToPath(import.meta.url), "../../..");
const BUCKET = "lance-fanout-pkg";
const STACK = "LanceFanoutPkg";
const FUNCTIONS = ["Planner", "SegmentSearch", "Merge", "Gc"] as const;
type FunctionId = (typeof FUNCTIONS)[number];

interface Architecture {
  /** The `architecture` context value. */
  readonly context: "arm64" | "x86_64";
  /** Node's and npm's name. */
  readonly arch: "arm64" | "x64";
  readonly elfMachine: number;
}
const ALL_ARCHITECTURES: readonly Architecture[] = [
  { context: "arm64", arch: "arm64", elfMachine: 183 },
  { context: "x86_64", arch: "x64", elfMachine: 62 },
];
/** The architectures the pinned lancedb has a build of (its lock says), bundled and run here. */
const ARCHITECTURES = ALL_ARCHITECTURES.filter((a) => missingLancedbBuild(a.arch) === undefined);
/** The others, whose synth must be refused. */
const REFUSED = ALL_ARCHITECTURES.filter((a) => !ARCHITECTURES.includes(a));
const HOST = ARCHITECTURES.find((a) => a.arch === process.arch);
const ARM64 = ARCHITECTURES.find((a) => a.arch === "arm64");

interface Template {
  readonly Resources: Record<
    string,
    { Type: string; Properties: Record<string, unknown>; Metadata?: Record<string, unknown> }
  >;
}

interface SynthFunction {
  readonly logicalId: string;
  readonly assetDir: string;
  readonly environment: Record<string, unknown>;
  readonly statements: readonly IamStatement[];
  readonly properties: Record<string, unknown>;
}

interface Synth {
  readonly architecture: Architecture;
  readonly outdir: string;
  readonly seconds: number;
  /** What the bundling hook reported. */
  readonly assetLines: readonly string[];
  readonly functions: Record<FunctionId, SynthFunction>;
}

/** `npx cdk synth` as a user runs it offline: no credentials, no metadata service, no notices. */
async function cdkSynth(
  architecture: Architecture,
  outdir: string,
): Promise<{ seconds: number; assetLines: string[] }> {
  const { code, log, seconds } = await runCdkSynth(architecture, outdir);
  if (code !== 0) throw new Error(`cdk synth (${architecture.context}) exited ${code}:\n${log}`);
  const assetLines = log.split("\n").filter((l) => l.startsWith("lance-fanout "));
  for (const line of assetLines) process.stderr.write(`${line}\n`);
  return { seconds, assetLines };
}

async function runCdkSynth(
  architecture: Architecture,
  outdir: string,
): Promise<{ code: number | null; log: string; seconds: number }> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    AWS_EC2_METADATA_DISABLED: "true",
    CDK_DISABLE_CLI_TELEMETRY: "true",
  };
  for (const name of [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
  ]) {
    delete env[name];
  }
  const args = ["cdk", "synth", "--no-notices", "--quiet", "--output", outdir];
  const context = {
    stackName: STACK,
    datasets: `s3://${BUCKET}/datasets/`,
    architecture: architecture.context,
  };
  for (const [key, value] of Object.entries(context)) args.push("--context", `${key}=${value}`);
  const started = performance.now();
  const output: Buffer[] = [];
  const code = await new Promise<number | null>((done, fail) => {
    const child = spawn("npx", args, { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
    child.stdout.on("data", (chunk: Buffer) => output.push(chunk));
    child.stderr.on("data", (chunk: Buffer) => output.push(chunk));
    child.on("error", fail);
    child.on("close", done);
  });
  const log = Buffer.concat(output).toString("utf8");
  return { code, log, seconds: (performance.now() - started) / 1000 };
}

async function readSynth(
  architecture: Architecture,
  outdir: string,
  run: { seconds: number; assetLines: string[] },
): Promise<Synth> {
  const template = JSON.parse(
    await readFile(join(outdir, `${STACK}.template.json`), "utf8"),
  ) as Template;
  const resources = Object.entries(template.Resources);
  const functions = {} as Record<FunctionId, SynthFunction>;
  for (const id of FUNCTIONS) {
    const found = resources.find(
      ([, r]) =>
        r.Type === "AWS::Lambda::Function" &&
        r.Metadata?.["aws:cdk:path"] === `${STACK}/Fanout/Functions/${id}/Resource`,
    );
    if (!found) throw new Error(`no ${id} function in the template`);
    const [logicalId, fn] = found;
    const roleId = (fn.Properties.Role as { "Fn::GetAtt": [string, string] })["Fn::GetAtt"][0];
    const statements = resources
      .filter(
        ([, r]) =>
          r.Type === "AWS::IAM::Policy" &&
          (r.Properties.Roles as { Ref: string }[]).some((role) => role.Ref === roleId),
      )
      .flatMap(([, r]) => (r.Properties.PolicyDocument as { Statement: IamStatement[] }).Statement);
    functions[id] = {
      logicalId,
      assetDir: join(outdir, String(fn.Metadata?.["aws:asset:path"])),
      environment: (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables,
      statements,
      properties: fn.Properties,
    };
  }
  return { architecture, outdir, ...run, functions };
}

const synths = new Map<Architecture["context"], Synth>();
const outdirs: string[] = [];

beforeAll(async () => {
  await Promise.all(
    ARCHITECTURES.map(async (architecture) => {
      const outdir = await mkdtemp(join(tmpdir(), `fanout-cdk-${architecture.arch}-`));
      outdirs.push(outdir);
      const run = await cdkSynth(architecture, outdir);
      synths.set(architecture.context, await readSynth(architecture, outdir, run));
    }),
  );
});

afterAll(async () => {
  for (const dir of outdirs) await rm(dir, { recursive: true, force: true });
});

function synthOf(architecture: Architecture): Synth {
  const synth = synths.get(architecture.context);
  if (!synth) throw new Error(`no ${architecture.context} synth`);
  return synth;
}

describe.runIf(REFUSED.length > 0).each(REFUSED)(
  "$context without a lancedb build",
  (architecture) => {
    test("cdk synth refuses it, naming the package version the registry does not serve", async () => {
      const outdir = await mkdtemp(join(tmpdir(), `fanout-cdk-${architecture.arch}-`));
      outdirs.push(outdir);
      const { code, log } = await runCdkSynth(architecture, outdir);
      expect(code).not.toBe(0);
      const pinned = /"@lancedb\/lancedb": "([^"]+)"/.exec(
        await readFile(join(ROOT, "package.json"), "utf8"),
      )?.[1];
      expect(log).toContain(
        `@lancedb/lancedb ${pinned} has no Linux ${architecture.arch} build: the npm registry serves no @lancedb/lancedb-linux-${architecture.arch}-gnu@${pinned}`,
      );
    });
  },
);

describe.each(ARCHITECTURES)("$context assets", (architecture) => {
  test("cdk synth built them without AWS credentials, for the right runtime and architecture", () => {
    const synth = synthOf(architecture);
    process.stderr.write(`cdk synth ${architecture.context}: ${synth.seconds.toFixed(0)} s\n`);
    for (const fn of Object.values(synth.functions)) {
      expect(fn.properties).toMatchObject({
        Runtime: "nodejs24.x",
        Architectures: [architecture.context],
      });
    }
    // One line per asset; the native modules are installed once per architecture, then cached.
    const assets = synth.assetLines.filter((l) =>
      l.startsWith(`lance-fanout asset ${architecture.arch}:`),
    );
    expect(assets).toHaveLength(FUNCTIONS.length);
    expect(assets.filter((l) => l.includes("from the cache")).length).toBeGreaterThanOrEqual(2);
  });

  test.each(FUNCTIONS)(
    "%s holds the lancedb binary of its architecture and nothing unused",
    async (id) => {
      const { assetDir } = synthOf(architecture).functions[id];
      const lancedb = join(assetDir, "node_modules", "@lancedb");
      expect((await readdir(lancedb)).sort()).toEqual([
        "lancedb",
        `lancedb-linux-${architecture.arch}-gnu`,
      ]);
      const binaryDir = join(lancedb, `lancedb-linux-${architecture.arch}-gnu`);
      const binary = (await readdir(binaryDir)).find((f) => f.endsWith(".node"));
      if (!binary) throw new Error(`no .node file in ${binaryDir}`);
      expect(elfMachine(join(binaryDir, binary))).toBe(architecture.elfMachine);
      const modules = await readdir(join(assetDir, "node_modules"));
      expect(modules).not.toContain("openai");
      expect(modules).not.toContain("@huggingface");
      expect(await readdir(assetDir)).toEqual(
        expect.arrayContaining(["index.mjs", "index.mjs.map", "node_modules", "package.json"]),
      );
    },
  );

  test.each(FUNCTIONS)("%s is under 200 MB unzipped", (id) => {
    const { assetDir } = synthOf(architecture).functions[id];
    const bytes = directorySize(assetDir);
    process.stderr.write(
      `${architecture.context} ${id}: ${(bytes / 1e6).toFixed(1)} MB unzipped\n`,
    );
    expect(bytes).toBeLessThan(200_000_000);
  });

  test.skipIf(!hasCommand("readelf"))(
    "the stripped binary still exports the N-API entry point",
    async () => {
      const { assetDir } = synthOf(architecture).functions.SegmentSearch;
      const dir = join(
        assetDir,
        "node_modules",
        "@lancedb",
        `lancedb-linux-${architecture.arch}-gnu`,
      );
      const binary = (await readdir(dir)).find((f) => f.endsWith(".node")) ?? "";
      const symbols = spawnSync("readelf", ["--dyn-syms", "--wide", join(dir, binary)], {
        encoding: "utf8",
        maxBuffer: 256 * 1024 * 1024,
      }).stdout;
      expect(symbols).toMatch(/\bnapi_register_module_v1\b/);
    },
  );
});

/** The synthesized functions behind a local Lambda service, with a local S3 and a dataset in it. */
interface Deployed {
  readonly s3: LocalS3;
  /** The local S3's directory. */
  readonly s3Dir: string;
  readonly lambda: LocalLambda;
  readonly dataset: Dataset;
  /** Each function's S3 proxy, enforcing its role's statements. */
  readonly proxies: ReadonlyMap<FunctionId, RecordingProxy>;
  readonly functions: Record<FunctionId, SynthFunction>;
  invoke(id: FunctionId, payload: unknown): Promise<unknown>;
  stop(): Promise<void>;
}

/**
 * Runs the functions of `synth` as the template configures them, on a fresh local S3 holding a
 * multi-segment dataset.
 */
async function deploy(
  synth: Synth,
  options: {
    /** Runs the workers instead of this Node (see `LocalFunction.command`). */
    readonly command?: readonly string[];
    readonly workerEntry?: string;
    readonly timeoutMs: number;
  },
): Promise<Deployed> {
  const { functions } = synth;
  const s3Dir = await mkdtemp(join(tmpdir(), "fanout-pkg-s3-"));
  outdirs.push(s3Dir);
  const s3 = await startLocalS3({ directory: s3Dir, buckets: [BUCKET] });
  const dataset = await makeDataset({
    db: { uri: `s3://${BUCKET}/datasets/db`, storageOptions: s3.storageOptions() },
    initialRows: 1000,
    rounds: [800, 800],
    numPartitions: 2,
  });
  // Each function reaches S3 through a proxy that enforces its role's statements.
  const proxies = new Map<FunctionId, RecordingProxy>();
  for (const id of FUNCTIONS) {
    proxies.set(id, await startS3AuthProxy(s3.endpoint, functions[id].statements));
  }
  const lambdaPort = await freePort();
  // The template's Refs to other functions become their local names (the logical ids).
  const resolveEnv = (env: Record<string, unknown>) =>
    Object.fromEntries(
      Object.entries(env).map(([k, v]) => [
        k,
        typeof v === "string" ? v : (v as { Ref: string }).Ref,
      ]),
    );
  const lambda = await startLocalLambda({
    port: lambdaPort,
    env: {
      AWS_REGION: "us-east-1",
      AWS_ACCESS_KEY_ID: s3.credentials.accessKeyId,
      AWS_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
      AWS_ENDPOINT_URL_LAMBDA: `http://127.0.0.1:${lambdaPort}`,
      AWS_ALLOW_HTTP: "true",
      LANCE_FANOUT_LOG: "off",
    },
    ...(options.workerEntry ? { workerEntry: options.workerEntry } : {}),
    functions: FUNCTIONS.map((id) => {
      const fn = functions[id];
      const proxy = proxies.get(id)?.endpoint ?? "";
      return {
        name: fn.logicalId,
        module: join(fn.assetDir, "index.mjs"),
        concurrency: 4,
        timeoutMs: options.timeoutMs,
        ...(options.command ? { command: options.command } : {}),
        env: {
          ...resolveEnv(fn.environment),
          AWS_ENDPOINT_URL: proxy,
          AWS_ENDPOINT_URL_S3: proxy,
        },
      };
    }),
  });
  const client = new LambdaClient({
    endpoint: lambda.endpoint,
    region: "us-east-1",
    credentials: { accessKeyId: "local", secretAccessKey: "local" },
    maxAttempts: 1,
  });
  return {
    s3,
    s3Dir,
    lambda,
    dataset,
    proxies,
    functions,
    async invoke(id, payload) {
      const out = await client.send(
        new InvokeCommand({
          FunctionName: functions[id].logicalId,
          Payload: JSON.stringify(payload),
        }),
      );
      const text = Buffer.from(out.Payload ?? new Uint8Array()).toString("utf8");
      if (out.FunctionError) throw new Error(`${id} failed: ${text}`);
      return JSON.parse(text);
    },
    async stop() {
      client.destroy();
      await lambda.stop();
      for (const proxy of proxies.values()) await proxy.stop();
      await s3.stop();
    },
  };
}

describe.skipIf(!HOST)("the bundles of this machine's architecture", () => {
  let deployed: Deployed;
  let s3: LocalS3;
  let s3Dir: string;
  let dataset: Dataset;
  let proxies: ReadonlyMap<FunctionId, RecordingProxy>;
  let functions: Record<FunctionId, SynthFunction>;
  let invoke: Deployed["invoke"];
  const invokePlanner = (payload: unknown) => invoke("Planner", payload);

  beforeAll(async () => {
    deployed = await deploy(synthOf(HOST as Architecture), { timeoutMs: 60_000 });
    ({ s3, s3Dir, dataset, proxies, functions, invoke } = deployed);
  });

  afterAll(async () => {
    await deployed?.stop();
  });

  test("lancedb loads in this Node", () => {
    const loaded = loadLancedb([process.execPath], functions.SegmentSearch.assetDir);
    expect(loaded.arch).toBe(process.arch);
    process.stderr.write(
      `${process.arch} Node ${loaded.version}: require("@lancedb/lancedb") ${loaded.ms.toFixed(0)} ms\n`,
    );
  });

  test("the bundles answer a multi-segment search as native lancedb", async () => {
    const figures = await searchAsNative(deployed, 50_000);
    process.stderr.write(`${process.arch} bundles: ${figures}\n`);
  });

  test("the planner bundle answers a search, fanning out to the segment-search and merge bundles", async () => {
    // `select` makes the merge bundle read the winners' rows from the dataset too.
    const request = { dataset: dataset.uri, query: queries(2, 5), k: 5, select: ["id"] };
    const response = (await invokePlanner(request)) as {
      error?: unknown;
      plan: { tasks: number; groups: { searchedSegments: number }[] };
      results: { _query_id: number; _rowid: string; _distance: number; id: number }[];
    };
    expect(response.error).toBeUndefined();
    expect(dataset.segments).toBeGreaterThan(1);
    expect(response.plan.tasks).toBeGreaterThan(1);
    expect(response.results).toHaveLength(10);
    expect(new Set(response.results.map((r) => r._query_id))).toEqual(new Set([0, 1]));
    for (const row of response.results) expect(typeof row.id).toBe("number");

    // The same request as API Gateway delivers it.
    const http = (await invokePlanner({
      version: "2.0",
      requestContext: { http: { method: "POST", path: "/search" } },
      headers: { "content-type": "application/json" },
      body: JSON.stringify(request),
      isBase64Encoded: false,
    })) as { statusCode: number; body: string };
    expect(http.statusCode).toBe(200);
    expect(JSON.parse(http.body).results).toEqual(response.results);
  });

  test("a dataset outside the allowed prefixes is refused by the deployed configuration", async () => {
    const response = (await invokePlanner({
      dataset: `s3://${BUCKET}/elsewhere/items.lance`,
      query: queries(1, 5),
      k: 5,
    })) as { error?: { code: string } };
    expect(response.error?.code).toBe("FORBIDDEN_DATASET");
  });

  test("the planner bundle prepares a version on a direct request and on a commit event", async () => {
    const direct = (await invokePlanner({ prepare: { dataset: dataset.uri } })) as {
      prepared: { dataset: string; version: number; views: number; error?: unknown }[];
    };
    expect(direct.prepared).toEqual([
      expect.objectContaining({ dataset: dataset.uri, version: dataset.version }),
    ]);
    expect(direct.prepared[0]?.views).toBeGreaterThan(1);
    const key = `${dataset.uri.replace(`s3://${BUCKET}/`, "")}/_versions/${dataset.version}.manifest`;
    const commit = (await invokePlanner({
      version: "0",
      source: "aws.s3",
      "detail-type": "Object Created",
      detail: { bucket: { name: BUCKET }, object: { key } },
    })) as { prepared: { dataset: string; created: number; error?: unknown }[] };
    expect(commit.prepared).toEqual([
      expect.objectContaining({ dataset: dataset.uri, created: 0 }),
    ]);
  });

  test("the gc bundle, on its schedule, deletes a dead view through its role and keeps the live ones", async () => {
    // A view of a dataset that is gone, last written two hours ago (s3rver dates objects by mtime).
    const view = `lance-fanout-views/datasets/gone.lance/view-${"0".repeat(32)}.lance`;
    const writer = new S3Client({
      endpoint: s3.endpoint,
      forcePathStyle: true,
      region: "us-east-1",
      credentials: s3.credentials,
    });
    try {
      for (const file of ["_versions/1.manifest", "data/0.lance"]) {
        await writer.send(
          new PutObjectCommand({ Bucket: BUCKET, Key: `${view}/${file}`, Body: "x" }),
        );
      }
    } finally {
      writer.destroy();
    }
    const old = new Date(Date.now() - 2 * 3_600_000);
    for (const file of await readdir(join(s3Dir, BUCKET, view), { recursive: true })) {
      await utimes(join(s3Dir, BUCKET, view, file), old, old);
    }
    const response = (await invoke("Gc", {
      version: "0",
      source: "aws.events",
      "detail-type": "Scheduled Event",
      detail: {},
    })) as { reports: { dataset: string; removed: { view: string }[]; kept: number }[] };
    const byDataset = new Map(response.reports.map((r) => [r.dataset, r]));
    expect(byDataset.get(`s3://${BUCKET}/datasets/gone.lance`)?.removed).toEqual([
      expect.objectContaining({ view: `view-${"0".repeat(32)}`, objects: 2 }),
    ]);
    expect(byDataset.get(dataset.uri)).toMatchObject({ removed: [] });
    expect(byDataset.get(dataset.uri)?.kept).toBeGreaterThan(1);
    const deletes = proxies.get("Gc")?.requests.flatMap(s3Accesses) ?? [];
    expect(deletes.filter((a) => a.action === "s3:DeleteObject")).toHaveLength(2);
  });

  test("every S3 request of every function was allowed by its role's statements", () => {
    const denied: S3Access[] = [];
    for (const id of FUNCTIONS) {
      expect(proxies.get(id)?.requests.length, `${id} made no S3 request`).toBeGreaterThan(0);
      denied.push(...(proxies.get(id)?.denied ?? []).filter((a) => !isLostCommitCleanup(id, a)));
    }
    expect(denied).toEqual([]);
  });

  test("segment-search wrote only under the view prefix, gc only deleted there; planner and merge wrote nothing", () => {
    const writes = (id: FunctionId) =>
      (proxies.get(id)?.requests.flatMap(s3Accesses) ?? []).filter((a) =>
        /^s3:(Put|Delete|Abort)/.test(a.action),
      );
    expect(writes("Planner")).toEqual([]);
    expect(writes("Merge")).toEqual([]);
    const viewWrites = writes("SegmentSearch");
    expect(viewWrites.length).toBeGreaterThan(0);
    for (const w of viewWrites) {
      if (!isLostCommitCleanup("SegmentSearch", w)) expect(w.action).not.toMatch(/^s3:Delete/);
      expect(w.resource).toMatch(`arn:aws:s3:::${BUCKET}/lance-fanout-views/`);
    }
    const gcWrites = writes("Gc");
    expect(gcWrites.length).toBeGreaterThan(0);
    for (const w of gcWrites) {
      expect(w.action).toBe("s3:DeleteObject");
      expect(w.resource).toMatch(`arn:aws:s3:::${BUCKET}/lance-fanout-views/`);
    }
  });

  test("the proxies answer as S3 would for the role: 403 for what it may not do or see", async () => {
    const s3Client = (id: FunctionId) =>
      new S3Client({
        endpoint: proxies.get(id)?.endpoint,
        forcePathStyle: true,
        region: "us-east-1",
        credentials: s3.credentials,
        maxAttempts: 1,
      });
    const status = (p: Promise<unknown>) =>
      p.then(
        () => 200,
        (err: { $metadata?: { httpStatusCode?: number } }) => err.$metadata?.httpStatusCode,
      );
    const merge = s3Client("Merge");
    const search = s3Client("SegmentSearch");
    try {
      const put = (client: S3Client, key: string) =>
        client.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: "x" }));
      expect(await status(put(merge, "datasets/db/x"))).toBe(403);
      expect(await status(put(search, "datasets/db/x"))).toBe(403);
      expect(await status(put(search, "lance-fanout-views/probe"))).toBe(200);
      const get = (key: string) => merge.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
      expect(await status(get("datasets/db/missing"))).toBe(403);
      expect(await status(get("lance-fanout-views/probe"))).toBe(403);
    } finally {
      merge.destroy();
      search.destroy();
    }
  });

  test("the evaluator denies what the policies do not grant", () => {
    const { statements } = functions.Planner;
    const request = "test";
    expect(
      isAllowed(
        { action: "s3:GetObject", resource: `arn:aws:s3:::${BUCKET}/datasets/x`, request },
        statements,
      ),
    ).toBe(true);
    expect(
      isAllowed(
        { action: "s3:PutObject", resource: `arn:aws:s3:::${BUCKET}/datasets/x`, request },
        statements,
      ),
    ).toBe(false);
    expect(
      isAllowed(
        {
          action: "s3:GetObject",
          resource: `arn:aws:s3:::${BUCKET}/lance-fanout-views/v`,
          request,
        },
        statements,
      ),
    ).toBe(false);
    expect(
      isAllowed(
        { action: "s3:ListBucket", resource: `arn:aws:s3:::${BUCKET}`, request },
        statements,
      ),
    ).toBe(false);
    expect(
      isAllowed(
        {
          action: "s3:ListBucket",
          resource: `arn:aws:s3:::${BUCKET}`,
          prefix: "elsewhere/",
          request,
        },
        statements,
      ),
    ).toBe(false);
  });
});

/**
 * The one delete lancedb asks segment-search for, refused by its role by design: when two tasks
 * create the same view at once (tasks of one group for different queries), the commit that loses
 * removes its own transaction file. The view is right either way (test/no-delete.test.ts).
 */
function isLostCommitCleanup(id: FunctionId, access: S3Access): boolean {
  return (
    id === "SegmentSearch" &&
    access.action === "s3:DeleteObject" &&
    /^arn:aws:s3:::[^/]+\/lance-fanout-views\/.+\/view-[0-9a-f]{32}\.lance\/_transactions\/\d+-[0-9a-f-]{36}\.txn$/.test(
      access.resource,
    )
  );
}

/** How long `require("@lancedb/lancedb")` of a function asset takes in a fresh process of `node`. */
function loadLancedb(
  node: readonly string[],
  assetDir: string,
): { arch: string; version: string; ms: number } {
  const lancedb = join(assetDir, "node_modules", "@lancedb", "lancedb");
  const script = `const t = performance.now(); require(${JSON.stringify(lancedb)}); console.log(JSON.stringify({ arch: process.arch, version: process.version, ms: performance.now() - t }));`;
  const [program = "", ...args] = node;
  const run = spawnSync(program, [...args, "-e", script], { encoding: "utf8" });
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(run.stdout);
}

/**
 * A search through the deployed planner into several segment-search tasks and a merge (`select`
 * and a `refineFactor` across tasks need it), answered as native lancedb answers it; first with
 * every segment-search and merge worker starting, then warm.
 * @returns how long each step took, for the test output
 */
async function searchAsNative(deployed: Deployed, timeoutMs: number): Promise<string> {
  const { dataset, lambda, functions } = deployed;
  const k = 5;
  const search = { nprobes: 2, refineFactor: 4, select: ["id"] };
  const query = queries(3, 11);
  const request = {
    dataset: dataset.uri,
    query,
    k,
    strategy: "segments",
    ...search,
    timeoutMs,
  };
  type Response = {
    error?: unknown;
    plan: { tasks: number; groups: { segments: string[]; searchedSegments: number }[] };
    results: { _query_id: number; _rowid: string; _distance: number; id: number }[];
  };
  const timed = async (payload: object) => {
    const started = performance.now();
    const response = (await deployed.invoke("Planner", payload)) as Response;
    expect(response.error).toBeUndefined();
    return { response, seconds: `${((performance.now() - started) / 1000).toFixed(1)} s` };
  };
  // The planner's cold start alone: an explained plan searches nothing.
  const planner = await timed({ ...request, explain: true });
  const cold = await timed(request);
  const warm = await timed(request);
  expect(dataset.segments).toBeGreaterThan(1);
  expect(cold.response.plan.tasks).toBe(dataset.segments);
  for (const group of cold.response.plan.groups) {
    expect(group.searchedSegments).toBe(group.segments.length);
  }
  for (const [i, q] of query.entries()) {
    const native = await nativeSearch(dataset, q, k, search);
    const rows = cold.response.results.filter((r) => r._query_id === i);
    expect(rows.map((r) => [r._rowid, r.id])).toEqual(native.map((h) => [h.rowid, h.columns?.id]));
    expect(rows.map((r) => r._distance)).toEqual(native.map((h) => expect.closeTo(h.distance, 5)));
  }
  expect(warm.response.results).toEqual(cold.response.results);
  const stats = lambda.stats();
  expect(stats[functions.SegmentSearch.logicalId]?.invocations).toBe(2 * dataset.segments);
  expect(stats[functions.Merge.logicalId]?.invocations).toBe(2);
  return (
    `planner cold start (explain) ${planner.seconds}; search of ${query.length} queries in ` +
    `${dataset.segments} tasks + merge ${cold.seconds} with those workers starting, ${warm.seconds} warm`
  );
}

/** Emulated, the arm64 Node runs an order of magnitude slower than this machine's. */
const EMULATED_TIMEOUT_MS = 300_000;

// Only where the pinned lancedb has an arm64 build: otherwise its synth is refused (above).
describe.runIf(ARM64)("the arm64 bundles on an arm64 Node 24", () => {
  const arm64 = ARM64 as Architecture;
  const emulated = process.arch === "arm64" ? "" : " under qemu";
  let command: string[];
  let deployed: Deployed;

  beforeAll(async () => {
    command = arm64NodeCommand();
    deployed = await deploy(synthOf(arm64), {
      command,
      // Plain JavaScript: the TypeScript loader (tsx, over esbuild) is native to this machine.
      workerEntry: (await bundleFunctions()).worker,
      timeoutMs: EMULATED_TIMEOUT_MS,
    });
  });

  afterAll(async () => {
    await deployed?.stop();
  });

  test("is the Node of the functions' runtime, and loads their lancedb binary", () => {
    const { assetDir, properties } = synthOf(arm64).functions.SegmentSearch;
    const loaded = loadLancedb(command, assetDir);
    const major = /^nodejs(\d+)\.x$/.exec(String(properties.Runtime))?.[1];
    expect(loaded).toMatchObject({
      arch: "arm64",
      version: expect.stringMatching(`^v${major}\\.`),
    });
    process.stderr.write(
      `arm64 Node ${loaded.version}${emulated}: require("@lancedb/lancedb") ${loaded.ms.toFixed(0)} ms\n`,
    );
  });

  test(
    "the planner, segment-search and merge bundles answer a multi-segment search as native lancedb",
    async () => {
      const figures = await searchAsNative(deployed, EMULATED_TIMEOUT_MS - 60_000);
      process.stderr.write(`arm64 bundles${emulated}: ${figures}\n`);
    },
    2 * EMULATED_TIMEOUT_MS,
  );
});

function hasCommand(command: string): boolean {
  return spawnSync(command, ["--version"], { stdio: "ignore" }).error === undefined;
}
