/**
 * Connections and caches of lancedb, with what the pinned release needs around them (each
 * shown on that release by test/lancedb-workarounds.test.ts).
 * @module
 */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import * as lancedb from "@lancedb/lancedb";
import type { S3Config } from "../config.js";
import { storageOptions } from "../dataset.js";

export type Table = lancedb.Table;
export type Connection = lancedb.Connection;

export interface ConnectOptions {
  /** Seconds between checks for a newer version; 0 = every call. @default never */
  readonly readConsistencyInterval?: number;
  /** Caches shared by the connection's tables. @default a new lancedb session */
  readonly session?: lancedb.Session;
}

/** Connects to a lancedb database directory with the process's storage options. */
export function connectDatabase(
  dbUri: string,
  kind: "s3" | "local",
  s3: S3Config,
  { readConsistencyInterval, session }: ConnectOptions = {},
): Promise<Connection> {
  return lancedb.connect(dbUri, {
    storageOptions: storageOptions({ kind }, s3),
    ...(readConsistencyInterval === undefined ? {} : { readConsistencyInterval }),
    // In the options: `connect(uri, options, session)` drops its third argument, and the tables
    // would share lancedb's default caches (6 GiB of index, 1 GiB of metadata), which hold a
    // whole index past any memory size.
    ...(session === undefined ? {} : { session }),
  });
}

/** A lancedb cache of these bounds, shared by the tables of the connections given it. */
export function newSession(indexCacheBytes: number, metadataCacheBytes: number): lancedb.Session {
  return new lancedb.Session(
    BigInt(Math.floor(indexCacheBytes)),
    BigInt(Math.floor(metadataCacheBytes)),
  );
}

/**
 * Runs a full garbage collection, then the finalizers it queued. lancedb frees a session (and
 * every cache entry in it) only when the JavaScript handles of the session, its connections and
 * tables are collected, and V8 does not see the native memory behind them: a segment-search,
 * which allocates little JavaScript, would otherwise keep every dropped session's caches. Node
 * exposes `gc` only behind a flag, which can be set at run time.
 */
export async function collectGarbage(): Promise<void> {
  gc ??= exposeGc();
  gc();
  await new Promise(setImmediate);
}

let gc: (() => void) | undefined;

function exposeGc(): () => void {
  setFlagsFromString("--expose-gc");
  return runInNewContext("gc") as () => void;
}
