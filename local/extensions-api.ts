/**
 * The part of Lambda's Extensions API an internal extension uses, served by a local worker
 * (`local/worker.ts`) to the handler in its own process: `register` (INVOKE events only) and
 * `event/next`, which answers at the worker's next invocation. The worker asks
 * {@link ExtensionsApi.settled} when an invocation's post-invocation phase is over: every
 * registered extension is waiting for its next event again, as Lambda waits before it freezes
 * an environment.
 * @module
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { HOST } from "./net.js";

const PREFIX = "/2020-01-01/extension/";

export interface ExtensionsApi {
  /** `host:port`, the worker's `AWS_LAMBDA_RUNTIME_API`. */
  readonly address: string;
  /** Sends invocation `requestId` to every extension waiting for its next event. */
  invoke(requestId: string, deadlineMs: number): void;
  /** Resolves once every registered extension waits for its next event. */
  settled(): Promise<void>;
  /** Extensions registered. */
  readonly registered: number;
  close(): void;
}

interface Registered {
  /** The pending `event/next`, answered at the next invocation. */
  waiting: ServerResponse | undefined;
}

export async function startExtensionsApi(functionName: string): Promise<ExtensionsApi> {
  const extensions = new Map<string, Registered>();
  let wake: (() => void) | undefined;
  const allWaiting = () => [...extensions.values()].every((e) => e.waiting !== undefined);
  const server = createServer((req, res) => {
    const id = header(req, "lambda-extension-identifier");
    if (req.method === "POST" && req.url === `${PREFIX}register`) {
      const name = header(req, "lambda-extension-name");
      if (!name) return reply(res, 400, { errorType: "Extension.InvalidName" });
      const newId = randomUUID();
      extensions.set(newId, { waiting: undefined });
      res.setHeader("Lambda-Extension-Identifier", newId);
      return reply(res, 200, {
        functionName,
        functionVersion: "$LATEST",
        handler: "index.handler",
      });
    }
    const extension = id === undefined ? undefined : extensions.get(id);
    if (req.method === "GET" && req.url === `${PREFIX}event/next` && extension) {
      extension.waiting = res;
      if (allWaiting()) wake?.();
      return;
    }
    reply(res, 403, { errorType: "Extension.Unknown" });
  });
  // `event/next` waits as long as the environment is idle.
  server.requestTimeout = 0;
  await new Promise<void>((resolve) => server.listen(0, HOST, resolve));
  const { port } = server.address() as AddressInfo;
  return {
    address: `${HOST}:${port}`,
    invoke(requestId, deadlineMs) {
      for (const extension of extensions.values()) {
        const res = extension.waiting;
        extension.waiting = undefined;
        if (res) reply(res, 200, { eventType: "INVOKE", deadlineMs, requestId });
      }
    },
    get registered() {
      return extensions.size;
    },
    async settled() {
      while (!allWaiting()) {
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
      }
    },
    close() {
      server.closeAllConnections();
      server.close();
    },
  };
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return typeof value === "string" ? value : undefined;
}

function reply(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}
