/**
 * The local Lambda service and HTTP API, driven by the real `@aws-sdk/client-lambda` and `fetch`
 * against small fixture handlers (test/fixtures/handlers).
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import {
  InvalidParameterValueException,
  InvokeCommand,
  type InvokeCommandInput,
  LambdaClient,
  LambdaServiceException,
  ResourceNotFoundException,
  TooManyRequestsException,
} from "@aws-sdk/client-lambda";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
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

/** The process state letter of /proc/<pid>/stat: `T` is stopped by a signal (frozen). */
function processState(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.charAt(stat.lastIndexOf(")") + 2);
}

/** /proc exists (Linux): what memory limits and freezing are observed through. */
const PROC = existsSync("/proc/self/status");

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
        {
          name: "echo",
          module: handler("echo"),
          env: { FUNCTION_VAR: "function" },
          memorySize: 256,
        },
        { name: "throw", module: handler("throw") },
        { name: "crash", module: handler("crash"), concurrency: 1 },
        { name: "slow", module: handler("slow"), concurrency: 1, timeoutMs: 1000 },
        { name: "queue", module: handler("slow"), concurrency: 1, timeoutMs: 1000, maxQueued: 3 },
        { name: "counter", module: handler("counter"), concurrency: 1 },
        { name: "large", module: handler("large") },
        { name: "hog", module: handler("memory"), concurrency: 1, memorySize: 160 },
        { name: "ticker", module: handler("ticker"), concurrency: 1 },
        { name: "after", module: handler("after-answer"), concurrency: 1 },
        { name: "log", module: handler("log"), memorySize: 512 },
      ],
    });
    client = lambdaClient(lambda.endpoint);
  });

  afterAll(async () => {
    client?.destroy();
    await lambda?.stop();
  });

  async function invoke(
    name: string,
    payload: unknown,
    qualifier?: string,
    extra: Partial<InvokeCommandInput> = {},
  ) {
    const out = await client.send(
      new InvokeCommand({
        FunctionName: name,
        Payload: typeof payload === "string" ? payload : JSON.stringify(payload),
        Qualifier: qualifier,
        ...extra,
      }),
    );
    const text = Buffer.from(out.Payload ?? new Uint8Array()).toString("utf8");
    return {
      statusCode: out.StatusCode,
      functionError: out.FunctionError,
      body: JSON.parse(text),
      requestId: out.$metadata.requestId,
      logResult: out.LogResult,
    };
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
      AWS_LAMBDA_FUNCTION_MEMORY_SIZE: "256",
    });
    // test/support/env.ts sets AWS_ACCESS_KEY_ID here; a worker must not inherit it.
    expect(process.env.AWS_ACCESS_KEY_ID).toBeDefined();
  });

  it("resolves full and partial ARNs and the $LATEST qualifier; other versions are not found", async () => {
    const names = [
      "arn:aws:lambda:us-east-1:123456789012:function:echo",
      "arn:aws:lambda:us-east-1:123456789012:function:echo:$LATEST",
      "123456789012:function:echo",
      "echo:$LATEST",
    ];
    for (const name of names) expect((await invoke(name, { name })).body.event).toEqual({ name });
    expect((await invoke("echo", { q: 1 }, "$LATEST")).body.event).toEqual({ q: 1 });
    await expect(invoke("echo", {}, "1")).rejects.toBeInstanceOf(ResourceNotFoundException);
    await expect(invoke("echo:prod", {})).rejects.toBeInstanceOf(ResourceNotFoundException);
    await expect(invoke("echo:$LATEST", {}, "1")).rejects.toBeInstanceOf(
      InvalidParameterValueException,
    );
  });

  it("answers errors in Lambda's shapes: status, x-amzn-ErrorType and body", async () => {
    const post = (name: string, body: string, headers: Record<string, string> = {}) =>
      fetch(`${lambda.endpoint}/2015-03-31/functions/${encodeURIComponent(name)}/invocations`, {
        method: "POST",
        body,
        headers,
      });
    const expectError = async (res: Response, status: number, type: string, body: object) => {
      expect(res.status).toBe(status);
      expect(res.headers.get("x-amzn-errortype")).toBe(type);
      expect(res.headers.get("x-amzn-requestid")).toMatch(/^[0-9a-f-]{36}$/);
      expect(await res.json()).toEqual(body);
    };
    await expectError(await post("missing", "{}"), 404, "ResourceNotFoundException", {
      Type: "User",
      Message: "Function not found: arn:aws:lambda:us-east-1:000000000000:function:missing",
    });
    await expectError(await post("echo", "{not json"), 400, "InvalidRequestContentException", {
      Type: "User",
      message: expect.stringMatching(/^Could not parse request body into json: /),
    });
    await expectError(await post("no such name!", "{}"), 400, "ValidationException", {
      message: expect.stringMatching(
        /^1 validation error detected: Value 'no such name!' at 'functionName'/,
      ),
    });
    const badType = await post("echo", "{}", { "X-Amz-Invocation-Type": "Sometimes" });
    await expectError(badType, 400, "ValidationException", {
      message: expect.stringMatching(/at 'invocationType' failed to satisfy constraint/),
    });
  });

  it("runs an Event invocation asynchronously: 202 at once, the result discarded", async () => {
    const out = await client.send(
      new InvokeCommand({ FunctionName: "queue", InvocationType: "Event", Payload: '{"ms":800}' }),
    );
    expect(out.StatusCode).toBe(202);
    expect(out.Payload?.length ?? 0).toBe(0);
    expect(out.$metadata.requestId).toMatch(/^[0-9a-f-]{36}$/);
    // Answered while the function still runs.
    expect(lambda.stats().queue?.busy).toBe(1);
    await until(() => lambda.stats().queue?.busy === 0);
    // Lambda takes 1 MB for an asynchronous invocation (6 MB for a synchronous one).
    const large = JSON.stringify({ pad: "x".repeat(1.5 * MB) });
    await expect(
      client.send(
        new InvokeCommand({ FunctionName: "echo", InvocationType: "Event", Payload: large }),
      ),
    ).rejects.toMatchObject({
      name: "RequestEntityTooLargeException",
      $metadata: { httpStatusCode: 413 },
    });
  });

  it("logs the error of a failed Event invocation", async () => {
    const written: string[] = [];
    const spy = vi.spyOn(process.stderr, "write").mockImplementation((chunk) => {
      written.push(String(chunk));
      return true;
    });
    try {
      const out = await client.send(
        new InvokeCommand({
          FunctionName: "throw",
          InvocationType: "Event",
          Payload: '{"message":"async"}',
        }),
      );
      expect(out.StatusCode).toBe(202);
      const requestId = out.$metadata.requestId ?? "";
      await until(() => written.some((line) => line.includes(requestId)));
      const line = written.find((l) => l.includes(requestId)) ?? "";
      expect(JSON.parse(line)).toMatchObject({
        functionName: "throw",
        requestId,
        errorType: "TypeError",
        errorMessage: "boom: async",
      });
    } finally {
      spy.mockRestore();
    }
  });

  it("answers DryRun with 204 without running the function, and 404 for an unknown one", async () => {
    const before = lambda.stats().echo?.invocations;
    const dryRun = (name: string) =>
      client.send(new InvokeCommand({ FunctionName: name, InvocationType: "DryRun" }));
    expect((await dryRun("echo")).StatusCode).toBe(204);
    expect(lambda.stats().echo?.invocations).toBe(before);
    await expect(dryRun("missing")).rejects.toBeInstanceOf(ResourceNotFoundException);
  });

  it("answers the last 4 KB of the invocation's log with LogType Tail", async () => {
    const short = await invoke("log", { lines: 2 }, undefined, { LogType: "Tail" });
    const log = Buffer.from(short.logResult ?? "", "base64").toString("utf8");
    const id = short.requestId;
    expect(log.startsWith(`START RequestId: ${id} Version: $LATEST\n`)).toBe(true);
    for (const line of ["stdout line 0", "stdout line 1", "stderr line", "fd 2 line"]) {
      expect(log).toContain(`${line}\n`);
    }
    expect(log).toContain(`END RequestId: ${id}\n`);
    expect(log).toMatch(
      new RegExp(
        `REPORT RequestId: ${id}\tDuration: [\\d.]+ ms\tBilled Duration: \\d+ ms\tMemory Size: 512 MB\tMax Memory Used: \\d+ MB`,
      ),
    );

    const long = await invoke("log", { lines: 1000 }, undefined, { LogType: "Tail" });
    const tail = Buffer.from(long.logResult ?? "", "base64");
    expect(tail.length).toBe(4096);
    expect(tail.toString()).toContain("stdout line 999\n");
    expect(tail.toString()).not.toContain("stdout line 0\n");
    expect(tail.toString()).toMatch(/REPORT RequestId: [^\n]+\n$/);
    expect((await invoke("log", {})).logResult).toBeUndefined();
  });

  it("runs each function with its memory size and kills a worker over it with Runtime.OutOfMemory", async () => {
    if (!PROC) return; // memory is read from /proc (Linux)
    const warm = (await invoke("hog", { mb: 1 })).body.pid as number;
    const started = Date.now();
    const out = await invoke("hog", { mb: 200, holdMs: 5_000 });
    // Killed while it held the memory, as Lambda does, not once it answered.
    expect(Date.now() - started).toBeLessThan(4_000);
    expect(out.statusCode).toBe(200);
    expect(out.functionError).toBe("Unhandled");
    expect(out.body).toEqual({
      errorType: "Runtime.OutOfMemory",
      errorMessage: `RequestId: ${out.requestId} Error: Runtime exited with error: signal: killed`,
    });
    expect(alive(warm)).toBe(false);
    const next = (await invoke("hog", { mb: 1 })).body.pid as number;
    expect(next).not.toBe(warm);
    // A peak between two looks at the worker's memory is caught too, by its high-water mark.
    expect((await invoke("hog", { mb: 200 })).body.errorType).toBe("Runtime.OutOfMemory");
    expect(alive(next)).toBe(false);
    expect(lambda.stats().hog).toMatchObject({ outOfMemory: 2, crashes: 0 });
  });

  it("freezes an idle worker: background work does not progress until the next invoke", async () => {
    if (!PROC) return; // process states are read from /proc (Linux)
    const first = await invoke("ticker", {});
    const pid = first.body.pid as number;
    await until(() => processState(pid) === "T");
    await sleep(300);
    const second = await invoke("ticker", {});
    expect(second.body.pid).toBe(pid);
    // Running, the 10 ms timer would have ticked ~30 times; a thawed one fires once for all.
    expect(second.body.ticks - first.body.ticks).toBeLessThanOrEqual(3);
    await until(() => processState(pid) === "T");
    expect(lambda.freeze).toBe(true);
  });

  it("answers before an extension's held work ends; the worker's next invoke waits for it", async () => {
    const started = performance.now();
    const first = await invoke("after", { id: "first", ms: 600 });
    const answeredMs = performance.now() - started;
    expect(first.body).toMatchObject({ extension: true, finishedBefore: [] });
    // Answered before the held work, which the worker finished before its next invocation
    // (concurrency 1: the same worker, not frozen meanwhile).
    expect(answeredMs).toBeLessThan(500);
    const second = await invoke("after", { id: "second", ms: 0 });
    expect(performance.now() - started).toBeGreaterThanOrEqual(600);
    expect(second.body).toMatchObject({ pid: first.body.pid, finishedBefore: ["first"] });
    if (PROC) await until(() => processState(first.body.pid as number) === "T");
  });

  it("reports a thrown error as an Unhandled function error", async () => {
    const out = await invoke("throw", { message: "bad input" });
    expect(out.statusCode).toBe(200);
    expect(out.functionError).toBe("Unhandled");
    expect(out.body).toMatchObject({ errorType: "TypeError", errorMessage: "boom: bad input" });
    expect(Array.isArray(out.body.trace)).toBe(true);
  });

  it("replaces a worker that exits mid-invocation, leaking no process, and says so on stderr", async () => {
    const first = (await invoke("crash", {})).body.pid as number;
    expect(lambda.workerPids("crash")).toEqual([first]);

    const stderr = vi.spyOn(process.stderr, "write").mockImplementation(() => true);
    const exited = await invoke("crash", { mode: "exit" });
    const logged = stderr.mock.calls.map(([line]) => String(line));
    stderr.mockRestore();
    expect(logged.map((line) => JSON.parse(line))).toContainEqual(
      expect.objectContaining({
        message: "execution environment lost",
        functionName: "crash",
        requestId: expect.stringMatching(/^[0-9a-f-]{36}$/),
        errorType: "Runtime.ExitError",
      }),
    );
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

  it("queues an invoke over the pool size for the next free worker, first in first out", async () => {
    const first = invoke("queue", { ms: 300 });
    await until(() => lambda.stats().queue?.busy === 1);
    // Lambda would scale out; here the invocations wait their turn instead of a 429.
    const second = invoke("queue", { ms: 50 });
    await until(() => lambda.stats().queue?.queued === 1);
    const third = invoke("queue", { ms: 50 });
    await until(() => lambda.stats().queue?.queued === 2);
    const [a, b, c] = await Promise.all([first, second, third]);
    for (const out of [a, b, c]) expect(out.functionError).toBeUndefined();
    expect(b.body.startedAt).toBeGreaterThanOrEqual(a.body.startedAt + 300);
    expect(c.body.startedAt).toBeGreaterThanOrEqual(b.body.startedAt + 50);
    expect(lambda.stats().queue).toMatchObject({ workers: 1, busy: 0, queued: 0 });
  });

  it("throttles with Lambda's 429 once the queue is full, and after the function's timeout in it", async () => {
    const started = Date.now();
    const running = invoke("queue", { ms: 900 });
    await until(() => lambda.stats().queue?.busy === 1);
    const settle = (name: string, payload: unknown) =>
      invoke(name, payload).then(
        (out) => ({ out, at: Date.now() - started }),
        (err: unknown) => ({ err, at: Date.now() - started }),
      );
    const waiting = [settle("queue", { ms: 900 }), settle("queue", {}), settle("queue", {})];
    await until(() => lambda.stats().queue?.queued === 3);
    // Over maxQueued: the raw answer is Lambda's: status, error type header and body.
    const res = await fetch(`${lambda.endpoint}/2015-03-31/functions/queue/invocations`, {
      method: "POST",
      body: "{}",
    });
    expect(res.status).toBe(429);
    expect(res.headers.get("x-amzn-errortype")).toBe("TooManyRequestsException");
    expect(await res.json()).toEqual({
      Reason: "ReservedFunctionConcurrentInvocationLimitExceeded",
      Type: "User",
      message: "Rate Exceeded.",
    });
    await expect(invoke("queue", {})).rejects.toBeInstanceOf(TooManyRequestsException);
    const [next, late, later] = await Promise.all(waiting);
    expect(next).toMatchObject({ out: { functionError: undefined } });
    // The last two waited out the 1 s timeout while the first two held the worker until ~1.8 s.
    for (const throttled of [late, later]) {
      expect(throttled).toMatchObject({ err: expect.any(TooManyRequestsException) });
      expect(throttled?.at).toBeGreaterThanOrEqual(1000);
      expect(throttled?.at).toBeLessThan(1_750);
    }
    expect((await running).functionError).toBeUndefined();
  });

  it("drops a queued invoke whose client went away", async () => {
    const running = invoke("queue", { ms: 300 });
    await until(() => lambda.stats().queue?.busy === 1);
    const before = lambda.stats().queue?.invocations ?? 0;
    const abort = new AbortController();
    const gone = client.send(new InvokeCommand({ FunctionName: "queue", Payload: "{}" }), {
      abortSignal: abort.signal,
    });
    await until(() => lambda.stats().queue?.queued === 1);
    abort.abort();
    await expect(gone).rejects.toThrow();
    await until(() => lambda.stats().queue?.queued === 0);
    await running;
    await sleep(50);
    // Only the running one was given to a worker.
    expect(lambda.stats().queue?.invocations).toBe(before);
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

  it("leaves idle workers running with freeze off", async () => {
    const service = await startLocalLambda({
      freeze: false,
      functions: [{ name: "ticker", module: handler("ticker") }],
    });
    const own = lambdaClient(service.endpoint);
    try {
      const ticks = async () => {
        const out = await own.send(new InvokeCommand({ FunctionName: "ticker" }));
        return JSON.parse(Buffer.from(out.Payload ?? []).toString("utf8")) as {
          ticks: number;
          pid: number;
        };
      };
      const first = await ticks();
      await sleep(300);
      if (PROC) expect(processState(first.pid)).not.toBe("T");
      expect((await ticks()).ticks - first.ticks).toBeGreaterThanOrEqual(10);
      expect(service.freeze).toBe(false);
    } finally {
      own.destroy();
      await service.stop();
    }
  });

  it("keeps frozen workers out of its process group, and kills them when it is killed", async () => {
    // The shape of `(npm start &)` from a shell that then exits: the job's process group loses
    // its last tie to the session. The kernel hangs up such a group if it holds a stopped
    // process (POSIX), so a frozen worker in the service's group would take the service down.
    const dir = await mkdtemp(join(tmpdir(), "lambda-host-"));
    const out = join(dir, "pids.json");
    const host = `'${process.execPath}' --import tsx '${join(HANDLERS, "../lambda-host.ts")}'`;
    // A session of its own; bash's `set -m` puts the job in a group of its own (also without a
    // terminal); the job starts the host and exits once the host has frozen a worker.
    const job = `(${host} > '${out}' & while [ ! -s '${out}' ]; do sleep 0.1; done) & wait`;
    const shell = spawn("bash", ["-c", `set -m; ${job}`], { detached: true, stdio: "ignore" });
    await once(shell, "exit");
    const { host: hostPid, worker } = JSON.parse(await readFile(out, "utf8")) as {
      host: number;
      worker: number;
    };
    try {
      await sleep(500);
      expect(alive(hostPid)).toBe(true);
      if (PROC) expect(processState(worker)).toBe("T");
      process.kill(hostPid, "SIGKILL");
      await until(() => !alive(worker));
    } finally {
      if (alive(hostPid)) process.kill(hostPid, "SIGKILL");
    }
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

describe("function logs", () => {
  it("go where the service is told, each invocation's log still tailed", async () => {
    const text: string[] = [];
    const output = new Writable({
      write(chunk, _encoding, done) {
        text.push(String(chunk));
        done();
      },
    });
    const service = await startLocalLambda({
      functions: [
        { name: "log", module: handler("log") },
        { name: "after", module: handler("after-answer") },
      ],
      output,
    });
    try {
      const client = new LambdaClient({
        endpoint: service.endpoint,
        region: "us-east-1",
        credentials: { accessKeyId: "x", secretAccessKey: "x" },
      });
      const out = await client.send(
        new InvokeCommand({ FunctionName: "log", Payload: "{}", LogType: "Tail" }),
      );
      const held = await client.send(
        new InvokeCommand({ FunctionName: "after", Payload: '{"id":"held","ms":200}' }),
      );
      client.destroy();
      expect(Buffer.from(out.LogResult ?? "", "base64").toString()).toContain("stdout line 0");
      await vi.waitFor(() => expect(text.join("")).toMatch(/stdout line 0[\s\S]*stderr line/));
      // An invocation with an extension: its post-invocation phase and billed time, after it.
      const post = new RegExp(
        `^POSTINVOKE RequestId: ${held.$metadata.requestId}\tPostRuntimeExtensionsDuration: (\\d+\\.\\d+) ms\tBilled Duration: \\d+ ms$`,
        "m",
      );
      await vi.waitFor(() => expect(text.join("")).toMatch(post));
      expect(Number(post.exec(text.join(""))?.[1])).toBeGreaterThanOrEqual(150);
      expect(text.join("")).not.toMatch(/^POSTINVOKE[^\n]*\n[\s\S]*^POSTINVOKE/m);
    } finally {
      await service.stop();
    }
  });
});

describe("HTTP API deadlines", () => {
  let lambda: LocalLambda;
  let api: HttpApi;

  beforeAll(async () => {
    // One planner: a second request waits for it, and its wait counts against its deadline.
    lambda = await startLocalLambda({
      functions: [{ name: "slow", module: handler("slow"), concurrency: 1 }],
    });
    api = await startHttpApi({
      plannerFunction: "slow",
      lambdaEndpoint: lambda.endpoint,
      integrationTimeoutMs: 2_500,
    });
  });

  afterAll(async () => {
    await api?.stop();
    await lambda?.stop();
  });

  it("cuts a request at the integration timeout from its arrival, waiting for a planner included", async () => {
    const send = (ms: number) =>
      fetch(`${api.url}/search`, { method: "POST", body: JSON.stringify({ ms }) });
    expect((await send(0)).status).toBe(200); // the planner is warm
    const [first, second] = await Promise.all([send(1_500), send(1_500)]);
    expect(first.status).toBe(200);
    // The second waits 1.5 s for the planner and would run 1.5 s more: past 2.5 s it is cut.
    expect(second.status).toBe(504);
    expect((await json<ErrorJson>(second)).error.code).toBe("TIMEOUT");
  });
});

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

  it("answers 500 INTERNAL when the planner fails, as API Gateway does, and 404 for other routes", async () => {
    const failed = await fetch(`${failing.url}/search`, { method: "POST", body: "{}" });
    expect(failed.status).toBe(500);
    expect((await json<ErrorJson>(failed)).error.code).toBe("INTERNAL");

    const missing = await fetch(`${api.url}/search`);
    expect(missing.status).toBe(404);
    expect((await json<ErrorJson>(missing)).error.code).toBe("NOT_FOUND");
  });
});
