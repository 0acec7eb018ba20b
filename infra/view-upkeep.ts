/**
 * The EventBridge rules that keep views in step with the datasets: prepare on commit (a rule per
 * dataset bucket on S3 "Object Created" events of manifests under the allowed prefixes), prepare
 * on a schedule (the latest version of chosen datasets), and gc on a schedule. Events no target
 * could take go to a dead-letter queue.
 * @module
 */
import { Duration, Validations } from "aws-cdk-lib";
import { Rule, Schedule } from "aws-cdk-lib/aws-events";
import { LambdaFunction } from "aws-cdk-lib/aws-events-targets";
import type { Function as LambdaFn } from "aws-cdk-lib/aws-lambda";
import { Queue, QueueEncryption } from "aws-cdk-lib/aws-sqs";
import { Construct } from "constructs";
import type { DatasetAccess } from "./dataset-access.js";

export interface ViewUpkeepProps {
  readonly access: DatasetAccess;
  /** Takes prepare events (`functions/common/events.ts`). */
  readonly planner: LambdaFn;
  /** Takes scheduled events. */
  readonly gc: LambdaFn;
  /**
   * Prepare the latest version of a dataset when a commit writes a manifest under its
   * `_versions/`: one rule per dataset bucket. The buckets must send events to EventBridge
   * (docs/deploy.md). @default false
   */
  readonly prepareOnCommit?: boolean;
  /** When to prepare the latest version of each of `prepareDatasets`. @default never */
  readonly prepareSchedule?: Schedule;
  /** Dataset URIs under the allowed prefixes; required with `prepareSchedule`. */
  readonly prepareDatasets?: readonly string[];
  /** When gc runs over every dataset bucket; `false` never. @default every hour */
  readonly gcSchedule?: Schedule | false;
}

/**
 * An event older than this is dropped: a later commit, schedule or query prepares the latest
 * version anyway.
 */
const MAX_EVENT_AGE = Duration.hours(1);

export class ViewUpkeep extends Construct {
  /** Prepare-on-commit rule of each dataset bucket, by bucket. */
  readonly commitRules: ReadonlyMap<string, Rule>;
  readonly prepareRule: Rule | undefined;
  readonly gcRule: Rule | undefined;
  /** Events EventBridge could not deliver; there when a rule is. */
  readonly deadLetters: Queue | undefined;

  /** @throws TypeError for prepare datasets outside the allowed prefixes, or without a schedule. */
  constructor(scope: Construct, id: string, props: ViewUpkeepProps) {
    super(scope, id);
    const prepareDatasets = checkPrepareDatasets(props);
    const gcSchedule = props.gcSchedule ?? Schedule.rate(Duration.hours(1));
    const buckets = props.prepareOnCommit ? props.access.buckets : [];
    const anyRule = buckets.length > 0 || props.prepareSchedule || gcSchedule;
    this.deadLetters = anyRule
      ? new Queue(this, "DeadLetters", {
          retentionPeriod: Duration.days(14),
          encryption: QueueEncryption.SQS_MANAGED,
          enforceSSL: true,
        })
      : undefined;
    if (this.deadLetters) {
      Validations.of(this.deadLetters).acknowledge({
        id: "AwsSolutions-SQS3",
        reason:
          "This queue is itself the dead-letter queue of the rules' Lambda targets (EventBridge DeadLetterConfig), which cdk-nag does not recognise as one; a redrive from it would move events away after an operator read them a few times",
      });
    }
    const target = (fn: LambdaFn) =>
      new LambdaFunction(fn, {
        retryAttempts: 4,
        maxEventAge: MAX_EVENT_AGE,
        deadLetterQueue: this.deadLetters,
      });

    const commitRules = new Map<string, Rule>();
    for (const bucket of buckets) {
      const prefixes = props.access.datasets.filter((d) => d.bucket === bucket);
      const rule = new Rule(this, `PrepareOnCommit-${bucket}`, {
        description: `lance-fanout: prepare a dataset under ${prefixes.map((d) => d.uri).join(", ")} on commit`,
        eventPattern: {
          source: ["aws.s3"],
          detailType: ["Object Created"],
          detail: {
            bucket: { name: [bucket] },
            // Manifests of datasets under the prefixes only: views (under the view prefix, which
            // overlaps no dataset prefix) never trigger a prepare.
            object: {
              key: prefixes.map((d) => ({
                wildcard: `${escapeWildcard(d.prefix)}*.lance/_versions/*.manifest`,
              })),
            },
          },
        },
        targets: [target(props.planner)],
      });
      commitRules.set(bucket, rule);
    }
    this.commitRules = commitRules;

    if (props.prepareSchedule) {
      props.planner.addEnvironment("LANCE_FANOUT_PREPARE_DATASETS", prepareDatasets.join(","));
      this.prepareRule = new Rule(this, "PrepareSchedule", {
        description: "lance-fanout: prepare the latest version of chosen datasets",
        schedule: props.prepareSchedule,
        targets: [target(props.planner)],
      });
    }
    if (gcSchedule) {
      this.gcRule = new Rule(this, "GcSchedule", {
        description: "lance-fanout: remove views no query can still use",
        schedule: gcSchedule,
        targets: [target(props.gc)],
      });
    }
  }
}

function checkPrepareDatasets(props: ViewUpkeepProps): string[] {
  const datasets = (props.prepareDatasets ?? []).map((d) => d.trim()).filter(Boolean);
  if (props.prepareSchedule && datasets.length === 0) {
    throw new TypeError("prepareSchedule needs prepareDatasets: the datasets to prepare");
  }
  if (!props.prepareSchedule && datasets.length > 0) {
    throw new TypeError("prepareDatasets needs prepareSchedule: when to prepare them");
  }
  for (const dataset of datasets) {
    const allowed = props.access.datasets.some(
      (d) => dataset.startsWith(d.uri) && dataset.length > d.uri.length,
    );
    if (!allowed || /[,\s*?]/.test(dataset)) {
      throw new TypeError(
        `Expected each of prepareDatasets to be a dataset under ${
          props.access.allowList || "the allowed datasets (none configured)"
        }, got "${dataset}"`,
      );
    }
  }
  return datasets;
}

/** EventBridge wildcard patterns read `*` and `\` specially; prefixes hold no `*`. */
function escapeWildcard(text: string): string {
  return text.replaceAll("\\", "\\\\");
}

const RATE = /^rate\((\d+) (minute|hour|day)s?\)$/;
const CRON = /^cron\(\S+( \S+){5}\)$/;

/**
 * An EventBridge schedule expression, `rate(5 minutes)` or `cron(0 3 * * ? *)`.
 * @throws TypeError naming `name` for anything else (EventBridge would reject it at deploy).
 */
export function parseSchedule(name: string, expression: string): Schedule {
  const text = expression.trim();
  const rate = RATE.exec(text);
  if (rate) {
    const count = Number(rate[1]);
    // EventBridge wants "rate(1 hour)" and "rate(2 hours)".
    if (count >= 1 && text.endsWith("s)") === (count !== 1)) return Schedule.expression(text);
  } else if (CRON.test(text)) {
    return Schedule.expression(text);
  }
  throw new TypeError(
    `Expected ${name} to be a schedule expression such as "rate(5 minutes)", "rate(1 hour)" or "cron(0 3 * * ? *)", got "${expression}"`,
  );
}
