/**
 * A local stack on free ports, its environment exported to this process, the fixture dataset
 * (three index segments) on its S3 and a Lambda client for it: what the stack suites start with.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LambdaClient } from "@aws-sdk/client-lambda";
import { type Stack, type StackOptions, startStack } from "../../local/stack.js";
import { type Dataset, makeDataset } from "./fixtures.js";

export interface StackWithDataset {
  readonly stack: Stack;
  readonly ds: Dataset;
  readonly lambda: LambdaClient;
  stop(): Promise<void>;
}

export async function stackWithDataset(
  name: string,
  options: StackOptions = {},
): Promise<StackWithDataset> {
  const stack = await startStack({
    dataDir: await mkdtemp(join(tmpdir(), `fanout-${name}-`)),
    apiPort: 0,
    s3Port: 0,
    lambdaPort: 0,
    // What an earlier stack exported to this process is not the user's setting.
    userEnv: {},
    ...options,
  });
  Object.assign(process.env, stack.env);
  const ds = await makeDataset({
    db: { uri: `s3://${stack.bucket}/db`, storageOptions: stack.s3.storageOptions() },
    rounds: [4000, 1500, 6000],
  });
  const lambda = new LambdaClient({ endpoint: stack.lambda.endpoint, maxAttempts: 1 });
  return {
    stack,
    ds,
    lambda,
    async stop() {
      lambda.destroy();
      await stack.stop();
    },
  };
}
