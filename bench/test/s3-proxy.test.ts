/**
 * The benchmark's S3-like network (bench/s3-proxy.ts): latency and pass-through, what a client
 * sees when the local S3 drops a response half way (before the proxy passed that on, the client's
 * response never ended until object_store's 30 s request timeout), and a client that hangs up.
 * The 25-33 s stalls of batches through the stack had another cause: the accept backlog
 * (LISTEN_BACKLOG there), measured with the kernel's counters, not testable here.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type S3Proxy, startS3Proxy } from "../s3-proxy.js";

const BODY = "x".repeat(64 * 1024);

let upstream: Server;
let upstreamUrl: string;

beforeAll(async () => {
  upstream = createServer((req, res) => {
    if (req.url === "/dropped") {
      // Headers and part of the body, then the connection goes: what an upstream reset looks like.
      res.writeHead(200, { "content-length": String(BODY.length) });
      res.write(BODY.slice(0, 1024), () => res.destroy());
      return;
    }
    res.writeHead(200, { "content-length": String(BODY.length) });
    res.end(BODY);
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
});

afterAll(async () => {
  upstream.closeAllConnections();
  await new Promise((resolve) => upstream.close(resolve));
});

async function withProxy(latencyMs: number, run: (proxy: S3Proxy) => Promise<void>) {
  const proxy = await startS3Proxy({ upstream: upstreamUrl, latencyMs, bandwidthMBps: 50 });
  try {
    await run(proxy);
  } finally {
    await proxy.stop();
  }
}

describe("the bench's S3 proxy", () => {
  it("passes a response through after the first-byte latency, counting it", async () => {
    await withProxy(40, async (proxy) => {
      const started = performance.now();
      const res = await fetch(`${proxy.endpoint}/whole`);
      expect(performance.now() - started).toBeGreaterThanOrEqual(39);
      expect(await res.text()).toBe(BODY);
      expect(proxy.stats()).toMatchObject({ requests: 1, bytes: BODY.length, dropped: 0 });
    });
  });

  it("ends the client's response with an error when the upstream drops it, at once", async () => {
    await withProxy(0, async (proxy) => {
      const started = performance.now();
      const res = await fetch(`${proxy.endpoint}/dropped`);
      await expect(res.text()).rejects.toThrow();
      expect(performance.now() - started).toBeLessThan(2_000);
      await expect.poll(() => proxy.stats().dropped).toBe(1);
    });
  }, 5_000);

  it("survives a client that hangs up during the latency, and counts no drop for it", async () => {
    await withProxy(200, async (proxy) => {
      // The client goes while the proxy holds the upstream's answer back: its response is
      // destroyed before anything is written to it (the crash of the first --all at d300dda).
      await expect(
        fetch(`${proxy.endpoint}/whole`, { signal: AbortSignal.timeout(50) }),
      ).rejects.toThrow();
      await new Promise((resolve) => setTimeout(resolve, 300));
      const res = await fetch(`${proxy.endpoint}/whole`);
      expect(await res.text()).toBe(BODY);
      expect(proxy.stats()).toMatchObject({ requests: 2, dropped: 0 });
    });
  }, 5_000);
});
