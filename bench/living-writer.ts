/**
 * The writer of a living dataset: lancedb in the harness process committing to the dataset on
 * the local S3, one commit kind at a time. lancedb has one maintenance call, `optimize()`
 * (compaction, then index optimisation, then pruning old versions when asked), so `compact` and
 * `cleanup` are that call without new rows, and `optimize` is an append followed by it; `reindex`
 * is the other thing writers do to an index that has grown many delta segments: rebuild it.
 * @module
 */
import * as lancedb from "@lancedb/lancedb";
import { type DatasetSpec, indexConfig, moreRows, TABLE } from "./datasets.js";

/**
 * `append`: new rows (an unindexed fragment). `delete`: the oldest `deleteRows` rows still
 * live (one fragment while they lie in one). `optimize`: new rows, then `optimize()` (the tail
 * indexed as a delta segment, unless Lance merges it). `compact`: `optimize()` alone.
 * `cleanup`: `optimize({ cleanupOlderThan: now })`, which also removes every older version.
 * `reindex`: `createIndex(replace)`, one segment over every fragment. Without it the segment
 * count only grew on lancedb 0.39 (1 to 41 over 200 commits: `optimize()` never merged the
 * delta segments, and `compact` left the fragments as they were).
 */
export const COMMIT_KINDS = [
  "append",
  "delete",
  "optimize",
  "compact",
  "cleanup",
  "reindex",
] as const;
export type CommitKind = (typeof COMMIT_KINDS)[number];

export interface WriterOptions {
  readonly appendRows: number;
  readonly deleteRows: number;
}

export interface Commit {
  readonly kind: CommitKind;
  /** Version before the commit and after it (a maintenance call can make several). */
  readonly from: number;
  readonly to: number;
  readonly ms: number;
}

export interface Writer {
  commit(kind: CommitKind): Promise<Commit>;
  version(): Promise<number>;
  close(): void;
}

export async function openWriter(
  dbUri: string,
  storageOptions: Record<string, string>,
  spec: DatasetSpec,
  options: WriterOptions,
): Promise<Writer> {
  // No namespace catalogue: the dataset's database prefix holds only the dataset.
  const db = await lancedb.connect(dbUri, { storageOptions, manifestEnabled: false });
  const table = await db.openTable(TABLE);
  const rows = moreRows(spec);
  let oldest = 0;
  const write: Record<CommitKind, () => Promise<unknown>> = {
    append: () => table.add(rows(options.appendRows)),
    delete: async () => {
      await table.delete(`id >= ${oldest} AND id < ${oldest + options.deleteRows}`);
      oldest += options.deleteRows;
    },
    optimize: async () => {
      await table.add(rows(options.appendRows));
      await table.optimize();
    },
    compact: () => table.optimize(),
    cleanup: () => table.optimize({ cleanupOlderThan: new Date() }),
    reindex: () => table.createIndex("vector", { config: indexConfig(spec), replace: true }),
  };
  return {
    async commit(kind) {
      const from = await table.version();
      const started = performance.now();
      await write[kind]();
      const ms = performance.now() - started;
      return { kind, from, to: await table.version(), ms };
    },
    version: () => table.version(),
    close: () => table.close(),
  };
}

/** Parses `--cycle`: commit kinds, in order, repeated. */
export function parseCycle(kinds: readonly string[]): CommitKind[] {
  const unknown = kinds.filter((k) => !(COMMIT_KINDS as readonly string[]).includes(k));
  if (kinds.length === 0 || unknown.length > 0) {
    throw new Error(
      `--cycle: unknown commit kind(s) ${unknown.join(", ")}; known: ${COMMIT_KINDS.join(", ")}`,
    );
  }
  return kinds as CommitKind[];
}
