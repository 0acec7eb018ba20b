/**
 * The CDK app (`cdk.json` runs it with tsx): one lance-fanout stack configured from context.
 * `npx cdk synth` needs no AWS credentials and no network (docs/deploy.md).
 * @module
 */
import { App } from "aws-cdk-lib";
import { settingsFromContext } from "./context.js";
import { LanceFanoutStack } from "./lance-fanout-stack.js";

const app = new App();
const { stackName, props } = settingsFromContext(app.node.getAllContext());
new LanceFanoutStack(app, stackName, props);
