/**
 * The planner's Lambda client under a query's deadline and at full fan-out, against a stand-in
 * for the Lambda service (AWS itself cannot run here) that holds each invoke and counts them.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { lambdaInvoker } from "../functions/common/lambda-invoker.js";
import type { SegmentTask } from "../shared/tasks.js";

let server: Server;
let endpoint: string;
/** How the stand-in answers: after `delayMs`, with `status` (429: throttled). */
let behaviour = { delayMs: 0, status: 200 };
const seen = { requests: 0, open: 0, maxOpen: 0, aborted: 0 };

beforeAll(async () => {
  server = createServer((req: IncomingMessage, res) => {
    seen.requests++;
    seen.open++;
    seen.maxOpen = Math.max(seen.maxOpen, seen.open);
    // The response closes when it is sent, or when the client lets the request go.
    res.on("close", () => {
      if (!res.writableFinished) seen.aborted++;
      seen.open--;
    });
    req.resume();
    setTimeout(() => {
      if (res.destroyed) return;
      const throttled = behaviour.status === 429;
      res.writeHead(behaviour.status, {
        "content-type": "application/json",
        ...(throttled && { "x-amzn-errortype": "TooManyRequestsException" }),
      });
      res.end(throttled ? '{"Reason":"ReservedFunctionConcurrentInvocationLimitExceeded"}' : "{}");
    }, behaviour.delayMs);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  process.env.AWS_ENDPOINT_URL_LAMBDA = endpoint;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

function invoker(maxTasks: number) {
  return lambdaInvoker({
    segmentSearchFunction: "segment-search",
    mergeFunction: "merge",
    maxTasks,
  });
}

const task = {
  requestId: "r",
  dataset: "s3://b/d.lance",
  kind: "index",
  group: 0,
  queries: { count: 1 },
} as unknown as SegmentTask;

function reset(next: typeof behaviour) {
  behaviour = next;
  Object.assign(seen, { requests: 0, open: 0, maxOpen: 0, aborted: 0 });
}

describe("the planner's Lambda client", () => {
  test("holds one socket per task of the widest query (over the SDK's default 50)", async () => {
    reset({ delayMs: 400, status: 200 });
    const client = invoker(64);
    await Promise.allSettled(Array.from({ length: 64 }, () => client.searchSegments(task)));
    expect(seen.requests).toBe(64);
    expect(seen.maxOpen).toBe(64);
  });

  test("the deadline lets an in-flight invoke go and starts no retry after it", async () => {
    reset({ delayMs: 2_000, status: 200 });
    const deadline = new AbortController();
    setTimeout(() => deadline.abort(), 100);
    const started = performance.now();
    await expect(invoker(4).searchSegments(task, deadline.signal)).rejects.toThrow();
    // Let go before the stand-in's 2 s answer, however busy the machine.
    expect(performance.now() - started).toBeLessThan(1_900);
    // The stand-in sees the closed socket a little later; under load, more than a second.
    await expect.poll(() => seen.aborted, { timeout: 10_000 }).toBe(1);

    reset({ delayMs: 5, status: 429 });
    const throttled = new AbortController();
    setTimeout(() => throttled.abort(), 150);
    await expect(invoker(4).searchSegments(task, throttled.signal)).rejects.toThrow();
    // An attempt sent just before the deadline may still reach the stand-in; none after it.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const attempts = seen.requests;
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(seen.requests).toBe(attempts);
  });
});
