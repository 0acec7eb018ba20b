/**
 * Shallow clones through lancedb, around what the pinned release does with them (each shown on
 * that release by test/lancedb-workarounds.test.ts).
 * @module
 */
import type { Connection, Table } from "./connect.js";
import { lanceErrorKind } from "./errors.js";

/**
 * Shallow-clones `version` of `sourceUri` as `name` in the connection's database and opens it.
 * Another process may have created it first, or (S3) lancedb re-opens the fresh clone without
 * the connection's storage options and throws although the clone is there: then it is opened
 * as usual. The clone is always opened through the connection: `cloneTable` answers a handle
 * outside the connection's session, whose caches of its own would hold the whole index past
 * the configured bounds.
 */
export async function shallowClone(
  connection: Connection,
  name: string,
  sourceUri: string,
  version: number,
): Promise<Table> {
  try {
    const cloned = await connection.cloneTable(name, sourceUri, {
      sourceVersion: version,
      isShallow: true,
    });
    cloned.close();
  } catch (err) {
    const table = await openIfExists(connection, name);
    if (table) return table;
    throw err;
  }
  return connection.openTable(name);
}

export async function openIfExists(
  connection: Connection,
  name: string,
): Promise<Table | undefined> {
  try {
    return await connection.openTable(name);
  } catch (err) {
    if (lanceErrorKind(err) === "not-found") return undefined;
    throw err;
  }
}

/** The version a clone was made as: its oldest (a shallow clone keeps its source's number). */
export async function firstVersion(table: Table): Promise<number> {
  const versions = (await table.listVersions()).map((v) => v.version);
  return Math.min(...versions);
}
