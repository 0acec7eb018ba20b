/**
 * The three functions (planner, segment-search, merge), their roles, log groups and
 * configuration. Each role holds exactly what its function does: all three read the allowed
 * datasets, only segment-search writes views, only the planner invokes the other two.
 * @module
 */
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Annotations, Duration, RemovalPolicy } from "aws-cdk-lib";
import { PolicyStatement, Role, ServicePrincipal } from "aws-cdk-lib/aws-iam";
import { Architecture, LoggingFormat, Runtime } from "aws-cdk-lib/aws-lambda";
import { NodejsFunction } from "aws-cdk-lib/aws-lambda-nodejs";
import { LogGroup, RetentionDays } from "aws-cdk-lib/aws-logs";
import { Construct } from "constructs";
import { fanoutBundling } from "./bundling.js";
import type { DatasetAccess } from "./dataset-access.js";
import { FUNCTION_DEFAULTS } from "./function-defaults.js";

/** The repository root: handlers, package.json and package-lock.json live here. */
export const PROJECT_ROOT = resolve(fileURLToPath(import.meta.url), "../..");

/** Runtimes Lambda still creates functions with (nodejs20.x is blocked). */
export const SUPPORTED_RUNTIMES = [Runtime.NODEJS_22_X, Runtime.NODEJS_24_X] as const;

/** Sizing of one function. */
export interface FunctionSettings {
  /** Memory in MB, 128..10240 (1769 MB = one vCPU). @default 1024 (planner, merge), 2048 (segment-search) */
  readonly memorySize?: number;
  /** @default 29 s (planner: above the query deadline, under API Gateway's 30 s), 30 s (others) */
  readonly timeout?: Duration;
  /**
   * Reserved concurrency, also a ceiling on the function's concurrency.
   * @default none: the function draws on the account's unreserved concurrency
   */
  readonly reservedConcurrency?: number;
}

export interface FanoutFunctionsProps {
  /** What the functions may read and write in S3. */
  readonly access: DatasetAccess;
  /** @default Architecture.ARM_64 */
  readonly architecture?: Architecture;
  /** nodejs22.x or nodejs24.x. @default Runtime.NODEJS_24_X */
  readonly runtime?: Runtime;
  /** @default 1024 MB, 29 s */
  readonly planner?: FunctionSettings;
  /** @default 2048 MB, 30 s */
  readonly segmentSearch?: FunctionSettings;
  /** @default 1024 MB, 30 s */
  readonly merge?: FunctionSettings;
  /** Upper bound on tasks per query (`LANCE_FANOUT_MAX_TASKS`). @default 16 */
  readonly maxTasks?: number;
  /** Deadline of a query that sets no `timeoutMs` (`LANCE_FANOUT_TIMEOUT_MS`). @default 25 s */
  readonly queryTimeout?: Duration;
  /** Open segment views kept per execution environment (`LANCE_FANOUT_VIEW_CACHE_SIZE`). @default 64 */
  readonly viewCacheSize?: number;
  /** Retention of the functions' logs. @default RetentionDays.ONE_MONTH */
  readonly logRetention?: RetentionDays;
  /** What `cdk destroy` does with the log groups. @default RemovalPolicy.DESTROY */
  readonly logRemovalPolicy?: RemovalPolicy;
  /** Directory with `functions/`, package.json and package-lock.json. @default this repository */
  readonly projectRoot?: string;
}

const DEFAULTS = {
  planner: sizeOf(FUNCTION_DEFAULTS.planner),
  segmentSearch: sizeOf(FUNCTION_DEFAULTS.segmentSearch),
  merge: sizeOf(FUNCTION_DEFAULTS.merge),
} as const;

function sizeOf(defaults: { readonly memorySize: number; readonly timeoutSeconds: number }) {
  return { memorySize: defaults.memorySize, timeout: Duration.seconds(defaults.timeoutSeconds) };
}

/** The three lance-fanout functions. */
export class FanoutFunctions extends Construct {
  readonly planner: NodejsFunction;
  readonly segmentSearch: NodejsFunction;
  readonly merge: NodejsFunction;
  /** Log group of each function, by function. */
  readonly logGroups: {
    readonly planner: LogGroup;
    readonly segmentSearch: LogGroup;
    readonly merge: LogGroup;
  };

  /** @throws TypeError for an unsupported runtime or out-of-range settings. */
  constructor(scope: Construct, id: string, props: FanoutFunctionsProps) {
    super(scope, id);
    const runtime = props.runtime ?? Runtime.NODEJS_24_X;
    if (!SUPPORTED_RUNTIMES.some((r) => r.name === runtime.name)) {
      throw new TypeError(
        `Expected runtime ${SUPPORTED_RUNTIMES.map((r) => r.name).join(" or ")}, got ${runtime.name}`,
      );
    }
    const architecture = props.architecture ?? Architecture.ARM_64;
    const maxTasks = positiveInt("maxTasks", props.maxTasks ?? 16, 1000);
    const viewCacheSize = positiveInt("viewCacheSize", props.viewCacheSize ?? 64, 100_000);
    const queryTimeoutMs = (props.queryTimeout ?? Duration.seconds(25)).toMilliseconds();
    positiveInt("queryTimeout (ms)", queryTimeoutMs, 900_000);
    const settings = {
      planner: sizing("planner", props.planner, DEFAULTS.planner),
      segmentSearch: sizing("segmentSearch", props.segmentSearch, DEFAULTS.segmentSearch),
      merge: sizing("merge", props.merge, DEFAULTS.merge),
    };
    if (settings.planner.timeout.toMilliseconds() <= queryTimeoutMs) {
      throw new TypeError(
        `planner.timeout (${settings.planner.timeout.toSeconds()} s) must exceed queryTimeout (${queryTimeoutMs} ms), so the planner can answer TIMEOUT`,
      );
    }

    const reserved = settings.segmentSearch.reservedConcurrency;
    if (reserved !== undefined && reserved < maxTasks) {
      Annotations.of(this).addWarningV2(
        "lance-fanout:segmentSearchConcurrency",
        `segmentSearch.reservedConcurrency (${reserved}) is below maxTasks (${maxTasks}): one query's tasks will be throttled and retried`,
      );
    }

    const root = props.projectRoot ?? PROJECT_ROOT;
    const logRetention = props.logRetention ?? RetentionDays.ONE_MONTH;
    const common = {
      LANCE_FANOUT_S3_VIEW_PREFIX: props.access.viewPrefix,
      LANCE_FANOUT_ALLOWED_DATASETS: props.access.allowList,
      LANCE_FANOUT_ALLOW_LOCAL: "false",
      LANCE_FANOUT_VIEW_CACHE_SIZE: String(viewCacheSize),
      LANCEDB_LOG: "error",
      NODE_OPTIONS: "--enable-source-maps",
    };
    const make = (name: string, dir: string, size: Sizing, description: string) => {
      const logGroup = new LogGroup(this, `${name}Logs`, {
        retention: logRetention,
        removalPolicy: props.logRemovalPolicy ?? RemovalPolicy.DESTROY,
      });
      // Own role without AWSLambdaBasicExecutionRole: logs go to this log group only.
      const role = new Role(this, `${name}Role`, {
        assumedBy: new ServicePrincipal("lambda.amazonaws.com"),
        description: `lance-fanout ${dir}`,
      });
      role.addToPrincipalPolicy(
        new PolicyStatement({
          actions: ["logs:CreateLogStream", "logs:PutLogEvents"],
          resources: [logGroup.logGroupArn],
        }),
      );
      const fn = new NodejsFunction(this, name, {
        description,
        entry: resolve(root, "functions", dir, "handler.ts"),
        handler: "handler",
        projectRoot: root,
        depsLockFilePath: resolve(root, "package-lock.json"),
        runtime,
        architecture,
        memorySize: size.memorySize,
        timeout: size.timeout,
        reservedConcurrentExecutions: size.reservedConcurrency,
        role,
        logGroup,
        loggingFormat: LoggingFormat.JSON,
        environment: { ...common },
        bundling: fanoutBundling(architecture),
      });
      props.access.grantRead(fn);
      return { fn, logGroup };
    };

    const segmentSearch = make(
      "SegmentSearch",
      "segment-search",
      settings.segmentSearch,
      "lance-fanout: one k-nearest search over one group of index segments",
    );
    props.access.grantViews(segmentSearch.fn);
    const merge = make(
      "Merge",
      "merge",
      settings.merge,
      "lance-fanout: global top-k and select columns",
    );
    const planner = make(
      "Planner",
      "planner",
      settings.planner,
      "lance-fanout: plans a search, fans out segment-search tasks, merges",
    );
    planner.fn.addEnvironment(
      "LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION",
      segmentSearch.fn.functionName,
    );
    planner.fn.addEnvironment("LANCE_FANOUT_MERGE_FUNCTION", merge.fn.functionName);
    planner.fn.addEnvironment("LANCE_FANOUT_MAX_TASKS", String(maxTasks));
    planner.fn.addEnvironment("LANCE_FANOUT_TIMEOUT_MS", String(queryTimeoutMs));
    planner.fn.addToRolePolicy(
      new PolicyStatement({
        actions: ["lambda:InvokeFunction"],
        resources: [segmentSearch.fn.functionArn, merge.fn.functionArn],
      }),
    );

    this.planner = planner.fn;
    this.segmentSearch = segmentSearch.fn;
    this.merge = merge.fn;
    this.logGroups = {
      planner: planner.logGroup,
      segmentSearch: segmentSearch.logGroup,
      merge: merge.logGroup,
    };
  }
}

interface Sizing {
  readonly memorySize: number;
  readonly timeout: Duration;
  readonly reservedConcurrency: number | undefined;
}

function sizing(
  name: string,
  settings: FunctionSettings | undefined,
  defaults: { readonly memorySize: number; readonly timeout: Duration },
): Sizing {
  const memorySize = settings?.memorySize ?? defaults.memorySize;
  if (!(Number.isInteger(memorySize) && memorySize >= 128 && memorySize <= 10_240)) {
    throw new TypeError(
      `Expected ${name}.memorySize to be an integer 128..10240 (MB), got ${memorySize}`,
    );
  }
  const timeout = settings?.timeout ?? defaults.timeout;
  const seconds = timeout.toSeconds({ integral: false });
  if (!(seconds >= 1 && seconds <= 900)) {
    throw new TypeError(`Expected ${name}.timeout to be 1..900 seconds, got ${seconds}`);
  }
  const reserved = settings?.reservedConcurrency;
  if (reserved !== undefined) positiveInt(`${name}.reservedConcurrency`, reserved, 10_000);
  return { memorySize, timeout, reservedConcurrency: reserved };
}

function positiveInt(name: string, value: number, max: number): number {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new TypeError(`Expected ${name} to be an integer 1..${max}, got ${value}`);
  }
  return value;
}
