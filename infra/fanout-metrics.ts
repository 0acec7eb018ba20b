/**
 * CloudWatch metrics from the functions' structured logs: each handler writes one JSON line per
 * invocation (`functions/common/log.ts`) with the request id, and metric filters turn its fields
 * into metrics, so the code needs no metrics client and no extra latency.
 * @module
 */
import { Stack } from "aws-cdk-lib";
import { type Metric, Unit } from "aws-cdk-lib/aws-cloudwatch";
import { FilterPattern, type ILogGroup, MetricFilter } from "aws-cdk-lib/aws-logs";
import { Construct } from "constructs";

export interface FanoutMetricsProps {
  readonly logGroups: {
    readonly planner: ILogGroup;
    readonly segmentSearch: ILogGroup;
    readonly merge: ILogGroup;
    readonly gc: ILogGroup;
  };
  /** @default `LanceFanout/<stack name>` */
  readonly namespace?: string;
}

/** One field of a log line, published as a metric. */
interface Field {
  readonly metricName: string;
  readonly fn: "planner" | "segment-search" | "merge";
  readonly field: string;
  readonly unit: Unit;
}

const FIELDS = {
  /** Tasks per query (planner `tasks`). */
  fanoutWidth: { metricName: "FanoutWidth", fn: "planner", field: "tasks", unit: Unit.COUNT },
  /** Whole query, planner side (planner `ms`). */
  queryLatency: { metricName: "QueryLatency", fn: "planner", field: "ms", unit: Unit.MILLISECONDS },
  /** One task (segment-search `ms`). */
  taskLatency: {
    metricName: "TaskLatency",
    fn: "segment-search",
    field: "ms",
    unit: Unit.MILLISECONDS,
  },
  /** Index segments searched by one task (segment-search `segments`). */
  taskSegments: {
    metricName: "TaskSegments",
    fn: "segment-search",
    field: "segments",
    unit: Unit.COUNT,
  },
  /** Candidates one task returned (segment-search `candidates`, once the handler logs it). */
  candidates: {
    metricName: "Candidates",
    fn: "segment-search",
    field: "candidates",
    unit: Unit.COUNT,
  },
  /**
   * View-cache hits of the execution environment so far (segment-search `viewCacheHits`, a
   * running count per environment: use the Maximum statistic).
   */
  viewCacheHits: {
    metricName: "ViewCacheHits",
    fn: "segment-search",
    field: "viewCacheHits",
    unit: Unit.COUNT,
  },
  /** Merge step (merge `ms`). */
  mergeLatency: { metricName: "MergeLatency", fn: "merge", field: "ms", unit: Unit.MILLISECONDS },
  /** Result rows of a query (merge `rows`). */
  resultRows: { metricName: "ResultRows", fn: "merge", field: "rows", unit: Unit.COUNT },
} as const satisfies Record<string, Field>;

export type FanoutMetricName = keyof typeof FIELDS;

/** Metric filters on the functions' log groups. */
export class FanoutMetrics extends Construct {
  readonly namespace: string;
  /** Each metric, for alarms and dashboards. */
  readonly metrics: Readonly<Record<FanoutMetricName, Metric>>;
  /** Failed invocations by `Function` and error `Code` dimensions. */
  readonly errors: readonly MetricFilter[];

  constructor(scope: Construct, id: string, props: FanoutMetricsProps) {
    super(scope, id);
    this.namespace = props.namespace ?? `LanceFanout/${Stack.of(this).stackName}`;
    const logGroupOf = {
      planner: props.logGroups.planner,
      "segment-search": props.logGroups.segmentSearch,
      merge: props.logGroups.merge,
      gc: props.logGroups.gc,
    } as const;
    const metrics = {} as Record<FanoutMetricName, Metric>;
    for (const [key, spec] of Object.entries(FIELDS) as [FanoutMetricName, Field][]) {
      const filter = new MetricFilter(this, spec.metricName, {
        logGroup: logGroupOf[spec.fn],
        metricNamespace: this.namespace,
        metricName: spec.metricName,
        filterPattern: FilterPattern.all(
          FilterPattern.stringValue("$.fn", "=", spec.fn),
          // A numeric comparison matches numbers only (the fields are counts and durations).
          FilterPattern.numberValue(`$.${spec.field}`, ">=", 0),
        ),
        metricValue: `$.${spec.field}`,
        unit: spec.unit,
      });
      metrics[key] = filter.metric();
    }
    this.metrics = metrics;
    this.errors = Object.entries(logGroupOf).map(
      ([fn, logGroup]) =>
        new MetricFilter(this, `Errors-${fn}`, {
          logGroup,
          metricNamespace: this.namespace,
          metricName: "Errors",
          filterPattern: FilterPattern.exists("$.error"),
          metricValue: "1",
          dimensions: { Function: "$.fn", Code: "$.error" },
          unit: Unit.COUNT,
        }),
    );
  }
}
