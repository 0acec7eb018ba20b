/**
 * An S3-like network in front of the local S3: a loopback HTTP proxy that delays every response's
 * first byte by `latencyMs` (real S3: tens of ms for small GETs) and caps each connection's
 * download rate at `bandwidthMBps` (real S3: ~85-90 MB/s per connection). `local/s3.ts` has a
 * first-byte delay but no bandwidth cap, and `startStack` does not pass it on; this proxy gives
 * both without changing either.
 * @module
 */
import { Agent, createServer, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { PassThrough, pipeline, Transform, type TransformCallback } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";

export interface S3ProxyOptions {
  /** The real (local) S3, e.g. http://127.0.0.1:4569. */
  readonly upstream: string;
  readonly latencyMs: number;
  /** Per-connection download cap in MB/s (10^6 bytes); 0 = none. */
  readonly bandwidthMBps: number;
  /** Called for every request (method, path with query, Range header): GET profiles. */
  readonly onRequest?: (method: string, url: string, range: string | undefined) => void;
}

export interface S3Proxy {
  readonly endpoint: string;
  /**
   * Requests and response bytes served so far, and responses the local S3 dropped part way (each
   * passed on to its client as a reset connection, which object_store retries; a client that
   * hangs up is not counted).
   */
  stats(): { requests: number; bytes: number; dropped: number };
  stop(): Promise<void>;
}

class Throttle extends Transform {
  readonly #bytesPerMs: number;
  readonly #started = performance.now();
  #sent = 0;
  constructor(bytesPerMs: number) {
    super();
    this.#bytesPerMs = bytesPerMs;
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.#sent += chunk.length;
    const due = this.#started + this.#sent / this.#bytesPerMs;
    const wait = due - performance.now();
    if (wait > 1) setTimeout(() => done(null, chunk), wait);
    else done(null, chunk);
  }
}

/** Below s3rver's keep-alive timeout (Node's default, 5 s). */
const UPSTREAM_IDLE_MS = 4_000;

/**
 * How long an idle client connection stays open. A batch of 100 opens thousands of connections
 * from every lancedb process at once, and they all end in this process: kept for a minute, a few
 * bursts reach the 20,000-descriptor limit and new connections fail (measured, native plus four
 * workers at batch 100: peaks of 10,600 -> 18,400 descriptors over four bursts at 65 s; peaks of
 * 6,100-7,800 and ~1,500 open between bursts at 10 s).
 */
const CLIENT_IDLE_MS = 10_000;

/**
 * Connections waiting to be accepted. A batch's burst of new connections overflowed Node's
 * default of 511 while this process's one thread was busy (TcpExtListenOverflows +22,000 in 20 s
 * at fashion-mnist batch 100 through the stack); the kernel then drops the handshake's last
 * ACK and the client waits out SYN-ACK retransmits, 1 + 2 + 4 + 8 + 16 s: the 25-33 s samples.
 * The kernel caps it at net.core.somaxconn (4,096 here).
 */
const LISTEN_BACKLOG = 65_535;

export async function startS3Proxy(options: S3ProxyOptions): Promise<S3Proxy> {
  const upstream = new URL(options.upstream);
  // s3rver closes a keep-alive socket after Node's default 5 s idle; an agent reusing one at that
  // moment gets ECONNRESET (seen under batch bursts), so idle upstream sockets are dropped first.
  const agent = new Agent({ keepAlive: true, maxSockets: 256, timeout: UPSTREAM_IDLE_MS });
  let requests = 0;
  let bytes = 0;
  let dropped = 0;
  const server = createServer((req, res) => {
    requests++;
    options.onRequest?.(req.method ?? "", req.url ?? "", req.headers.range);
    const started = performance.now();
    const out = httpRequest(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: req.headers,
        agent,
      },
      (up) => {
        void (async () => {
          const wait = options.latencyMs - (performance.now() - started);
          if (wait > 0) await sleep(wait);
          // The client may have gone during the wait (lancedb cancels reads it no longer needs).
          if (res.destroyed) {
            up.destroy();
            return;
          }
          res.writeHead(up.statusCode ?? 502, up.headers);
          up.on("data", (chunk: Buffer) => {
            bytes += chunk.length;
          });
          // Only the upstream's own failure is a drop: a client that hangs up ends `up` too.
          let upstreamFailed = false;
          up.once("error", () => {
            upstreamFailed = true;
          });
          const shaper =
            options.bandwidthMBps > 0
              ? new Throttle((options.bandwidthMBps * 1e6) / 1000)
              : new PassThrough();
          // pipeline, not pipe: a response the local S3 drops part way must reset the client's
          // connection, or its response never ends and lancedb waits out object_store's 30 s
          // request timeout (test/s3-proxy.test.ts).
          pipeline(up, shaper, res, (err) => {
            if (err && upstreamFailed) dropped++;
          });
        })();
      },
    );
    out.on("error", (err) => {
      if (!res.headersSent) res.writeHead(502);
      res.end(String(err));
    });
    req.pipe(out);
  });
  server.keepAliveTimeout = CLIENT_IDLE_MS;
  await new Promise<void>((resolve) =>
    server.listen({ port: 0, host: "127.0.0.1", backlog: LISTEN_BACKLOG }, resolve),
  );
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    stats: () => ({ requests, bytes, dropped }),
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
        agent.destroy();
      }),
  };
}
