/**
 * What an index takes in a segment-search's cache, against its files: the demo dataset (built
 * locally, then uploaded to the local S3) searched through the local stack with the local S3's
 * first-byte latency, one task (`strategy: single`) at several index cache sizes, by queries
 * spread over the vector space (so that together they probe every partition), each asked twice:
 * the second pass is timed. A cache that holds the index answers warm in tens of ms; one that
 * does not re-reads from S3 on every query.
 * The smallest size that holds it, over the index files' bytes, is the factor the cost model
 * uses (`cachedPerFileByte` in shared/strategy.ts).
 *
 *     tsx bench/probes/cache-fit.ts [cache MiB ...]   # default 3 4 5 6 8
 * @module
 */
import { createWriteStream } from "node:fs";
import { mkdtemp, readdir, readFile, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { ensureDemoDataset } from "../../local/demo-dataset.js";
import { mulberry32 } from "../../local/random.js";
import { startStack } from "../../local/stack.js";

const LATENCY_MS = 20;
const QUERIES = 20;
const sizes = process.argv.slice(2).map(Number);

const work = await mkdtemp(join(tmpdir(), "cache-fit-"));
const demo = await ensureDemoDataset({ db: join(work, "db") });
const indexBytes = await directoryBytes(join(demo.uri, "_indices"));
console.log(`demo index: ${(indexBytes / 2 ** 20).toFixed(2)} MiB of files`);
for (const mib of sizes.length > 0 ? sizes : [3, 4, 5, 6, 8]) {
  const p50 = await oneTaskP50(mib);
  console.log(
    `cache ${mib} MiB (${(mib / (indexBytes / 2 ** 20)).toFixed(2)}x the files): one task p50 ${p50.toFixed(1)} ms`,
  );
}

/** The warm p50 of the demo's example search as one task, each environment caching `mib`. */
async function oneTaskP50(mib: number): Promise<number> {
  const stack = await startStack({
    dataDir: await mkdtemp(join(work, "stack-")),
    apiPort: 0,
    s3Port: 0,
    lambdaPort: 0,
    indexCacheMb: mib,
    userEnv: { LANCE_FANOUT_LOG: "off" },
    functionLog: createWriteStream(join(work, "functions.log"), { flags: "a" }),
  });
  try {
    const uri = await upload(stack.s3.endpoint, stack.s3.credentials, demo.uri);
    stack.s3.setLatency(LATENCY_MS);
    const next = mulberry32(7);
    const queries = Array.from({ length: QUERIES }, () => Array.from({ length: 64 }, next));
    const times: number[] = [];
    for (const pass of [0, 1]) {
      for (const query of queries) {
        const started = performance.now();
        const res = await fetch(`${stack.api.url}/search`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ dataset: uri, query, k: 10, strategy: "single" }),
        });
        if (!res.ok) throw new Error(`search answered ${res.status}: ${await res.text()}`);
        await res.arrayBuffer();
        if (pass === 1) times.push(performance.now() - started);
      }
    }
    return times.sort((a, b) => a - b)[Math.floor(times.length / 2)] ?? Number.NaN;
  } finally {
    await stack.stop();
  }
}

async function upload(
  endpoint: string,
  credentials: { accessKeyId: string; secretAccessKey: string },
  dir: string,
): Promise<string> {
  const s3 = new S3Client({ endpoint, credentials, region: "us-east-1", forcePathStyle: true });
  for (const file of await readdir(dir, { recursive: true })) {
    const path = join(dir, file);
    if ((await stat(path)).isDirectory()) continue;
    const body = await readFile(path);
    await s3.send(
      new PutObjectCommand({ Bucket: "lance-fanout", Key: `demo/demo.lance/${file}`, Body: body }),
    );
  }
  s3.destroy();
  return "s3://lance-fanout/demo/demo.lance";
}

async function directoryBytes(dir: string): Promise<number> {
  let bytes = 0;
  for (const file of await readdir(dir, { recursive: true })) {
    const info = await stat(join(dir, file));
    if (info.isFile()) bytes += info.size;
  }
  return bytes;
}
