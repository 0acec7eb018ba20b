/**
 * Loopback-only HTTP servers for the local stack.
 * @module
 */
import type { RequestListener, Server } from "node:http";
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
