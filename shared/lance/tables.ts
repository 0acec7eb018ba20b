/**
 * Opens Lance tables through lancedb, read-only, with per-process caches: one handle per dataset
 * that follows the latest version, and one handle per pinned (dataset, version).
 * @module
 */
import type * as lancedb from "@lancedb/lancedb";
import { type Table as ArrowTable, DataType, type Schema } from "apache-arrow";
import { LRUCache } from "lru-cache";
import { cachedPromise } from "../cached.js";
import type { S3Config } from "../config.js";
import type { DatasetLocation } from "../dataset.js";
import { FanoutError } from "../errors.js";
import { unsupportedError } from "../manifest-store.js";
import type { ObjectStore } from "../objects.js";
import { type Connection, connectDatabase, newSession, type Table } from "./connect.js";
import { lanceErrorKind, refusesTake } from "./errors.js";

/** The planner's and the merge's tables read manifests and rows, never an index. */
const INDEX_CACHE_BYTES = 64 * 1024 * 1024;

export class TableCache {
  readonly #s3: S3Config;
  readonly #objects: ObjectStore;
  readonly #session: lancedb.Session;
  readonly #connections = new Map<string, Promise<Connection>>();
  readonly #pinned: LRUCache<string, Promise<Table>>;
  readonly #latest: LRUCache<string, Promise<Table>>;

  /**
   * @param objects reads a manifest to say who wrote a dataset lancedb cannot open.
   * @param metadataCacheBytes bound of lancedb's metadata cache for these tables.
   */
  constructor(s3: S3Config, objects: ObjectStore, metadataCacheBytes: number, maxPinned = 32) {
    this.#s3 = s3;
    this.#objects = objects;
    this.#session = newSession(INDEX_CACHE_BYTES, metadataCacheBytes);
    const dispose = (table: Promise<Table>) => void table.then((t) => t.close()).catch(() => {});
    this.#latest = new LRUCache({ max: maxPinned, dispose });
    this.#pinned = new LRUCache({ max: maxPinned, dispose });
  }

  /** The dataset's current version, read from storage now (no cached notion of "latest"). */
  async latestVersion(location: DatasetLocation): Promise<number> {
    return (await this.#latestHandle(location)).version();
  }

  /** Every version the dataset still has, with its commit time. */
  async versions(location: DatasetLocation): Promise<{ version: number; timestamp: Date }[]> {
    const versions = await (await this.#latestHandle(location)).listVersions();
    return versions.map((v) => ({ version: v.version, timestamp: new Date(v.timestamp) }));
  }

  #latestHandle(location: DatasetLocation): Promise<Table> {
    // One handle per dataset: its connection's strong consistency re-checks the newest version
    // on every call, so the table is not opened again for each query.
    return cachedPromise(this.#latest, location.uri, () => this.#open(location));
  }

  /**
   * A read-only handle pinned to `version`, shared by all queries of this process.
   * @throws FanoutError `DATASET_NOT_FOUND` or `VERSION_NOT_FOUND`.
   */
  at(location: DatasetLocation, version: number): Promise<Table> {
    const key = `${location.uri}@${version}`;
    return cachedPromise(this.#pinned, key, () => this.#openAt(location, version));
  }

  /**
   * The dataset's Arrow schema at `version`, from the pinned handle the search used (no new
   * open while it is cached). Built by lancedb's apache-arrow instance, not necessarily the
   * caller's (see shared/arrow-fields.ts).
   */
  async schemaAt(location: DatasetLocation, version: number): Promise<Schema> {
    return (await this.at(location, version)).schema();
  }

  async #openAt(location: DatasetLocation, version: number): Promise<Table> {
    const table = await this.#open(location);
    try {
      await table.checkout(version);
      return table;
    } catch (err) {
      table.close();
      const kind = lanceErrorKind(err);
      if (kind === "unsupported") {
        throw await unsupportedError(err, this.#objects, location.uri, version);
      }
      // With list permission limited to the dataset prefix (least privilege), S3 answers a
      // missing manifest with 403 rather than 404; the dataset itself opened fine.
      if (kind !== "other") {
        const message = `version ${version} of ${location.uri} not found`;
        throw new FanoutError("VERSION_NOT_FOUND", message, { cause: err });
      }
      throw err;
    }
  }

  async #open(location: DatasetLocation): Promise<Table> {
    try {
      // Connecting lists the database: a bucket that does not exist fails here.
      const connection = await this.#connection(location);
      return await connection.openTable(location.tableName);
    } catch (err) {
      const kind = lanceErrorKind(err);
      if (kind === "unsupported") throw await unsupportedError(err, this.#objects, location.uri);
      if (kind === "not-found") {
        throw new FanoutError("DATASET_NOT_FOUND", `dataset ${location.uri} not found`, {
          cause: err,
        });
      }
      throw err;
    }
  }

  #connection(location: DatasetLocation): Promise<Connection> {
    // Strong consistency: every open sees the newest committed version.
    return cachedPromise(this.#connections, location.dbUri, () =>
      connectDatabase(location.dbUri, location.kind, this.#s3, {
        readConsistencyInterval: 0,
        session: this.#session,
      }),
    );
  }
}

/**
 * Offset of each fragment's first live row, in Lance's take order (fragments as the manifest
 * lists them): where {@link readFooters} reads.
 */
export function firstRowsOf(fragments: readonly { readonly liveRows: number }[]): number[] {
  let offset = 0;
  return fragments.map(({ liveRows }) => {
    const start = offset;
    offset += liveRows;
    return start;
  });
}

/**
 * Takes the row at each of `firstRows` (one per fragment), vector columns only: Lance then
 * holds each data file's footer (and deletion file) in its metadata cache, and a later read of
 * the fragment (refine, a flat scan) goes straight to its rows.
 */
export async function readFooters(table: Table, firstRows: readonly number[]): Promise<void> {
  const vectors = (await table.schema()).fields
    .filter((f) => DataType.isFixedSizeList(f.type))
    .map((f) => f.name);
  if (vectors.length === 0 || firstRows.length === 0) return;
  await table
    .takeOffsets([...firstRows])
    .select(vectors)
    .toArrow();
}

/**
 * The rows of `rowIds` with `columns` and `_rowid`, in Lance's order (key them by `_rowid`).
 * Where Lance cannot take rows from a dataset (legacy data files, unrecorded row counts: see
 * {@link refusesTake}), a flat vector search restricted to those row ids reads them instead.
 */
export async function takeRows(
  table: Table,
  rowIds: readonly bigint[],
  columns: readonly string[],
): Promise<ArrowTable> {
  try {
    return await table
      .takeRowIds([...rowIds])
      .withRowId()
      .select([...columns])
      .toArrow();
  } catch (err) {
    if (!refusesTake(err)) throw err;
  }
  const vector = (await table.schema()).fields.find((f) => DataType.isFixedSizeList(f.type));
  if (!vector) throw new FanoutError("INTERNAL", "no vector column to read rows through");
  return table
    .vectorSearch(new Float32Array((vector.type as { listSize: number }).listSize))
    .column(vector.name)
    .bypassVectorIndex()
    .where(`_rowid IN (${rowIds.join(", ")})`)
    .withRowId()
    .select([...columns, "_distance"])
    .limit(rowIds.length)
    .toArrow();
}
