/**
 * The app's configuration from CDK context (`cdk.json` or `-c key=value`), parsed into stack
 * props. Values from the command line arrive as strings, values from cdk.json as JSON; both
 * are accepted and checked, and an unknown key is an error (a typo would otherwise be ignored).
 * @module
 */
import { Duration, RemovalPolicy } from "aws-cdk-lib";
import { Architecture, Runtime } from "aws-cdk-lib/aws-lambda";
import { RetentionDays } from "aws-cdk-lib/aws-logs";
import { COVERAGE_MODES, type Coverage } from "../shared/request.js";
import type { FunctionSettings } from "./fanout-functions.js";
import type { LanceFanoutStackProps } from "./lance-fanout-stack.js";
import { parseSchedule } from "./view-upkeep.js";

/** Every context key the app reads, with what it means (docs/deploy.md lists the same). */
export const CONTEXT_KEYS = {
  stackName: "stack name (default LanceFanout)",
  account: "account id (default: the CLI's current account, CDK_DEFAULT_ACCOUNT)",
  region: "region (default CDK_DEFAULT_REGION, AWS_REGION, then us-east-1)",
  datasets: "comma-separated s3://bucket/prefix/ that may be searched (read only)",
  viewPrefix: "key prefix for segment views in each dataset bucket (default lance-fanout-views)",
  architecture:
    "x86_64 (default) or arm64 (refused while the pinned lancedb has no linux-arm64 build)",
  runtime: "nodejs24.x (default) or nodejs22.x",
  maxTasks: "upper bound on tasks per query (default 16)",
  reserveConcurrency:
    "true to reserve (and cap) each function's concurrency from the burst and maxTasks (default false)",
  accountConcurrency:
    "the account's Lambda concurrency quota in the region; reservations leave 100 of it (default 1000)",
  queryTimeoutMs: "deadline of a query without timeoutMs (default 25000)",
  viewCacheSize: "open views per execution environment (default 64)",
  coverage: "coverage of a request that sets none: require, fallback (default) or indexed-only",
  prepareEnvironments:
    "segment-search environments prepare loads a typical query's views into (default maxTasks + 1)",
  prepareOnCommit: "true to prepare a dataset's views on each commit (EventBridge; default false)",
  prepareSchedule: 'when to prepare prepareDatasets, e.g. "rate(15 minutes)" (default never)',
  prepareDatasets: "comma-separated dataset URIs under datasets, prepared on prepareSchedule",
  gcSchedule: 'when gc removes dead views (default "rate(1 hour)"; "off" never)',
  gcKeepVersions: "gc keeps the views of this many newest versions (default 3)",
  gcGraceMinutes: "gc keeps views younger than this, over 15 (default 60)",
  "planner.memoryMb": "planner memory (default 1024)",
  "planner.timeoutSeconds": "planner timeout (default 29)",
  "planner.reservedConcurrency":
    "planner reserved concurrency (reserved: default throttleBurstLimit); setting one reserves all",
  "segmentSearch.memoryMb": "segment-search memory (default 2048)",
  "segmentSearch.timeoutSeconds": "segment-search timeout (default: the planner's less 1 s)",
  "segmentSearch.reservedConcurrency":
    "segment-search reserved concurrency (default planner's x (maxTasks + 1)), split over the slots",
  segmentSearchSlots:
    "segment-search functions; group g's tasks go to slot g mod n, keeping each slot's indexes hot (default 1)",
  "segmentSearch.provisionedConcurrency":
    "segment-search environments kept initialised per slot (provisioned concurrency; default none)",
  "merge.memoryMb": "merge memory (default 1024)",
  "merge.timeoutSeconds": "merge timeout (default: the planner's less 1 s)",
  "merge.reservedConcurrency": "merge reserved concurrency (default: the planner's)",
  "merge.provisionedConcurrency":
    "merge environments kept initialised (provisioned concurrency; default none)",
  "gc.memoryMb": "gc memory (default 1024)",
  "gc.timeoutSeconds": "gc timeout (default 300)",
  "gc.reservedConcurrency": "gc reserved concurrency (default 1)",
  auth: "iam (default, SigV4) or jwt",
  jwtIssuer: "JWT issuer URL (auth=jwt)",
  jwtAudience: "comma-separated JWT audiences (auth=jwt)",
  throttleRateLimit: "API requests per second (default 20)",
  throttleBurstLimit: "API burst (default 40)",
  logRetentionDays: "days of function and access logs (default 30)",
  retainLogs: "true to keep log groups after cdk destroy (default false)",
  kmsKeyArns: "comma-separated KMS key ARNs of SSE-KMS dataset buckets",
  metricsNamespace: "CloudWatch namespace (default LanceFanout/<stackName>)",
} as const;

export type ContextKey = keyof typeof CONTEXT_KEYS;

export interface AppSettings {
  readonly stackName: string;
  readonly props: LanceFanoutStackProps;
}

type Env = Readonly<Record<string, string | undefined>>;

/**
 * Reads the app settings from context.
 * @param context all context values (`app.node.getAllContext()`)
 * @throws TypeError naming the key, for an unknown key or an invalid value.
 */
export function settingsFromContext(
  context: Readonly<Record<string, unknown>>,
  env: Env = process.env,
): AppSettings {
  for (const key of Object.keys(context)) {
    // CDK's own keys and feature flags contain ":" or "/" (aws:cdk:..., @aws-cdk/...).
    if (!/[:/]/.test(key) && !(key in CONTEXT_KEYS)) {
      throw new TypeError(
        `Unknown context key "${key}"; lance-fanout reads: ${Object.keys(CONTEXT_KEYS).join(", ")}`,
      );
    }
  }
  const get = (key: ContextKey) => context[key];
  const auth = optionalString(get, "auth") ?? "iam";
  if (auth !== "iam" && auth !== "jwt") {
    throw new TypeError(`Context "auth" must be iam or jwt, got "${auth}"`);
  }
  const props: LanceFanoutStackProps = {
    env: {
      account: optionalString(get, "account") ?? env.CDK_DEFAULT_ACCOUNT,
      region:
        optionalString(get, "region") ?? env.CDK_DEFAULT_REGION ?? env.AWS_REGION ?? "us-east-1",
    },
    description: "lance-fanout: serverless fan-out vector search over Lance datasets on S3",
    datasets: list(get, "datasets"),
    viewPrefix: optionalString(get, "viewPrefix"),
    architecture: architecture(optionalString(get, "architecture")),
    runtime: runtime(optionalString(get, "runtime")),
    planner: functionSettings(get, "planner"),
    segmentSearch: {
      ...functionSettings(get, "segmentSearch"),
      provisionedConcurrency: optionalInt(get, "segmentSearch.provisionedConcurrency"),
    },
    segmentSearchSlots: optionalInt(get, "segmentSearchSlots"),
    merge: {
      ...functionSettings(get, "merge"),
      provisionedConcurrency: optionalInt(get, "merge.provisionedConcurrency"),
    },
    gc: functionSettings(get, "gc"),
    maxTasks: optionalInt(get, "maxTasks"),
    reserveConcurrency: optionalBool(get, "reserveConcurrency"),
    accountConcurrency: optionalInt(get, "accountConcurrency"),
    queryTimeout: map(optionalInt(get, "queryTimeoutMs"), Duration.millis),
    viewCacheSize: optionalInt(get, "viewCacheSize"),
    coverage: coverage(optionalString(get, "coverage")),
    prepareEnvironments: optionalInt(get, "prepareEnvironments"),
    prepareOnCommit: optionalBool(get, "prepareOnCommit"),
    prepareSchedule: map(optionalString(get, "prepareSchedule"), (text) =>
      parseSchedule("prepareSchedule", text),
    ),
    prepareDatasets: list(get, "prepareDatasets"),
    gcSchedule: map(optionalString(get, "gcSchedule"), (text) =>
      text === "off" ? false : parseSchedule("gcSchedule", text),
    ),
    gcKeepVersions: optionalInt(get, "gcKeepVersions"),
    gcGrace: map(optionalInt(get, "gcGraceMinutes"), Duration.minutes),
    auth:
      auth === "iam"
        ? { type: "iam" }
        : {
            type: "jwt",
            issuer: required(optionalString(get, "jwtIssuer"), "jwtIssuer", "auth=jwt"),
            audience: required(list(get, "jwtAudience"), "jwtAudience", "auth=jwt"),
          },
    throttle: {
      rateLimit: optionalNumber(get, "throttleRateLimit"),
      burstLimit: optionalInt(get, "throttleBurstLimit"),
    },
    logRetention: retention(optionalInt(get, "logRetentionDays")),
    logRemovalPolicy: optionalBool(get, "retainLogs")
      ? RemovalPolicy.RETAIN
      : RemovalPolicy.DESTROY,
    kmsKeyArns: list(get, "kmsKeyArns"),
    metricsNamespace: optionalString(get, "metricsNamespace"),
  };
  const stackName = optionalString(get, "stackName") ?? "LanceFanout";
  if (!/^[A-Za-z][A-Za-z0-9-]{0,127}$/.test(stackName)) {
    throw new TypeError(
      `Context "stackName" must be a CloudFormation stack name, got "${stackName}"`,
    );
  }
  return { stackName, props };
}

type Get = (key: ContextKey) => unknown;

function optionalString(get: Get, key: ContextKey): string | undefined {
  const value = get(key);
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string" && typeof value !== "number") {
    throw new TypeError(`Context "${key}" must be a string, got ${JSON.stringify(value)}`);
  }
  const text = String(value).trim();
  return text === "" ? undefined : text;
}

function list(get: Get, key: ContextKey): string[] | undefined {
  const value = get(key);
  const items = Array.isArray(value)
    ? value.map((item) => {
        if (typeof item !== "string") {
          throw new TypeError(`Context "${key}" must list strings, got ${JSON.stringify(item)}`);
        }
        return item.trim();
      })
    : optionalString(get, key)
        ?.split(",")
        .map((item) => item.trim());
  const nonEmpty = items?.filter(Boolean);
  return nonEmpty?.length ? nonEmpty : undefined;
}

function optionalNumber(get: Get, key: ContextKey): number | undefined {
  const text = optionalString(get, key);
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!Number.isFinite(value)) {
    throw new TypeError(`Context "${key}" must be a number, got "${text}"`);
  }
  return value;
}

function optionalInt(get: Get, key: ContextKey): number | undefined {
  const value = optionalNumber(get, key);
  if (value !== undefined && !Number.isSafeInteger(value)) {
    throw new TypeError(`Context "${key}" must be an integer, got ${value}`);
  }
  return value;
}

function optionalBool(get: Get, key: ContextKey): boolean {
  const value = get(key);
  if (value === undefined || value === true || value === false) return value === true;
  if (value === "true" || value === "false") return value === "true";
  throw new TypeError(`Context "${key}" must be true or false, got ${JSON.stringify(value)}`);
}

function functionSettings(
  get: Get,
  name: "planner" | "segmentSearch" | "merge" | "gc",
): FunctionSettings {
  return {
    memorySize: optionalInt(get, `${name}.memoryMb`),
    timeout: map(optionalNumber(get, `${name}.timeoutSeconds`), Duration.seconds),
    reservedConcurrency: optionalInt(get, `${name}.reservedConcurrency`),
  };
}

function coverage(value: string | undefined): Coverage | undefined {
  if (value === undefined || (COVERAGE_MODES as readonly string[]).includes(value)) {
    return value as Coverage | undefined;
  }
  throw new TypeError(`Context "coverage" must be ${COVERAGE_MODES.join(", ")}, got "${value}"`);
}

function architecture(value: string | undefined): Architecture | undefined {
  if (value === undefined) return undefined;
  if (value === "arm64") return Architecture.ARM_64;
  if (value === "x86_64") return Architecture.X86_64;
  throw new TypeError(`Context "architecture" must be arm64 or x86_64, got "${value}"`);
}

function runtime(value: string | undefined): Runtime | undefined {
  if (value === undefined) return undefined;
  const found = [Runtime.NODEJS_22_X, Runtime.NODEJS_24_X].find((r) => r.name === value);
  if (!found) {
    throw new TypeError(
      `Context "runtime" must be nodejs24.x or nodejs22.x (Lambda no longer creates nodejs20.x functions), got "${value}"`,
    );
  }
  return found;
}

function retention(days: number | undefined): RetentionDays | undefined {
  if (days === undefined) return undefined;
  const allowed = Object.values(RetentionDays).filter(
    (v): v is RetentionDays => typeof v === "number" && v !== RetentionDays.INFINITE,
  );
  if (!allowed.includes(days as RetentionDays)) {
    throw new TypeError(
      `Context "logRetentionDays" must be one of ${allowed.sort((a, b) => a - b).join(", ")}, got ${days}`,
    );
  }
  return days as RetentionDays;
}

function required<T>(value: T | undefined, key: ContextKey, when: string): T {
  if (value === undefined) throw new TypeError(`Context "${key}" is required with ${when}`);
  return value;
}

function map<T, R>(value: T | undefined, f: (value: T) => R): R | undefined {
  return value === undefined ? undefined : f(value);
}
