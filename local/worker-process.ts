/**
 * One worker process of the local Lambda service, seen from the service: it is forked, given one
 * invocation at a time, frozen in between (SIGSTOP, SIGCONT), watched for memory, and killed.
 * Its stdout and stderr pass through this process's own, and each invocation's share of them is
 * kept for its log.
 * @module
 */
import { type ChildProcess, fork } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { performance } from "node:perf_hooks";
import type { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import {
  endOfOutput,
  type InvokeMessage,
  type InvokeReply,
  type WorkerMessage,
} from "./worker-protocol.js";

/**
 * tsx's loader resolved from here, so workers load TypeScript whatever their cwd; only asked for
 * by a TypeScript entry (the sources' tests): the built command forks JavaScript, without tsx.
 */
function tsxLoader(): string {
  return pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
}
/** How long an answered invocation waits for the rest of its output on the pipes. */
const OUTPUT_GRACE_MS = 1_000;
/** Lambda's `X-Amz-Log-Result` holds the last 4 KB; a little more is kept of the output. */
const KEPT_OUTPUT_CHARS = 8 * 1024;

/** Why the service killed a worker (anything else that ends it is a crash). */
export type KillReason = "timeout" | "out-of-memory" | "init" | "stop";

export interface Memory {
  /** Resident set size now, bytes: the JavaScript heap, buffers and native allocations alike. */
  readonly rss: number;
  /** The highest resident set size since the process started, bytes. */
  readonly peak: number;
}

/** The output of one invocation, as it arrives from either stream. */
export class InvocationOutput {
  #text = "";

  append(text: string): void {
    this.#text += text;
    if (this.#text.length > 2 * KEPT_OUTPUT_CHARS) {
      this.#text = this.#text.slice(-KEPT_OUTPUT_CHARS);
    }
  }

  get text(): string {
    return this.#text;
  }
}

/** What a worker process runs, and how. */
export interface WorkerSpec {
  /** The worker entry to fork, and the handler module it imports. */
  readonly entry: string;
  readonly module: string;
  readonly env: Record<string, string>;
  /** The program (and its first arguments) that runs the entry, e.g. `[process.execPath]`. */
  readonly command: readonly string[];
  /** The service will freeze it between invocations. */
  readonly freeze: boolean;
  /** Where the worker's stdout and stderr go besides each invocation's log. @default this process's */
  readonly output?: Writable;
}

export class WorkerProcess {
  readonly #child: ChildProcess;
  readonly #streams: readonly OutputStream[];
  /** Settles once the worker has imported its handler (or failed to). */
  readonly ready: Promise<void>;
  /** Resolves once the process is gone, with Lambda's wording of why ("exit status 1"). */
  readonly exited: Promise<string>;
  #reply: ((reply: InvokeReply) => void) | undefined;
  #idle: { readonly id: string; readonly resolve: () => void } | undefined;
  #idlePromise: Promise<void> = Promise.resolve();
  #extensions = 0;
  #killedFor: KillReason | undefined;
  #frozen = false;
  readonly #spawnedAt = performance.now();
  #readyAt: number | undefined;

  constructor({ entry, module, env, command, freeze, output }: WorkerSpec) {
    const typescript = entry.endsWith(".ts") || module.endsWith(".ts");
    const [program, ...args] = command;
    const child = fork(entry, [module], {
      env,
      execPath: program,
      // Bundled JavaScript starts in half the time of TypeScript under tsx.
      execArgv: [...args, ...(typescript ? ["--import", tsxLoader()] : [])],
      // Structured clone passes the JSON texts as they are, instead of JSON-escaping them again.
      serialization: "advanced",
      // Piped, so each invocation's output can be told apart for its log.
      stdio: ["ignore", "pipe", "pipe", "ipc"],
      // A frozen worker gets a session and process group of its own. The kernel hangs up a
      // process group that loses its last tie to its session while it holds a stopped process,
      // as when the service was started with `(npm start &)` from a shell that then exits: in
      // the service's own group, a frozen worker would take the service down with it.
      detached: freeze,
    });
    this.#child = child;
    this.#streams = [
      new OutputStream(child.stdout as Readable, output ?? process.stdout),
      new OutputStream(child.stderr as Readable, output ?? process.stderr),
    ];
    this.exited = new Promise((resolve) => {
      child.once("exit", (code, signal) => {
        resolve(signal ? `signal: ${signal}` : `exit status ${code}`);
      });
      // Only a failed spawn has no pid and no `exit`; other errors (a failed send) precede `exit`.
      child.on("error", (err) => {
        if (child.pid === undefined) resolve(`spawn failed: ${err.message}`);
      });
    });
    this.ready = new Promise((resolve) => {
      child.on("message", (message: WorkerMessage) => {
        if (message.type === "ready") {
          this.#readyAt = performance.now();
          this.#extensions = message.extensions;
          resolve();
        } else if (message.type === "idle") {
          if (this.#idle?.id === message.id) this.#idle.resolve();
        } else {
          this.#reply?.(message);
        }
      });
    });
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** Why the service killed it, or `undefined` if it was not killed by the service. */
  get killedFor(): KillReason | undefined {
    return this.#killedFor;
  }

  get frozen(): boolean {
    return this.#frozen;
  }

  /** When its init phase ended (`performance.now()`), once it has. */
  get readyAt(): number | undefined {
    return this.#readyAt;
  }

  /** How long its init phase took (Lambda's `Init Duration`), once it is over. */
  get initDurationMs(): number | undefined {
    return this.#readyAt === undefined ? undefined : this.#readyAt - this.#spawnedAt;
  }

  /**
   * Runs one invocation: thaws the worker, sends it, and resolves with the reply once the
   * invocation's output has arrived too (or after a grace period). Its output goes to `output`
   * as it arrives. Never settles if the worker dies: callers race it with {@link exited}.
   */
  async invoke(message: InvokeMessage, output: InvocationOutput): Promise<InvokeReply> {
    await this.ready;
    this.#thaw();
    this.#idlePromise =
      this.#extensions === 0
        ? Promise.resolve()
        : new Promise((resolve) => {
            this.#idle = { id: message.id, resolve };
          });
    const ends = Promise.all(this.#streams.map((s) => s.capture(endOfOutput(message.id), output)));
    const reply = await new Promise<InvokeReply>((resolve) => {
      this.#reply = resolve;
      // A failed send means the worker is exiting, which `exited` reports.
      this.#child.send(message, () => undefined);
    });
    let grace: NodeJS.Timeout | undefined;
    await Promise.race([
      ends,
      new Promise((resolve) => (grace = setTimeout(resolve, OUTPUT_GRACE_MS))),
    ]);
    clearTimeout(grace);
    for (const stream of this.#streams) stream.release();
    return reply;
  }

  /** Extensions its handler registered in the init phase (Lambda's Extensions API). */
  get extensions(): number {
    return this.#extensions;
  }

  /**
   * Resolves once the last invocation's post-invocation phase is over: its handler's extensions
   * wait for their next event (at once without extensions). Never settles if the worker dies.
   */
  get idle(): Promise<void> {
    return this.#idlePromise;
  }

  /** Stops the process (SIGSTOP), as Lambda freezes an idle execution environment. */
  freeze(): void {
    if (!this.#frozen && this.#child.kill("SIGSTOP")) this.#frozen = true;
  }

  /**
   * Resident memory now and at its peak, from /proc; `undefined` where there is no /proc. Read
   * synchronously: procfs answers from memory, and the thread pool is the local S3's.
   */
  memory(): Memory | undefined {
    let status: string;
    try {
      status = readFileSync(`/proc/${this.pid}/status`, "utf8");
    } catch {
      return undefined;
    }
    const kB = (field: string) =>
      Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)?.[1]);
    const rss = kB("VmRSS");
    const peak = kB("VmHWM");
    return Number.isFinite(rss) && Number.isFinite(peak)
      ? { rss: rss * 1024, peak: peak * 1024 }
      : undefined;
  }

  /** SIGKILL (a frozen process too), remembering why. */
  kill(reason: KillReason): Promise<string> {
    this.#killedFor ??= reason;
    this.#child.kill("SIGKILL");
    return this.exited;
  }

  #thaw(): void {
    if (this.#frozen && this.#child.kill("SIGCONT")) this.#frozen = false;
  }
}

/**
 * One of a worker's output streams: passed on to this process's own as it arrives, with the
 * end-of-invocation markers cut out; while an invocation runs, also appended to its output.
 */
class OutputStream {
  #marker: string | undefined;
  #found: (() => void) | undefined;
  #output: InvocationOutput | undefined;
  /** The end of what arrived that may be the start of a marker split across two chunks. */
  #held = "";

  constructor(
    source: Readable,
    private readonly sink: Writable,
  ) {
    source.setEncoding("utf8");
    source.on("data", (chunk: string) => this.#receive(chunk));
    // A worker that dies mid-invocation writes no marker: its output ends here.
    source.on("end", () => {
      this.#emit(this.#held);
      this.#held = "";
      this.#found?.();
    });
  }

  /** Appends what arrives to `output` until `marker`; resolves once the marker has arrived. */
  capture(marker: string, output: InvocationOutput): Promise<void> {
    this.#marker = marker;
    this.#output = output;
    return new Promise((resolve) => {
      this.#found = resolve;
    });
  }

  /** Stops appending to the invocation's output (its marker came, or will never come). */
  release(): void {
    this.#marker = undefined;
    this.#output = undefined;
    this.#found = undefined;
  }

  #receive(chunk: string): void {
    let text = this.#held + chunk;
    this.#held = "";
    const marker = this.#marker;
    if (marker !== undefined) {
      const at = text.indexOf(marker);
      if (at >= 0) {
        this.#emit(text.slice(0, at));
        const found = this.#found;
        this.release();
        found?.();
        text = text.slice(at + marker.length);
      } else {
        const partial = partialMarkerAt(text, marker);
        this.#held = text.slice(partial);
        text = text.slice(0, partial);
      }
    }
    this.#emit(text);
  }

  #emit(text: string): void {
    if (!text) return;
    this.sink.write(text);
    this.#output?.append(text);
  }
}

/** Where a prefix of `marker` that ends `text` begins (`text.length` when none does). */
function partialMarkerAt(text: string, marker: string): number {
  for (let length = Math.min(marker.length - 1, text.length); length > 0; length--) {
    if (text.endsWith(marker.slice(0, length))) return text.length - length;
  }
  return text.length;
}
