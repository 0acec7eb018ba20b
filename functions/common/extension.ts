/**
 * An internal Lambda extension in the function's own process (the Extensions API), so that a
 * handler can answer first and finish its work after: Lambda freezes an execution environment
 * only once the runtime has answered and every extension has asked for its next event, and the
 * environment's next invoke waits for that. The extension asks for its next event once the
 * handler has returned and the work it held has settled.
 *
 * Registered during the init phase (the handler module's import); without
 * `AWS_LAMBDA_RUNTIME_API` (not on Lambda, nor in the local stack) there is none.
 * @module
 */
import { Agent, request } from "node:http";

const API = "2020-01-01/extension";

export interface AfterAnswer {
  /** The handler, telling the extension when each invocation's handler has returned. */
  wrap<A extends unknown[], R>(handler: (...args: A) => Promise<R>): (...args: A) => Promise<R>;
  /** Keeps the environment running until `work` settles, after the answer if need be. */
  hold(work: Promise<unknown>): void;
}

/**
 * Registers the extension `name` and starts its event loop.
 * @returns undefined where there is no Extensions API.
 * @throws Error when the API refuses the registration.
 */
export async function registerAfterAnswer(
  name: string,
  api = process.env.AWS_LAMBDA_RUNTIME_API,
): Promise<AfterAnswer | undefined> {
  if (!api) return undefined;
  const agent = new Agent({ keepAlive: true });
  const registered = await call(agent, api, "POST", "register", {
    headers: { "Lambda-Extension-Name": name },
    body: JSON.stringify({ events: ["INVOKE"] }),
  });
  const id = registered.headers["lambda-extension-identifier"];
  if (registered.status !== 200 || typeof id !== "string") {
    throw new Error(`Lambda extension ${name}: register answered ${registered.status}`);
  }
  const extension = new Extension();
  extension
    .loop(() =>
      call(agent, api, "GET", "event/next", { headers: { "Lambda-Extension-Identifier": id } }),
    )
    .catch((err: unknown) => {
      // Without its loop the environment freezes at each answer: held work then stalls until
      // the next invoke, as it would without the extension.
      console.error(`Lambda extension ${name} stopped: ${String(err)}`);
    });
  return extension;
}

class Extension implements AfterAnswer {
  #events = 0;
  #returned = 0;
  readonly #held = new Set<Promise<unknown>>();
  #wake: (() => void) | undefined;

  wrap<A extends unknown[], R>(handler: (...args: A) => Promise<R>) {
    return async (...args: A): Promise<R> => {
      try {
        return await handler(...args);
      } finally {
        this.#returned++;
        this.#notify();
      }
    };
  }

  hold(work: Promise<unknown>): void {
    const settled: Promise<unknown> = work
      .catch(() => undefined)
      .finally(() => {
        this.#held.delete(settled);
        this.#notify();
      });
    this.#held.add(settled);
  }

  /** Asks for the next event whenever every invocation so far has returned and settled. */
  async loop(next: () => Promise<unknown>): Promise<void> {
    for (;;) {
      while (this.#returned < this.#events || this.#held.size > 0) {
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
        });
      }
      await next();
      this.#events++;
    }
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }
}

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
}

/** One call of the Extensions API; `event/next` blocks until the next event (no timeout). */
function call(
  agent: Agent,
  api: string,
  method: string,
  path: string,
  options: { headers: Record<string, string>; body?: string },
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      `http://${api}/${API}/${path}`,
      { method, agent, headers: options.headers },
      (res) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers }));
      },
    );
    req.on("error", reject);
    req.end(options.body);
  });
}
