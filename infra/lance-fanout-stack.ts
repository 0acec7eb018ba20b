/**
 * This repository's CDK app stack: the lance-fanout construct and the outputs a deployer reads
 * (docs/deploy.md).
 * @module
 */
import { CfnOutput, Stack, type StackProps } from "aws-cdk-lib";
import type { Construct } from "constructs";
import { LanceFanout, type LanceFanoutProps } from "./lance-fanout.js";

export interface LanceFanoutStackProps extends StackProps, Omit<LanceFanoutProps, "datasets"> {
  /** See {@link LanceFanoutProps.datasets}; refused when empty. @default none */
  readonly datasets?: readonly string[];
}

export class LanceFanoutStack extends Stack {
  readonly fanout: LanceFanout;

  /** @throws TypeError for invalid props (each message names the prop), or no datasets. */
  constructor(scope: Construct, id: string, props: LanceFanoutStackProps = {}) {
    super(scope, id, props);
    const fanout = new LanceFanout(this, "Fanout", { ...props, datasets: props.datasets ?? [] });
    this.fanout = fanout;
    new CfnOutput(this, "ApiUrl", {
      description: "Base URL of the HTTP API",
      value: fanout.api.stage.url,
    });
    new CfnOutput(this, "SearchUrl", {
      description: "POST a search request here",
      value: fanout.api.searchUrl,
    });
    new CfnOutput(this, "SearchRouteArn", {
      description: "Resource for execute-api:Invoke in the callers' IAM policies",
      value: fanout.api.route.routeArn,
    });
    new CfnOutput(this, "PlannerFunctionName", { value: fanout.functions.planner.functionName });
    new CfnOutput(this, "SegmentSearchFunctionName", {
      value: fanout.functions.segmentSearch.functionName,
    });
    new CfnOutput(this, "MergeFunctionName", { value: fanout.functions.merge.functionName });
    new CfnOutput(this, "GcFunctionName", { value: fanout.functions.gc.functionName });
    if (fanout.upkeep.deadLetters) {
      new CfnOutput(this, "UpkeepDeadLetterQueueUrl", {
        description: "Prepare and gc events EventBridge could not deliver",
        value: fanout.upkeep.deadLetters.queueUrl,
      });
    }
    new CfnOutput(this, "MetricsNamespace", { value: fanout.metrics.namespace });
  }
}
