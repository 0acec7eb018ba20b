/**
 * The workers of one function of the local Lambda service, run the way Lambda runs execution
 * environments: one invocation per worker at a time, warm between invocations and frozen while
 * idle, killed past the function's timeout or memory size and replaced, at most `concurrency` of
 * them. Where Lambda would scale out, an invocation over that size waits for the next free worker
 * (first in, first out; bounded in number and by the function's timeout) and only then is
 * throttled.
 * @module
 */

import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
/** Lambda's limit on a synchronous invocation's request and response payloads. */
import { MAX_PAYLOAD_BYTES } from "../shared/payload.js";
import {
  InvocationOutput,
  type KillReason,
  WorkerProcess,
  type WorkerSpec,
} from "./worker-process.js";
import type { LambdaError } from "./worker-protocol.js";

/**
 * Limit on a worker's init phase. Lambda allows 10 s with a CPU per environment; here every
 * worker shares the machine's cores, so a burst of cold starts gets more room.
 */
const INIT_TIMEOUT_MS = 60_000;
/** How often running workers' memory is looked at; their peak is checked after each invocation. */
const MEMORY_WATCH_MS = 100;
const MB = 1024 * 1024;

export interface PoolSettings extends WorkerSpec {
  readonly name: string;
  readonly concurrency: number;
  readonly timeoutMs: number;
  /** MB, Lambda's `MemorySize`. */
  readonly memorySize: number;
  readonly maxQueued: number;
  /** Called whenever the set of worker pids changes. */
  readonly onWorkers: () => void;
}

export interface FunctionStats {
  /** Live worker processes (idle or busy). */
  workers: number;
  busy: number;
  /** Invocations waiting for a free worker. */
  queued: number;
  /** Invocations given to a worker (throttled ones excluded). */
  invocations: number;
  /** Workers that exited on their own (process.exit, native abort, signal). */
  crashes: number;
  /** Workers killed for going over the function's memory size. */
  outOfMemory: number;
}

/** What an invocation answers: the payload's JSON text, whether it is a function error, its log. */
export interface Outcome {
  readonly payload: string;
  readonly functionError: boolean;
  /** START, the worker's output, END and REPORT lines, as Lambda logs an invocation. */
  readonly log: string;
}

export type InvokeResult =
  | { readonly type: "done"; readonly outcome: Outcome }
  | { readonly type: "throttled" }
  | { readonly type: "stopping" };

/**
 * How a run ended, before it becomes an {@link Outcome}: the handler's result or error, or a
 * failure of the environment (Lambda's report gives its status: `error` or `timeout`).
 */
type Ended =
  | { readonly type: "result"; readonly payload: string }
  | { readonly type: "error"; readonly error: LambdaError }
  | { readonly type: "failed"; readonly error: LambdaError; readonly status: string };

/** What the REPORT line of an invocation's log says. */
interface Report {
  readonly durationMs: number;
  readonly initDurationMs: number | undefined;
  readonly peakBytes: number | undefined;
}

const DONE: Promise<void> = Promise.resolve();

interface Waiter {
  /** Settles the wait: a worker is free for it, or it leaves the queue. */
  settle(result: "slot" | "timeout" | "stopping"): void;
}

export class FunctionPool {
  readonly #settings: PoolSettings;
  readonly #live = new Set<WorkerProcess>();
  #idle: WorkerProcess[] = [];
  #queue: Waiter[] = [];
  #busy = 0;
  #invocations = 0;
  #crashes = 0;
  #outOfMemory = 0;
  #stopping = false;
  readonly #stalls: number[] = [];
  readonly #watch: NodeJS.Timeout;

  constructor(settings: PoolSettings) {
    this.#settings = settings;
    this.#watch = setInterval(() => this.#watchMemory(), MEMORY_WATCH_MS).unref();
  }

  stats(): FunctionStats {
    return {
      workers: this.#live.size,
      busy: this.#busy,
      queued: this.#queue.length,
      invocations: this.#invocations,
      crashes: this.#crashes,
      outOfMemory: this.#outOfMemory,
    };
  }

  /**
   * Makes the next invocation a straggler: its environment waits `ms` before it starts it (a
   * slow environment, for tests and the benchmark); later ones are not delayed.
   */
  stallNext(ms: number): void {
    this.#stalls.push(ms);
  }

  pids(): number[] {
    return [...this.#live].flatMap((worker) => (worker.pid === undefined ? [] : [worker.pid]));
  }

  /**
   * Runs one invocation in a free worker, or waits for one. Throttled when the queue is full, when
   * the wait outlasts the function's timeout, or when `signal` aborts it (its caller went away).
   */
  async invoke(id: string, event: string, signal?: AbortSignal): Promise<InvokeResult> {
    if (this.#stopping) return { type: "stopping" };
    if (this.#busy < this.#settings.concurrency && this.#queue.length === 0) {
      this.#busy++;
    } else {
      if (this.#queue.length >= this.#settings.maxQueued) return { type: "throttled" };
      const waited = await this.#wait(signal);
      if (waited === "timeout") return { type: "throttled" };
      // No worker starts once the pool is stopping.
      if (waited === "stopping" || this.#stopping) {
        if (waited === "slot") this.#release();
        return { type: "stopping" };
      }
    }
    this.#invocations++;
    // The slot is taken until the worker's post-invocation phase is over, after the answer.
    let settled = DONE;
    try {
      const run = await this.#run(id, event);
      settled = run.settled;
      return { type: "done", outcome: run.outcome };
    } finally {
      void settled.then(() => this.#release());
    }
  }

  /** A worker slot is done with: it passes straight to the first in the queue, or is given back. */
  #release(): void {
    const next = this.#queue.shift();
    if (next) next.settle("slot");
    else this.#busy--;
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    clearInterval(this.#watch);
    for (const waiter of this.#queue.splice(0)) waiter.settle("stopping");
    await Promise.all([...this.#live].map((worker) => worker.kill("stop")));
  }

  #wait(signal: AbortSignal | undefined): Promise<"slot" | "timeout" | "stopping"> {
    return new Promise((resolve) => {
      const leave = () => {
        this.#queue = this.#queue.filter((w) => w !== waiter);
        waiter.settle("timeout");
      };
      const timer = setTimeout(leave, this.#settings.timeoutMs);
      const waiter: Waiter = {
        settle(result) {
          clearTimeout(timer);
          signal?.removeEventListener("abort", leave);
          resolve(result);
        },
      };
      signal?.addEventListener("abort", leave, { once: true });
      this.#queue.push(waiter);
    });
  }

  async #run(id: string, event: string): Promise<{ outcome: Outcome; settled: Promise<void> }> {
    const started = performance.now();
    const output = new InvocationOutput();
    const warm = this.#idle.pop();
    const worker = warm ?? this.#spawn();
    const ended = await this.#runIn(worker, id, event, output);
    // Lambda reports the init phase of a cold start apart from the invocation's duration.
    const durationMs = performance.now() - Math.max(started, worker.readyAt ?? started);
    const memory = this.#live.has(worker) ? worker.memory() : undefined;
    const report: Report = {
      durationMs,
      initDurationMs: warm ? undefined : worker.initDurationMs,
      peakBytes: memory?.peak,
    };
    // A peak between two looks of the watch: Lambda would have killed it then.
    if (ended.type !== "failed" && memory && memory.peak > this.#limitBytes) {
      await worker.kill("out-of-memory");
      return { outcome: this.#outcome(id, output, report, outOfMemory(id)), settled: DONE };
    }
    const settled = !this.#live.has(worker)
      ? DONE
      : worker.extensions > 0
        ? this.#settle(worker, id, started)
        : this.#rest(worker);
    return { outcome: this.#outcome(id, output, report, ended), settled };
  }

  /**
   * The post-invocation phase of a worker with extensions, after the answer: it runs until they
   * wait for their next event (at most until the invocation's timeout, as on Lambda), then it
   * rests.
   */
  async #settle(worker: WorkerProcess, id: string, started: number): Promise<void> {
    const answered = performance.now();
    const remaining = this.#settings.timeoutMs - (answered - started);
    let timer: NodeJS.Timeout | undefined;
    const phase = await Promise.race([
      worker.idle.then(() => "idle" as const),
      worker.exited.then(() => "exited" as const),
      new Promise<"timeout">((resolve) => {
        timer = setTimeout(resolve, Math.max(0, remaining), "timeout");
      }),
    ]).finally(() => clearTimeout(timer));
    if (phase === "timeout") await worker.kill("timeout");
    // Where a log is kept (npm start's functions.log), the phase and the billed time, as
    // Lambda's report of an invocation with extensions says them.
    if (this.#settings.output) {
      const postMs = performance.now() - answered;
      const billed = Math.ceil(performance.now() - started);
      const status = phase === "idle" ? "" : `\tStatus: ${phase}`;
      this.#settings.output.write(
        `POSTINVOKE RequestId: ${id}\tPostRuntimeExtensionsDuration: ${postMs.toFixed(2)} ms\tBilled Duration: ${billed} ms${status}\n`,
      );
    }
    if (phase === "idle" && this.#live.has(worker)) this.#rest(worker);
  }

  /** Lambda freezes an environment between invocations: nothing runs until the next one. */
  #rest(worker: WorkerProcess): Promise<void> {
    if (this.#settings.freeze) worker.freeze();
    this.#idle.push(worker);
    return DONE;
  }

  async #runIn(
    worker: WorkerProcess,
    id: string,
    event: string,
    output: InvocationOutput,
  ): Promise<Ended> {
    // Like Lambda, the init phase (importing the handler) has its own limit and does not count
    // against the function's timeout.
    const init = await Promise.race([
      worker.ready.then(() => "ready" as const),
      worker.exited.then(() => "exited" as const),
      new Promise<"timeout">((resolve) => setTimeout(resolve, INIT_TIMEOUT_MS, "timeout").unref()),
    ]);
    if (init === "timeout") {
      await worker.kill("init");
      const errorMessage = `RequestId: ${id} Init did not finish within ${INIT_TIMEOUT_MS / 1000} seconds`;
      return {
        type: "failed",
        error: { errorType: "Runtime.InitError", errorMessage },
        status: "error",
      };
    }
    const { timeoutMs } = this.#settings;
    // An injected straggler: this environment is slow to start the invocation.
    const stall = this.#stalls.shift();
    if (stall !== undefined) await sleep(stall);
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      worker.invoke({ id, event, deadline: Date.now() + timeoutMs }, output),
      worker.exited.then((reason) => ({ type: "exit", reason }) as const),
      new Promise<{ type: "timeout" }>((resolve) => {
        timer = setTimeout(resolve, timeoutMs, { type: "timeout" });
      }),
    ]).finally(() => clearTimeout(timer));

    switch (outcome.type) {
      case "result":
        if (Buffer.byteLength(outcome.payload) > MAX_PAYLOAD_BYTES) {
          const errorMessage = `Response payload size exceeded maximum allowed payload size (${MAX_PAYLOAD_BYTES} bytes).`;
          return {
            type: "error",
            error: { errorType: "Function.ResponseSizeTooLarge", errorMessage, trace: [] },
          };
        }
        return { type: "result", payload: outcome.payload };
      case "error":
        return { type: "error", error: outcome.error };
      case "exit":
        if (worker.killedFor === "out-of-memory") return outOfMemory(id);
        return {
          type: "failed",
          error: {
            errorType: "Runtime.ExitError",
            errorMessage: `RequestId: ${id} Error: Runtime exited with error: ${outcome.reason}`,
          },
          status: "error",
        };
      case "timeout": {
        await worker.kill("timeout");
        const seconds = (timeoutMs / 1000).toFixed(2);
        const errorMessage = `${new Date().toISOString()} ${id} Task timed out after ${seconds} seconds`;
        return {
          type: "failed",
          error: { errorType: "Sandbox.Timedout", errorMessage },
          status: "timeout",
        };
      }
    }
  }

  /** The answer and log of an ended run; a lost environment is also told on the stack's stderr. */
  #outcome(id: string, output: InvocationOutput, run: Report, ended: Ended): Outcome {
    if (ended.type === "failed") {
      const { errorType, errorMessage } = ended.error;
      process.stderr.write(
        `${JSON.stringify({ level: "ERROR", message: "execution environment lost", functionName: this.#settings.name, requestId: id, errorType, errorMessage })}\n`,
      );
    }
    const { durationMs, initDurationMs, peakBytes } = run;
    const report = [
      `REPORT RequestId: ${id}`,
      `Duration: ${durationMs.toFixed(2)} ms`,
      `Billed Duration: ${Math.ceil(durationMs)} ms`,
      `Memory Size: ${this.#settings.memorySize} MB`,
      `Max Memory Used: ${Math.round((peakBytes ?? 0) / MB)} MB`,
      ...(initDurationMs === undefined ? [] : [`Init Duration: ${initDurationMs.toFixed(2)} ms`]),
      ...(ended.type === "failed" ? [`Status: ${ended.status}`] : []),
      ...(ended.type === "failed" && ended.status === "error"
        ? [`Error Type: ${ended.error.errorType}`]
        : []),
    ].join("\t");
    const platformError = ended.type === "failed" ? `${ended.error.errorMessage}\n` : "";
    const log = `START RequestId: ${id} Version: $LATEST\n${output.text}${platformError}END RequestId: ${id}\n${report}\t\n`;
    return ended.type === "result"
      ? { payload: ended.payload, functionError: false, log }
      : { payload: JSON.stringify(ended.error), functionError: true, log };
  }

  get #limitBytes(): number {
    return this.#settings.memorySize * MB;
  }

  #spawn(): WorkerProcess {
    const { onWorkers } = this.#settings;
    const worker = new WorkerProcess(this.#settings);
    this.#live.add(worker);
    onWorkers();
    void worker.exited.then(() => {
      this.#live.delete(worker);
      this.#idle = this.#idle.filter((idle) => idle !== worker);
      const reason: KillReason | undefined = worker.killedFor;
      if (reason === "out-of-memory") this.#outOfMemory++;
      else if (reason === undefined) this.#crashes++;
      onWorkers();
    });
    return worker;
  }

  /** Kills any worker whose resident memory is over the function's memory size. */
  #watchMemory(): void {
    for (const worker of this.#live) {
      // A frozen worker's memory cannot grow.
      if (worker.frozen) continue;
      const memory = worker.memory();
      if (memory && memory.rss > this.#limitBytes) void worker.kill("out-of-memory");
    }
  }
}

/** Lambda's answer for an environment killed over its memory size. */
function outOfMemory(id: string): Ended {
  return {
    type: "failed",
    error: {
      errorType: "Runtime.OutOfMemory",
      errorMessage: `RequestId: ${id} Error: Runtime exited with error: signal: killed`,
    },
    status: "error",
  };
}
