/**
 * The local Lambda service and HTTP API, driven by the real `@aws-sdk/client-lambda` and `fetch`
 * against small fixture handlers (test/fixtures/handlers).
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import {
  InvokeCommand,
  LambdaClient,
  LambdaServiceException,
  ResourceNotFoundException,
  TooManyRequestsException,
} from "@aws-sdk/client-lambda";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundleFunctions } from "../local/bundle.js";
import { type HttpApi, startHttpApi } from "../local/http-api.js";
import { type LocalLambda, startLocalLambda } from "../local/lambda.js";

const HANDLERS = fileURLToPath(new URL("./fixtures/handlers/", import.meta.url));
const handler = (name: string) => join(HANDLERS, `${name}.ts`);
const MB = 1024 * 1024;

function lambdaClient(endpoint: string): LambdaClient {
  return new LambdaClient({
    endpoint,
    region: "us-east-1",
    credentials: { accessKeyId: "x", secretAccessKey: "x" },
    maxAttempts: 1,
  });
}

/** Whether a process with this pid exists (signal 0 only checks). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

async function until(condition: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("condition not met within 10 s");
    await sleep(10);
  }
}

/** Local addresses (hex, as the kernel prints them) with a TCP socket listening on `port`. */
function listeningAddresses(table: string, port: number): string[] {
  if (!existsSync(table)) return [];
  const suffix = `:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  return readFileSync(table, "utf8")
    .split("\n")
    .slice(1)
    .flatMap((line) => {
      const [, local, , state] = line.trim().split(/\s+/);
      return local?.endsWith(suffix) && state === "0A" ? [local.slice(0, -suffix.length)] : [];
    });
}

describe("local Lambda service", () => {
  let lambda: LocalLambda;
  let client: LambdaClient;

  beforeAll(async () => {
    lambda = await startLocalLambda({
      env: { SHARED_VAR: "shared" },
      functions: [
        { name: "echo", module: handler("echo"), env: { FUNCTION_VAR: "function" } },
        { name: "throw", module: handler("throw") },
        { name: "crash", module: handler("crash"), concurrency: 1 },
        { name: "slow", module: handler("slow"), concurrency: 1, timeoutMs: 1000 },
        { name: "counter", module: handler("counter"), concurrency: 1 },
        { name: "large", module: handler("large") },
      ],
    });
    client = lambdaClient(lambda.endpoint);
  });

  afterAll(async () => {
    client?.destroy();
    await lambda?.stop();
  });

  async function invoke(name: string, payload: unknown, qualifier?: string) {
    const out = await client.send(
      new InvokeCommand({
        FunctionName: name,
        Payload: typeof payload === "string" ? payload : JSON.stringify(payload),
        Qualifier: qualifier,
      }),
    );
    const text = Buffer.from(out.Payload ?? new Uint8Array()).toString("utf8");
    return { statusCode: out.StatusCode, functionError: out.FunctionError, body: JSON.parse(text) };
  }

  it("answers the handler's result, with context and a clean environment", async () => {
    const out = await invoke("echo", { hello: "world" });
    expect(out.statusCode).toBe(200);
    expect(out.functionError).toBeUndefined();
    expect(out.body.event).toEqual({ hello: "world" });
    expect(out.body.context.functionName).toBe("echo");
    expect(out.body.context.awsRequestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(out.body.context.remainingMs).toBeGreaterThan(0);
    expect(out.body.context.remainingMs).toBeLessThanOrEqual(30_000);
    expect(out.body.env).toEqual({
      AWS_LAMBDA_FUNCTION_NAME: "echo",
      AWS_EC2_METADATA_DISABLED: "true",
      SHARED_VAR: "shared",
      FUNCTION_VAR: "function",
    });
    // test/support/env.ts sets AWS_ACCESS_KEY_ID here; a worker must not inherit it.
    expect(process.env.AWS_ACCESS_KEY_ID).toBeDefined();
  });

  it("accepts a qualifier", async () => {
    const out = await invoke("echo", { q: 1 }, "$LATEST");
    expect(out.body.event).toEqual({ q: 1 });
  });

  it("reports a thrown error as an Unhandled function error", async () => {
    const out = await invoke("throw", { message: "bad input" });
    expect(out.statusCode).toBe(200);
    expect(out.functionError).toBe("Unhandled");
    expect(out.body).toMatchObject({ errorType: "TypeError", errorMessage: "boom: bad input" });
    expect(Array.isArray(out.body.trace)).toBe(true);
  });

  it("replaces a worker that exits mid-invocation, leaking no process", async () => {
    const first = (await invoke("crash", {})).body.pid as number;
    expect(lambda.workerPids("crash")).toEqual([first]);

    const exited = await invoke("crash", { mode: "exit" });
    expect(exited.functionError).toBe("Unhandled");
    expect(exited.body.errorType).toBe("Runtime.ExitError");
    expect(exited.body.errorMessage).toMatch(/Runtime exited with error: exit status 1$/);
    expect(alive(first)).toBe(false);
    expect(lambda.workerPids("crash")).toEqual([]);

    const second = (await invoke("crash", {})).body.pid as number;
    expect(second).not.toBe(first);

    const killed = await invoke("crash", { mode: "kill" });
    expect(killed.body.errorMessage).toMatch(/signal: SIGKILL$/);
    expect(alive(second)).toBe(false);
    expect((await invoke("crash", {})).functionError).toBeUndefined();
    expect(lambda.stats().crash).toMatchObject({ workers: 1, busy: 0, invocations: 5, crashes: 2 });
  });

  it("kills a worker that runs past the timeout", async () => {
    const warm = (await invoke("slow", {})).body.pid as number;
    const started = Date.now();
    const out = await invoke("slow", { ms: 10_000 });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(out.functionError).toBe("Unhandled");
    expect(out.body.errorType).toBe("Sandbox.Timedout");
    expect(out.body.errorMessage).toMatch(/Task timed out after 1\.00 seconds$/);
    expect(alive(warm)).toBe(false);
    expect((await invoke("slow", {})).body.pid).not.toBe(warm);
  });

  it("throttles with 429 when all workers are busy", async () => {
    const first = invoke("slow", { ms: 800 });
    await until(() => lambda.stats().slow?.busy === 1);
    const second = invoke("slow", {});
    await expect(second).rejects.toBeInstanceOf(TooManyRequestsException);
    await expect(second).rejects.toMatchObject({ $metadata: { httpStatusCode: 429 } });
    expect((await first).functionError).toBeUndefined();
  });

  it("keeps module state in a warm worker", async () => {
    const counts = [];
    const pids = new Set();
    for (let i = 0; i < 3; i++) {
      const { body } = await invoke("counter", {});
      counts.push(body.count);
      pids.add(body.pid);
    }
    expect(counts).toEqual([1, 2, 3]);
    expect(pids.size).toBe(1);
  });

  it("rejects a payload over 6 MB with 413", async () => {
    const out = invoke("echo", JSON.stringify("x".repeat(7 * MB)));
    // Lambda's error name, which the SDK's model lacks: a generic service exception.
    await expect(out).rejects.toBeInstanceOf(LambdaServiceException);
    await expect(out).rejects.toMatchObject({
      name: "RequestEntityTooLargeException",
      $metadata: { httpStatusCode: 413 },
    });
  });

  it("turns a response over 6 MB into a function error", async () => {
    const out = await invoke("large", { bytes: 6.5 * MB });
    expect(out.functionError).toBe("Unhandled");
    expect(out.body.errorType).toBe("Function.ResponseSizeTooLarge");
  });

  it("answers 404 for an unknown function and 400 for a payload that is not JSON", async () => {
    await expect(invoke("missing", {})).rejects.toBeInstanceOf(ResourceNotFoundException);
    await expect(invoke("echo", "{not json")).rejects.toMatchObject({
      name: "InvalidRequestContentException",
    });
  });

  it("listens on 127.0.0.1 only", () => {
    expect(new URL(lambda.endpoint).hostname).toBe("127.0.0.1");
    if (!existsSync("/proc/net/tcp")) return; // the socket table is Linux-only
    expect(listeningAddresses("/proc/net/tcp", lambda.port)).toEqual(["0100007F"]);
    expect(listeningAddresses("/proc/net/tcp6", lambda.port)).toEqual([]);
  });

  it("kills every worker on stop", async () => {
    const service = await startLocalLambda({
      functions: [{ name: "slow", module: handler("slow"), concurrency: 2 }],
    });
    const own = lambdaClient(service.endpoint);
    try {
      const send = () =>
        own.send(new InvokeCommand({ FunctionName: "slow", Payload: '{"ms":300}' }));
      await Promise.all([send(), send()]);
      const pids = service.workerPids("slow");
      expect(pids).toHaveLength(2);
      await service.stop();
      expect(pids.filter(alive)).toEqual([]);
      expect(service.workerPids("slow")).toEqual([]);
    } finally {
      own.destroy();
      await service.stop();
    }
  });

  it("runs a function's workers with its command: another program and its arguments", async () => {
    // `env` stands for another Node (an arm64 one under qemu): it starts this Node with a
    // variable the service does not set, and the arguments after it reach that Node.
    const { worker } = await bundleFunctions();
    const service = await startLocalLambda({
      workerEntry: worker,
      functions: [
        {
          name: "via",
          module: join(HANDLERS, "via.mjs"),
          command: ["env", "FANOUT_VIA=env", process.execPath, "--no-warnings"],
        },
        { name: "plain", module: join(HANDLERS, "via.mjs") },
      ],
    });
    const own = lambdaClient(service.endpoint);
    try {
      const invoke = async (name: string) => {
        const out = await own.send(new InvokeCommand({ FunctionName: name }));
        return JSON.parse(Buffer.from(out.Payload ?? new Uint8Array()).toString("utf8"));
      };
      expect(await invoke("via")).toEqual({ via: "env", execArgv: ["--no-warnings"] });
      expect(await invoke("plain")).toEqual({ via: null, execArgv: [] });
    } finally {
      own.destroy();
      await service.stop();
    }
  });

  it("refuses an empty command, and a command with a TypeScript worker entry or module", async () => {
    const { worker } = await bundleFunctions();
    const start = (workerEntry: string, module: string, command: string[]) =>
      startLocalLambda({ workerEntry, functions: [{ name: "f", module, command }] });
    const js = join(HANDLERS, "via.mjs");
    await expect(start(worker, js, [])).rejects.toThrow(/command must name a program/);
    await expect(start(worker, handler("echo"), ["node"])).rejects.toThrow(/JavaScript only/);
    await expect(
      start(fileURLToPath(new URL("../local/worker.ts", import.meta.url)), js, ["node"]),
    ).rejects.toThrow(/JavaScript only/);
  });
});

interface ErrorJson {
  error: { code: string; message: string };
}

/** The planner fixture's echo of the event. */
interface EchoedEvent {
  requestId: string;
  headers: Record<string, string>;
}

async function json<T>(res: Response): Promise<T> {
  return (await res.json()) as T;
}

describe("HTTP API", () => {
  let lambda: LocalLambda;
  let api: HttpApi;
  let failing: HttpApi;

  beforeAll(async () => {
    lambda = await startLocalLambda({
      functions: [
        { name: "planner", module: handler("planner") },
        { name: "throw", module: handler("throw") },
      ],
    });
    api = await startHttpApi({ plannerFunction: "planner", lambdaEndpoint: lambda.endpoint });
    failing = await startHttpApi({ plannerFunction: "throw", lambdaEndpoint: lambda.endpoint });
  });

  afterAll(async () => {
    await api?.stop();
    await failing?.stop();
    await lambda?.stop();
  });

  it("listens on 127.0.0.1 only", () => {
    expect(new URL(api.url).hostname).toBe("127.0.0.1");
    if (!existsSync("/proc/net/tcp")) return; // the socket table is Linux-only
    expect(listeningAddresses("/proc/net/tcp", api.port)).toEqual(["0100007F"]);
    expect(listeningAddresses("/proc/net/tcp6", api.port)).toEqual([]);
  });

  it("answers GET /health", async () => {
    const res = await fetch(`${api.url}/health`);
    expect(res.status).toBe(200);
    expect(await json(res)).toEqual({ status: "ok" });
  });

  it("answers GET /health with 503 starting and the reason until it is ready", async () => {
    const starting = await startHttpApi({
      plannerFunction: "planner",
      lambdaEndpoint: lambda.endpoint,
      starting: "starting the local stack",
    });
    try {
      const health = async () => {
        const res = await fetch(`${starting.url}/health`);
        return { status: res.status, body: await json(res) };
      };
      expect(await health()).toEqual({
        status: 503,
        body: { status: "starting", reason: "starting the local stack" },
      });
      starting.starting("building the demo dataset");
      expect(await health()).toEqual({
        status: 503,
        body: { status: "starting", reason: "building the demo dataset" },
      });
      starting.ready();
      expect(await health()).toEqual({ status: 200, body: { status: "ok" } });
    } finally {
      await starting.stop();
    }
  });

  it("invokes the planner with a payload-2.0 event and answers its response as is", async () => {
    const body = JSON.stringify({ query: [1, 2] });
    const res = await fetch(`${api.url}/search?debug=1`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Custom": "Yes" },
      body,
    });
    expect(res.status).toBe(201);
    expect(res.headers.get("x-fixture")).toBe("planner");
    const event = await json<EchoedEvent>(res);
    expect(event).toMatchObject({
      version: "2.0",
      routeKey: "POST /search",
      rawPath: "/search",
      rawQueryString: "debug=1",
      http: { method: "POST", path: "/search", protocol: "HTTP/1.1", sourceIp: "127.0.0.1" },
      stage: "$default",
      body,
      isBase64Encoded: false,
    });
    expect(event.headers).toMatchObject({ "content-type": "application/json", "x-custom": "Yes" });
    expect(res.headers.get("apigw-requestid")).toBe(event.requestId);
  });

  it("rejects a body over 6 MB with 413 without invoking the planner", async () => {
    const before = lambda.stats().planner?.invocations;
    const res = await fetch(`${api.url}/search`, { method: "POST", body: "x".repeat(7 * MB) });
    expect(res.status).toBe(413);
    expect((await json<ErrorJson>(res)).error.code).toBe("PAYLOAD_TOO_LARGE");
    expect(lambda.stats().planner?.invocations).toBe(before);
  });

  it("answers 502 when the planner fails and 404 for other routes", async () => {
    const failed = await fetch(`${failing.url}/search`, { method: "POST", body: "{}" });
    expect(failed.status).toBe(502);
    expect((await json<ErrorJson>(failed)).error.code).toBe("INTERNAL");

    const missing = await fetch(`${api.url}/search`);
    expect(missing.status).toBe(404);
    expect((await json<ErrorJson>(missing)).error.code).toBe("NOT_FOUND");
  });
});
