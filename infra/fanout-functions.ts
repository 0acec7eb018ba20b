/**
 * The four functions (planner, segment-search, merge, gc), their roles, log groups and
 * configuration. Each role holds exactly what its function does: all four read the allowed
 * datasets, only segment-search writes views, only gc deletes them, only the planner invokes
 * segment-search and merge.
 * @module
 */
import { resolve } from "node:path";
import { Duration, RemovalPolicy, Validations } from "aws-cdk-lib";
import { PolicyStatement, Role, ServicePrincipal } from "aws-cdk-lib/aws-iam";
import {
  Alias,
  Architecture,
  type IFunction,
  LoggingFormat,
  Runtime,
} from "aws-cdk-lib/aws-lambda";
import { NodejsFunction } from "aws-cdk-lib/aws-lambda-nodejs";
import { LogGroup, RetentionDays } from "aws-cdk-lib/aws-logs";
import { Construct } from "constructs";
import { FUNCTION_DEFAULTS } from "../functions/defaults.js";
import { COVERAGE_MODES, type Coverage, LIMITS } from "../shared/request.js";
import { assetArch, fanoutBundling } from "./bundling.js";
import { type Reservations, reserveConcurrency } from "./concurrency.js";
import type { DatasetAccess } from "./dataset-access.js";
import { assertLancedbBuild } from "./lancedb-builds.js";
import { DEFAULT_THROTTLE } from "./search-api.js";
import { handlerEntry, LOCK_ROOT } from "./sources.js";

/** Runtimes Lambda still creates functions with (nodejs20.x is blocked). */
export const SUPPORTED_RUNTIMES = [Runtime.NODEJS_22_X, Runtime.NODEJS_24_X] as const;

/** Sizing of one function. */
export interface FunctionSettings {
  /** Memory in MB, 128..10240 (1769 MB = one vCPU). @default 1024 (planner, merge, gc), 2048 (segment-search) */
  readonly memorySize?: number;
  /**
   * @default 29 s (planner: above the query deadline, under API Gateway's 30 s), 5 min (gc),
   * a second below the planner's (segment-search, merge: nothing the planner waits for outlives it)
   */
  readonly timeout?: Duration;
  /**
   * Reserved concurrency, also a ceiling on the function's concurrency (infra/concurrency.ts).
   * @default planner: `concurrentQueries`; segment-search: planner × (maxTasks + 1); merge: planner; gc: 1
   */
  readonly reservedConcurrency?: number;
  /**
   * Execution environments kept initialised (Lambda provisioned concurrency), for segment-search
   * (per slot) and merge, the functions the planner invokes: an alias `live` on a published
   * version holds them, and the planner invokes the alias. Billed while deployed
   * (docs/deploy.md, "Cold starts"). @default none
   */
  readonly provisionedConcurrency?: number;
}

export interface FanoutFunctionsProps {
  /** What the functions may read and write in S3. */
  readonly access: DatasetAccess;
  /**
   * Refused when the pinned lancedb has no Linux build for it (infra/lancedb-builds.ts).
   * @default Architecture.X86_64
   */
  readonly architecture?: Architecture;
  /** nodejs22.x or nodejs24.x. @default Runtime.NODEJS_24_X */
  readonly runtime?: Runtime;
  /** @default 1024 MB, 29 s */
  readonly planner?: FunctionSettings;
  /** @default 2048 MB, the planner's timeout less 1 s (28 s) */
  readonly segmentSearch?: FunctionSettings;
  /**
   * Segment-search functions (slots), alike but for their environments: group g's tasks go to
   * slot g mod n, so each slot's environments keep their groups' indexes hot (docs/architecture.md,
   * "When to fan out"). They share one role and one log group, and split the reservation.
   * @default 1
   */
  readonly segmentSearchSlots?: number;
  /** @default 1024 MB, the planner's timeout less 1 s (28 s) */
  readonly merge?: FunctionSettings;
  /** Lists and deletes views of every dataset bucket. @default 1024 MB, 5 min */
  readonly gc?: FunctionSettings;
  /** Upper bound on tasks per query (`LANCE_FANOUT_MAX_TASKS`). @default 16 */
  readonly maxTasks?: number;
  /**
   * Queries that may start at once (the search API's burst): sizes the reservations.
   * @default 40, the search API's default burst
   */
  readonly concurrentQueries?: number;
  /**
   * Reserve (and so cap) each function's concurrency, sized from `concurrentQueries` and
   * `maxTasks` (infra/concurrency.ts): at the defaults 761 executions, so the account's quota
   * must be at least 861. Setting any function's `reservedConcurrency` asks for it too.
   * @default false: the functions share the account's unreserved concurrency with the others
   */
  readonly reserveConcurrency?: boolean;
  /**
   * The account's Lambda concurrency quota in the region; the reservations must leave 100 of it
   * unreserved. @default 1000
   */
  readonly accountConcurrency?: number;
  /** Deadline of a query that sets no `timeoutMs` (`LANCE_FANOUT_TIMEOUT_MS`). @default 25 s */
  readonly queryTimeout?: Duration;
  /** Open segment views kept per execution environment (`LANCE_FANOUT_VIEW_CACHE_SIZE`). @default 64 */
  readonly viewCacheSize?: number;
  /**
   * Coverage of a request that sets none, and of the plans prepare builds views for
   * (`LANCE_FANOUT_COVERAGE`). @default "fallback"
   */
  readonly coverage?: Coverage;
  /**
   * Segment-search environments prepare loads a typical query's views into
   * (`LANCE_FANOUT_PREPARE_ENVIRONMENTS`), within the segment-search's reservation.
   * @default maxTasks + 1, the most tasks one query runs at once
   */
  readonly prepareEnvironments?: number;
  /** gc keeps the views of this many newest versions (`LANCE_FANOUT_GC_KEEP_VERSIONS`). @default 3 */
  readonly gcKeepVersions?: number;
  /**
   * gc keeps views younger than this, and those of versions that were the latest this recently
   * (`LANCE_FANOUT_GC_GRACE_MINUTES`); whole minutes, over the longest query deadline (15 min).
   * @default 60 minutes
   */
  readonly gcGrace?: Duration;
  /** Retention of the functions' logs. @default RetentionDays.ONE_MONTH */
  readonly logRetention?: RetentionDays;
  /** What `cdk destroy` does with the log groups. @default RemovalPolicy.DESTROY */
  readonly logRemovalPolicy?: RemovalPolicy;
  /**
   * The project CDK bundles in (esbuild runs there). @default the directory of the lock file
   * nearest the working directory
   */
  readonly projectRoot?: string;
}

const DEFAULTS = {
  planner: sizeOf(FUNCTION_DEFAULTS.planner),
  segmentSearch: sizeOf(FUNCTION_DEFAULTS.segmentSearch),
  merge: sizeOf(FUNCTION_DEFAULTS.merge),
  gc: sizeOf(FUNCTION_DEFAULTS.gc),
} as const;

/** A function's own role, without AWSLambdaBasicExecutionRole: it logs to `logGroup` only. */
function logRole(scope: Construct, id: string, dir: string, logGroup: LogGroup): Role {
  const role = new Role(scope, id, {
    assumedBy: new ServicePrincipal("lambda.amazonaws.com"),
    description: `lance-fanout ${dir}`,
  });
  role.addToPrincipalPolicy(
    new PolicyStatement({
      actions: ["logs:CreateLogStream", "logs:PutLogEvents"],
      resources: [logGroup.logGroupArn],
    }),
  );
  return role;
}

function sizeOf(defaults: { readonly memorySize: number; readonly timeoutSeconds: number }) {
  return { memorySize: defaults.memorySize, timeout: Duration.seconds(defaults.timeoutSeconds) };
}

/** The four lance-fanout functions. */
export class FanoutFunctions extends Construct {
  readonly planner: NodejsFunction;
  /** The first segment-search slot. */
  readonly segmentSearch: NodejsFunction;
  /** Every segment-search slot, the first one first. */
  readonly segmentSearchSlots: readonly NodejsFunction[];
  readonly merge: NodejsFunction;
  readonly gc: NodejsFunction;
  /** Log group of each function, by function. */
  readonly logGroups: {
    readonly planner: LogGroup;
    readonly segmentSearch: LogGroup;
    readonly merge: LogGroup;
    readonly gc: LogGroup;
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
    const architecture = props.architecture ?? Architecture.X86_64;
    assertLancedbBuild(assetArch(architecture), LOCK_ROOT);
    const maxTasks = positiveInt("maxTasks", props.maxTasks ?? 16, 1000);
    const viewCacheSize = positiveInt("viewCacheSize", props.viewCacheSize ?? 64, 100_000);
    const queryTimeoutMs = (props.queryTimeout ?? Duration.seconds(25)).toMilliseconds();
    positiveInt("queryTimeout (ms)", queryTimeoutMs, 900_000);
    const plannerSizing = sizing("planner", props.planner, DEFAULTS.planner);
    // A task or merge the planner no longer waits for only bills: they end before it.
    const waitedFor = Duration.seconds(plannerSizing.timeout.toSeconds({ integral: false }) - 1);
    const settings = {
      planner: plannerSizing,
      segmentSearch: sizing("segmentSearch", props.segmentSearch, {
        ...DEFAULTS.segmentSearch,
        timeout: waitedFor,
      }),
      merge: sizing("merge", props.merge, { ...DEFAULTS.merge, timeout: waitedFor }),
      gc: sizing("gc", props.gc, DEFAULTS.gc),
    };
    const coverage = props.coverage ?? "fallback";
    if (!COVERAGE_MODES.includes(coverage)) {
      throw new TypeError(
        `Expected coverage to be one of ${COVERAGE_MODES.join(", ")}, got "${coverage}"`,
      );
    }
    const prepareEnvironments = positiveInt(
      "prepareEnvironments",
      props.prepareEnvironments ?? maxTasks + 1,
      1000,
    );
    const gcKeepVersions = positiveInt("gcKeepVersions", props.gcKeepVersions ?? 3, 1000);
    const gcGraceMinutes = graceMinutes(props.gcGrace ?? Duration.minutes(60));
    const slots = positiveInt("segmentSearchSlots", props.segmentSearchSlots ?? 1, maxTasks);
    checkDeadlines(settings, queryTimeoutMs);
    const reserve =
      props.reserveConcurrency === true ||
      Object.values(settings).some((size) => size.reservedConcurrency !== undefined);
    const reservations = (segmentSearch: number | undefined) =>
      reserveConcurrency({
        concurrentQueries: props.concurrentQueries ?? DEFAULT_THROTTLE.burstLimit,
        maxTasks,
        accountConcurrency: props.accountConcurrency,
        explicit: {
          planner: settings.planner.reservedConcurrency,
          segmentSearch,
          merge: settings.merge.reservedConcurrency,
          gc: settings.gc.reservedConcurrency,
        },
      });
    const reserved = reserve ? splitReservations(reservations, slots, settings) : undefined;
    for (const key of ["segmentSearch", "merge"] as const) {
      const provisioned = settings[key].provisionedConcurrency;
      if (reserved && provisioned !== undefined && provisioned > reserved[key]) {
        throw new TypeError(
          `${key}.provisionedConcurrency (${provisioned}) is above its reserved concurrency (${reserved[key]}${key === "segmentSearch" ? " per slot" : ""}): Lambda refuses that. Lower it or raise ${key}.reservedConcurrency`,
        );
      }
    }
    // Each slot gets its share of a prepare's warm invokes.
    if (reserved && Math.ceil(prepareEnvironments / slots) > reserved.segmentSearch) {
      throw new TypeError(
        `prepareEnvironments (${prepareEnvironments}) exceeds the segment-search reservation (${reserved.segmentSearch * slots}): its warm invokes would be throttled`,
      );
    }

    const logRetention = props.logRetention ?? RetentionDays.ONE_MONTH;
    const common = {
      LANCE_FANOUT_S3_VIEW_PREFIX: props.access.viewPrefix,
      LANCE_FANOUT_ALLOWED_DATASETS: props.access.allowList,
      LANCE_FANOUT_ALLOW_LOCAL: "false",
      LANCE_FANOUT_VIEW_CACHE_SIZE: String(viewCacheSize),
      LANCEDB_LOG: "error",
      NODE_OPTIONS: "--enable-source-maps",
    };
    const make = (
      key: keyof Reservations,
      name: string,
      dir: string,
      description: string,
      shared?: { readonly role: Role; readonly logGroup: LogGroup },
    ) => {
      const size = settings[key];
      const logGroup =
        shared?.logGroup ??
        new LogGroup(this, `${name}Logs`, {
          retention: logRetention,
          removalPolicy: props.logRemovalPolicy ?? RemovalPolicy.DESTROY,
        });
      // Own role without AWSLambdaBasicExecutionRole: logs go to this log group only.
      const role = shared?.role ?? logRole(this, `${name}Role`, dir, logGroup);
      const fn = new NodejsFunction(this, name, {
        description,
        entry: handlerEntry(dir),
        handler: "handler",
        // Unset, CDK takes the directory of the lock file nearest the working directory.
        ...(props.projectRoot && {
          projectRoot: props.projectRoot,
          depsLockFilePath: resolve(props.projectRoot, "package-lock.json"),
        }),
        runtime,
        architecture,
        memorySize: size.memorySize,
        timeout: size.timeout,
        reservedConcurrentExecutions: reserved?.[key],
        role,
        logGroup,
        loggingFormat: LoggingFormat.JSON,
        environment: { ...common },
        bundling: fanoutBundling(architecture),
      });
      if (!shared) props.access.grantRead(fn);
      if (runtime.name !== Runtime.NODEJS_24_X.name) {
        Validations.of(fn).acknowledge({
          id: "AwsSolutions-L1",
          reason: `${runtime.name} was chosen explicitly (runtime); Lambda still creates and runs it, and nodejs24.x, the newest, is the default`,
        });
      }
      return { fn, logGroup, role };
    };

    const searchDescription = "lance-fanout: one k-nearest search over one group of index segments";
    const segmentSearch = make(
      "segmentSearch",
      "SegmentSearch",
      "segment-search",
      searchDescription,
    );
    props.access.grantViews(segmentSearch.fn);
    const searchSlots = [
      segmentSearch.fn,
      ...Array.from(
        { length: slots - 1 },
        (_, i) =>
          make(
            "segmentSearch",
            `SegmentSearch${i + 2}`,
            "segment-search",
            searchDescription,
            segmentSearch,
          ).fn,
      ),
    ];
    const merge = make("merge", "Merge", "merge", "lance-fanout: global top-k and select columns");
    const planner = make(
      "planner",
      "Planner",
      "planner",
      "lance-fanout: plans a search, fans out segment-search tasks, merges",
    );
    // What the planner invokes: each function, or its provisioned alias.
    const invoked = (key: "segmentSearch" | "merge", fn: NodejsFunction): IFunction => {
      const provisioned = settings[key].provisionedConcurrency;
      if (provisioned === undefined) return fn;
      return new Alias(fn, "Live", {
        aliasName: "live",
        version: fn.currentVersion,
        provisionedConcurrentExecutions: provisioned,
      });
    };
    const searchTargets = searchSlots.map((fn) => invoked("segmentSearch", fn));
    const mergeTarget = invoked("merge", merge.fn);
    const nameOf = (target: IFunction) =>
      target instanceof Alias ? target.functionArn : target.functionName;
    planner.fn.addEnvironment(
      "LANCE_FANOUT_SEGMENT_SEARCH_FUNCTION",
      searchTargets.map(nameOf).join(","),
    );
    planner.fn.addEnvironment("LANCE_FANOUT_MERGE_FUNCTION", nameOf(mergeTarget));
    planner.fn.addEnvironment("LANCE_FANOUT_MAX_TASKS", String(maxTasks));
    planner.fn.addEnvironment("LANCE_FANOUT_TIMEOUT_MS", String(queryTimeoutMs));
    planner.fn.addEnvironment("LANCE_FANOUT_COVERAGE", coverage);
    planner.fn.addEnvironment("LANCE_FANOUT_PREPARE_ENVIRONMENTS", String(prepareEnvironments));
    // What a segment-search environment's index cache holds (half its memory, the runtime's
    // default there): the planner's `auto` weighs it against the groups' index sizes.
    planner.fn.addEnvironment(
      "LANCE_FANOUT_TASK_INDEX_CACHE_MB",
      String(Math.floor(settings.segmentSearch.memorySize / 2)),
    );
    planner.fn.addToRolePolicy(
      new PolicyStatement({
        actions: ["lambda:InvokeFunction"],
        resources: [...searchTargets, mergeTarget].map((target) => target.functionArn),
      }),
    );

    const gc = make("gc", "Gc", "gc", "lance-fanout: removes segment views no query can still use");
    props.access.grantCollect(gc.fn);
    // gc keeps the views of every width a plan can have: the planner's maxTasks.
    gc.fn.addEnvironment("LANCE_FANOUT_MAX_TASKS", String(maxTasks));
    gc.fn.addEnvironment("LANCE_FANOUT_GC_KEEP_VERSIONS", String(gcKeepVersions));
    gc.fn.addEnvironment("LANCE_FANOUT_GC_GRACE_MINUTES", String(gcGraceMinutes));

    this.planner = planner.fn;
    this.segmentSearch = segmentSearch.fn;
    this.segmentSearchSlots = searchSlots;
    this.merge = merge.fn;
    this.gc = gc.fn;
    this.logGroups = {
      planner: planner.logGroup,
      segmentSearch: segmentSearch.logGroup,
      merge: merge.logGroup,
      gc: gc.logGroup,
    };
  }
}

/** The reservations with segment-search's split over the slots (rounded up, and checked again). */
function splitReservations(
  reservations: (segmentSearch: number | undefined) => Reservations,
  slots: number,
  settings: { readonly segmentSearch: Sizing },
): Reservations {
  const perSlot = Math.ceil(
    reservations(settings.segmentSearch.reservedConcurrency).segmentSearch / slots,
  );
  return { ...reservations(perSlot * slots), segmentSearch: perSlot };
}

interface Sizing {
  readonly memorySize: number;
  readonly timeout: Duration;
  readonly reservedConcurrency: number | undefined;
  readonly provisionedConcurrency: number | undefined;
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
  const provisioned = settings?.provisionedConcurrency;
  if (provisioned !== undefined) {
    if (name !== "segmentSearch" && name !== "merge") {
      throw new TypeError(
        `${name}.provisionedConcurrency: only segmentSearch and merge (the functions the planner invokes) take provisioned concurrency`,
      );
    }
    positiveInt(`${name}.provisionedConcurrency`, provisioned, 10_000);
  }
  return {
    memorySize,
    timeout,
    reservedConcurrency: reserved,
    provisionedConcurrency: provisioned,
  };
}

/**
 * The query deadline ends before the planner, and so does everything the planner waits for:
 * a task or merge still running when its planner is gone only bills (and holds a reservation).
 */
function checkDeadlines(
  settings: { readonly [K in "planner" | "segmentSearch" | "merge"]: Sizing },
  queryTimeoutMs: number,
): void {
  const planner = settings.planner.timeout.toSeconds({ integral: false });
  if (planner * 1000 <= queryTimeoutMs) {
    throw new TypeError(
      `planner.timeout (${planner} s) must exceed queryTimeout (${queryTimeoutMs} ms), so the planner can answer TIMEOUT`,
    );
  }
  for (const name of ["segmentSearch", "merge"] as const) {
    const seconds = settings[name].timeout.toSeconds({ integral: false });
    if (seconds >= planner) {
      throw new TypeError(
        `${name}.timeout (${seconds} s) must be below planner.timeout (${planner} s): the planner stops waiting at its timeout, and a ${name === "merge" ? "merge" : "task"} that runs on only bills. Leave it unset (the planner's less 1 s) or lower it`,
      );
    }
  }
}

/** Whole minutes over the longest query deadline: a view must outlive every query using it. */
function graceMinutes(grace: Duration): number {
  const floor = Math.ceil(LIMITS.maxTimeoutMs / 60_000);
  const minutes = grace.toMinutes({ integral: false });
  if (!(Number.isInteger(minutes) && minutes > floor && minutes <= 525_600)) {
    throw new TypeError(
      `Expected gcGrace to be whole minutes over ${floor} (the longest query deadline) and at most a year, got ${minutes}`,
    );
  }
  return minutes;
}

function positiveInt(name: string, value: number, max: number): number {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new TypeError(`Expected ${name} to be an integer 1..${max}, got ${value}`);
  }
  return value;
}
