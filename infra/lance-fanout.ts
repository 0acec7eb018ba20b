/**
 * The lance-fanout construct: the four functions, their S3 and invoke permissions, the search
 * API, the rules that prepare and collect views, and the metrics, for an app of your own
 * (`LanceFanoutStack` is this repository's). It composes the constructs and holds no logic of
 * its own beyond validation.
 * @module
 */
import { Annotations, Duration } from "aws-cdk-lib";
import { Construct } from "constructs";
import { DatasetAccess, parseDatasetPrefix } from "./dataset-access.js";
import { FanoutFunctions, type FanoutFunctionsProps } from "./fanout-functions.js";
import { FanoutMetrics } from "./fanout-metrics.js";
import {
  resolveThrottle,
  SearchApi,
  type SearchApiAuth,
  type SearchApiThrottle,
} from "./search-api.js";
import { ViewUpkeep, type ViewUpkeepProps } from "./view-upkeep.js";

/** HTTP API integrations time out after 29 s. */
const API_INTEGRATION_TIMEOUT = Duration.seconds(29);

export interface LanceFanoutProps
  extends Omit<FanoutFunctionsProps, "access" | "projectRoot" | "concurrentQueries">,
    Omit<ViewUpkeepProps, "access" | "planner" | "gc"> {
  /**
   * Dataset prefixes that may be searched, `s3://bucket/prefix/`, read only: the buckets are
   * imported by name, never created or written outside the view prefix. At least one: without
   * any the functions could read nothing.
   */
  readonly datasets: readonly string[];
  /**
   * Key prefix, in each dataset bucket, where segment-search writes segment views (the only
   * writable place) and gc deletes them (the only place anything is deleted). Views are named by
   * content and reused (docs/deploy.md).
   * @default "lance-fanout-views"
   */
  readonly viewPrefix?: string;
  /** @default { type: "iam" } (SigV4) */
  readonly auth?: SearchApiAuth;
  /**
   * The API's rate and burst; the burst is the number of queries the functions' reserved
   * concurrency, when reserved, is sized for (infra/concurrency.ts).
   * @default { rateLimit: 20, burstLimit: 40 }
   */
  readonly throttle?: SearchApiThrottle;
  /** KMS keys of SSE-KMS dataset buckets. @default none */
  readonly kmsKeyArns?: readonly string[];
  /** CloudWatch namespace of the metrics. @default `LanceFanout/<stack name>` */
  readonly metricsNamespace?: string;
}

export class LanceFanout extends Construct {
  readonly functions: FanoutFunctions;
  readonly api: SearchApi;
  readonly metrics: FanoutMetrics;
  readonly access: DatasetAccess;
  readonly upkeep: ViewUpkeep;

  /** @throws TypeError for invalid props (each message names the prop), or no datasets. */
  constructor(scope: Construct, id: string, props: LanceFanoutProps) {
    super(scope, id);
    const datasets = props.datasets.map((value) => parseDatasetPrefix(value));
    if (datasets.length === 0) {
      throw new TypeError(
        'No dataset prefixes: the functions could read nothing. Give them with -c datasets=s3://bucket/prefix/ (comma-separated), e.g. -c datasets=s3://my-vectors/datasets/ (this repository\'s app), or the datasets prop of LanceFanout, e.g. datasets: ["s3://my-vectors/datasets/"]',
      );
    }
    const throttle = resolveThrottle(props.throttle);
    this.access = new DatasetAccess(this, {
      datasets,
      viewPrefix: props.viewPrefix,
      kmsKeyArns: props.kmsKeyArns,
    });
    const queryTimeout = props.queryTimeout ?? Duration.seconds(25);
    if (queryTimeout.toMilliseconds() >= API_INTEGRATION_TIMEOUT.toMilliseconds()) {
      Annotations.of(this).addWarningV2(
        "lance-fanout:queryTimeout",
        `queryTimeout (${queryTimeout.toSeconds()} s) is not below the HTTP API's 29 s integration timeout: long queries only answer to direct invokes`,
      );
    }
    const plannerTimeout = props.planner?.timeout;
    if (
      plannerTimeout &&
      plannerTimeout.toMilliseconds() > API_INTEGRATION_TIMEOUT.toMilliseconds()
    ) {
      Annotations.of(this).addWarningV2(
        "lance-fanout:plannerTimeout",
        `planner.timeout (${plannerTimeout.toSeconds()} s) is above the HTTP API's 29 s integration timeout: an HTTP request ends there while its planner may run on (and bill); only direct invokes get longer answers`,
      );
    }
    this.functions = new FanoutFunctions(this, "Functions", {
      access: this.access,
      architecture: props.architecture,
      runtime: props.runtime,
      planner: props.planner,
      segmentSearch: props.segmentSearch,
      segmentSearchSlots: props.segmentSearchSlots,
      merge: props.merge,
      maxTasks: props.maxTasks,
      concurrentQueries: throttle.burstLimit,
      reserveConcurrency: props.reserveConcurrency,
      accountConcurrency: props.accountConcurrency,
      queryTimeout,
      viewCacheSize: props.viewCacheSize,
      coverage: props.coverage,
      prepareEnvironments: props.prepareEnvironments,
      gc: props.gc,
      gcKeepVersions: props.gcKeepVersions,
      gcGrace: props.gcGrace,
      logRetention: props.logRetention,
      logRemovalPolicy: props.logRemovalPolicy,
    });
    this.api = new SearchApi(this, "SearchApi", {
      handler: this.functions.planner,
      auth: props.auth,
      throttle,
      accessLogRetention: props.logRetention,
      logRemovalPolicy: props.logRemovalPolicy,
    });
    this.upkeep = new ViewUpkeep(this, "ViewUpkeep", {
      access: this.access,
      planner: this.functions.planner,
      gc: this.functions.gc,
      prepareOnCommit: props.prepareOnCommit,
      prepareSchedule: props.prepareSchedule,
      prepareDatasets: props.prepareDatasets,
      gcSchedule: props.gcSchedule,
    });
    this.metrics = new FanoutMetrics(this, "Metrics", {
      logGroups: this.functions.logGroups,
      namespace: props.metricsNamespace,
    });
  }
}
