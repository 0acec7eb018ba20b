/**
 * What a dropped lancedb Session keeps, measured: the probe behind the cache renewal policy of
 * shared/views.ts. Builds a small indexed dataset on the local S3, then in a fresh child process
 * runs `--cycles` cycles of "open the table, load its index, search, close", either in a new
 * Session each cycle (`renew`, what a cache renewal does) or in one Session (`keep`), with the
 * renewal's full GC after each, and prints the resident memory each cycle adds. With lancedb 0.31 a
 * renewed Session leaves its S3 object store and HTTP connections behind although its
 * JavaScript handle is collected (the child counts them): re-run it after upgrading lancedb.
 *   npx tsx scripts/session-leak.ts [--cycles 40] [--storage-option pool_max_idle_per_host=8]
 */
import { fork } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import * as lancedb from "@lancedb/lancedb";
import { Command, InvalidArgumentError } from "commander";
import { environment } from "../bench/env.js";
import { mulberry32 } from "../local/random.js";
import { startLocalS3 } from "../local/s3.js";
import { collectGarbage } from "../shared/views.js";
import { positiveInteger } from "./positive-integer.js";

const BUCKET = "probe";
const DIM = 64;
const MODES = ["renew", "keep"] as const;

interface Probe {
  readonly uri: string;
  readonly storageOptions: Record<string, string>;
  readonly cycles: number;
  readonly mode: (typeof MODES)[number];
}

async function main(): Promise<void> {
  const { cycles, storageOption } = new Command("session-leak")
    .option("--cycles <n>", "cycles per mode", positiveInteger, 40)
    .option(
      "--storage-option <key=value>",
      "an extra lancedb storage option for the probe's reads (repeatable)",
      keyValue,
      {},
    )
    .parse()
    .opts<{ cycles: number; storageOption: Record<string, string> }>();
  process.env.AWS_EC2_METADATA_DISABLED = "true";
  const directory = await mkdtemp(join(tmpdir(), "session-leak-"));
  const s3 = await startLocalS3({ directory, buckets: [BUCKET] });
  try {
    const storageOptions = { ...s3.storageOptions(), ...storageOption };
    const uri = `s3://${BUCKET}/db`;
    await build(uri, storageOptions);
    console.log(
      `lancedb ${environment().packages["@lancedb/lancedb"]}, ${cycles} cycles per mode; MiB of RSS:`,
    );
    for (const mode of MODES) console.log(await child({ uri, storageOptions, cycles, mode }));
  } finally {
    await s3.stop();
    await rm(directory, { recursive: true, force: true });
  }
}

function keyValue(value: string, previous: Record<string, string>): Record<string, string> {
  const at = value.indexOf("=");
  if (at < 1) throw new InvalidArgumentError("expected key=value");
  return { ...previous, [value.slice(0, at)]: value.slice(at + 1) };
}

/** 20,000 random 64-d vectors with an IVF_PQ index. */
async function build(uri: string, storageOptions: Record<string, string>): Promise<void> {
  const db = await lancedb.connect(uri, { storageOptions, manifestEnabled: false });
  const random = mulberry32(7);
  const rows = Array.from({ length: 20_000 }, (_, id) => ({
    id,
    vector: Array.from({ length: DIM }, random),
  }));
  const table = await db.createTable("t", rows);
  await table.createIndex("vector", {
    config: lancedb.Index.ivfPq({ numPartitions: 32, numSubVectors: 8 }),
  });
  table.close();
}

/** Runs one mode in a new process, so that only its own allocations are measured. */
function child(probe: Probe): Promise<string> {
  return new Promise((resolve, reject) => {
    const worker = fork(fileURLToPath(import.meta.url), [], {
      env: { ...process.env, PROBE: JSON.stringify(probe) },
    });
    worker.once("message", (line) => resolve(String(line)));
    worker.once("error", reject);
    worker.once("exit", (code) => code === 0 || reject(new Error(`probe exited with ${code}`)));
  });
}

async function runProbe({ uri, storageOptions, cycles, mode }: Probe): Promise<string> {
  let collected = 0;
  const sessions = new FinalizationRegistry(() => collected++);
  const query = Array.from({ length: DIM }, (_, i) => (i % 5) / 5);
  const newSession = () => new lancedb.Session(BigInt(256 << 20), BigInt(64 << 20));
  let session = newSession();
  const rss: number[] = [];
  for (let cycle = 0; cycle < cycles; cycle++) {
    if (mode === "renew" && cycle > 0) session = newSession();
    sessions.register(session, cycle);
    const db = await lancedb.connect(uri, { storageOptions, manifestEnabled: false, session });
    const table = await db.openTable("t");
    await table.prewarmIndex("vector_idx");
    await table.query().nearestTo(query).limit(10).toArray();
    table.close();
    db.close();
    await collectGarbage();
    rss.push(process.memoryUsage().rss / 2 ** 20);
  }
  // The first cycles fill lancedb's pools and caches: measure the growth after them.
  const from = Math.min(5, cycles - 1);
  const last = rss.at(-1) ?? 0;
  const perCycle = (last - (rss[from] ?? 0)) / Math.max(1, cycles - 1 - from);
  return `${mode}: ${rss[from]?.toFixed(1)} after cycle ${from + 1}, ${last.toFixed(1)} after ${cycles}: ${perCycle.toFixed(2)} per cycle; JavaScript sessions collected: ${mode === "renew" ? collected : "n/a"}`;
}

if (process.env.PROBE) {
  runProbe(JSON.parse(process.env.PROBE) as Probe)
    .then((line) => process.send?.(line, () => process.exit(0)))
    .catch((err: unknown) => {
      console.error(err);
      process.exit(1);
    });
} else {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
