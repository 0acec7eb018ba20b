/**
 * Loopback-only HTTP servers for the local stack.
 * @module
 */
import type { IncomingMessage, RequestListener, Server, ServerResponse } from "node:http";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { createServer as createTcpServer } from "node:net";

/** Every local service binds here and nowhere else. */
export const HOST = "127.0.0.1";

/** Starts an HTTP server on 127.0.0.1 (`port` 0 picks a free one); resolves with its port. */
export async function listenOnLoopback(
  port: number,
  listener: RequestListener,
): Promise<{ server: Server; port: number }> {
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new RangeError(`port must be an integer in 0..65535, got ${port}`);
  }
  const server = createServer(listener);
  // Outlive the SDK's idle keep-alive sockets, or a reused socket meets a close (ECONNRESET).
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, HOST, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return { server, port: (server.address() as AddressInfo).port };
}

/** A port free on 127.0.0.1 right now (for a service whose port others must know up front). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createTcpServer();
    server.once("error", reject);
    server.listen(0, HOST, () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/**
 * The request body, or `undefined` as soon as it is known to be over `limit` bytes (from
 * `content-length`, or once that many arrived). The rest of an oversized body is then `drain`ed
 * as it arrives (the client, still writing, reads the error answer instead of a reset
 * connection) or the request is `pause`d (for an answer that closes the connection).
 */
export function readBody(
  req: IncomingMessage,
  limit: number,
  overflow: "drain" | "pause",
): Promise<Buffer | undefined> {
  if (Number(req.headers["content-length"]) > limit) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) {
        chunks.push(chunk);
        return;
      }
      // Without a `data` listener a flowing stream drops what it reads.
      if (overflow === "pause") req.pause();
      req.off("data", onData).off("end", onEnd);
      resolve(undefined);
    };
    const onEnd = () => resolve(Buffer.concat(chunks));
    req.on("data", onData).on("end", onEnd).on("error", reject);
  });
}

/** Answers `status` with a JSON text. */
export function sendJson(
  res: ServerResponse,
  status: number,
  json: string,
  headers: Readonly<Record<string, string>> = {},
): void {
  res
    .writeHead(status, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(json),
      ...headers,
    })
    .end(json);
}
