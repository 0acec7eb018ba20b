/**
 * One version of a dataset as Lance reads it. lancedb says what it can (the vector indices'
 * types, metrics, segments and coverage counts; the rows of fragments whose manifest entry does
 * not record them); the manifest supplies the rest (each segment's fragments, file sizes, what
 * each fragment holds). {@link describeVersion} puts the two together without I/O.
 * @module
 */
import { LRUCache } from "lru-cache";
import { cachedPromise } from "./cached.js";
import type { DatasetLocation } from "./dataset.js";
import { vectorDimension } from "./index-choice.js";
import type { Table } from "./lance/connect.js";
import { lanceErrorKind } from "./lance/errors.js";
import type { TableCache } from "./lance/tables.js";
import {
  fragmentRows,
  type ListedIndex,
  listedIndices,
  type ScannerIndex,
  scannerIndex,
} from "./lance/version-facts.js";
import type { IndexMetric, Manifest, ManifestField, ManifestSegment, Writer } from "./manifest.js";
import { notFoundError, readManifest } from "./manifest-store.js";
import type { ObjectStore } from "./objects.js";

/** A fragment with its rows as Lance counts them. */
export interface Fragment {
  readonly id: number;
  readonly liveRows: number;
  /** Rows of its data files, deleted ones included (what an index of it holds): for the cost model. */
  readonly physicalRows: number;
  /** What it holds (`ManifestFragment.content`). */
  readonly content: string;
}

/** A vector index of the version: its segments from the manifest, its facts from Lance. */
export interface VersionIndex {
  readonly name: string;
  /** The indexed column. */
  readonly field: ManifestField;
  /** Every segment the manifest lists under the name, with or without live coverage. */
  readonly segments: readonly ManifestSegment[];
  /** lancedb's type name (e.g. `IvfPq`); null where lancedb does not list the index. */
  readonly type: string | null;
  /** Lance's metric; null when Lance names none (it would not search the index). */
  readonly metric: IndexMetric | null;
  /** What Lance reports of it, to check the manifest's reading against; null when it reports nothing. */
  readonly lance: LanceCounts | null;
}

/** Lance's own counts of an index: its segments and, where lancedb lists it, its coverage. */
export interface LanceCounts {
  readonly segments: number;
  /** Live rows of each segment's coverage, summed. */
  readonly indexedRows?: number;
  readonly unindexedRows?: number;
}

export interface DatasetVersion {
  readonly version: number;
  /** Who wrote the version, e.g. `lance 0.21.0`; null when the manifest does not say. */
  readonly writer: Writer | null;
  readonly manifest: Manifest;
  /** Live fragments, in manifest order. */
  readonly fragments: readonly Fragment[];
  readonly indices: readonly VersionIndex[];
}

/** What lancedb tells about a version (see shared/lance/version-facts.ts). */
export interface LanceFacts {
  readonly listed: readonly ListedIndex[];
  /** The scanner's index by column, for columns with a vector index lancedb does not list. */
  readonly scanner: ReadonlyMap<string, ScannerIndex | null>;
  /** Live rows of the fragments whose manifest entry leaves a count to Lance. */
  readonly rows: ReadonlyMap<number, number>;
}

/** Asks lancedb, through `table` (opened at the manifest's version), what the manifest leaves to Lance. */
export async function lanceFacts(table: Table, manifest: Manifest): Promise<LanceFacts> {
  const listed = await listedIndices(table);
  const unlisted = vectorIndexFields(manifest).filter(
    ({ name }) => !listed.some((l) => l.name === name),
  );
  const scanner = new Map<string, ScannerIndex | null>();
  for (const { field } of unlisted) {
    const dimension = vectorDimension(field);
    if (!scanner.has(field.name) && dimension !== undefined) {
      scanner.set(field.name, await scannerIndex(table, field.name, dimension));
    }
  }
  const unknown = manifest.fragments
    .filter((f) => f.physicalRows === null || f.deletedRows === null)
    .map((f) => f.id);
  const rows = unknown.length > 0 ? await fragmentRows(table, unknown) : new Map();
  return { listed, scanner, rows };
}

/** The version's manifest and Lance's facts about it, as one reading. Pure. */
export function describeVersion(manifest: Manifest, facts: LanceFacts): DatasetVersion {
  const fragments = manifest.fragments.map((f) => {
    const liveRows =
      facts.rows.get(f.id) ?? (f.physicalRows ?? Number.NaN) - (f.deletedRows ?? Number.NaN);
    if (!Number.isInteger(liveRows)) {
      throw new TypeError(`fragment ${f.id}: no live row count from the manifest or from Lance`);
    }
    return {
      id: f.id,
      liveRows,
      physicalRows: f.physicalRows ?? liveRows + (f.deletedRows ?? 0),
      content: f.content,
    };
  });
  const indices = vectorIndexFields(manifest).map(({ name, field }) => {
    const listed = facts.listed.find((l) => l.name === name);
    const scanner = facts.scanner.get(field.name);
    const scanned = scanner?.name === name ? scanner : undefined;
    const fromManifest = manifest.segments.find((s) => s.name === name && s.metric)?.metric;
    return {
      name,
      field,
      segments: manifest.segments.filter((s) => s.name === name),
      type: listed?.type ?? null,
      metric: listed?.metric ?? scanned?.metric ?? fromManifest ?? null,
      lance: listed
        ? {
            segments: listed.segments,
            indexedRows: listed.indexedRows,
            unindexedRows: listed.unindexedRows,
          }
        : scanned
          ? { segments: scanned.segments }
          : null,
    };
  });
  return { version: manifest.version, writer: manifest.writer, manifest, fragments, indices };
}

/** Each vector index of the manifest by name, with the column it indexes. */
function vectorIndexFields(manifest: Manifest): { name: string; field: ManifestField }[] {
  const out = new Map<string, ManifestField>();
  for (const segment of manifest.segments) {
    const field = manifest.fields.find((f) => f.id === segment.fieldIds[0]);
    if (segment.vector && field && !out.has(segment.name)) out.set(segment.name, field);
  }
  return [...out].map(([name, field]) => ({ name, field }));
}

/**
 * Readings of dataset versions by (URI, version): a committed version never changes, so a
 * process reads each at most once (bounded).
 */
export class VersionCache {
  readonly #objects: ObjectStore;
  readonly #tables: TableCache;
  readonly #versions: LRUCache<string, Promise<DatasetVersion>>;

  constructor(objects: ObjectStore, tables: TableCache, max = 64) {
    this.#objects = objects;
    this.#tables = tables;
    this.#versions = new LRUCache({ max });
  }

  /** @throws FanoutError `DATASET_NOT_FOUND`, `VERSION_NOT_FOUND`, `UNSUPPORTED_DATASET`. */
  read(location: DatasetLocation, version: number): Promise<DatasetVersion> {
    return cachedPromise(this.#versions, `${location.uri}@${version}`, async () => {
      // Side by side: on a cold start each is a few storage round trips. The table's errors
      // come first, as they tell a missing dataset from a missing version.
      const opening = this.#tables.at(location, version);
      const reading = readManifest(this.#objects, location.uri, version);
      reading.catch(() => {});
      const table = await opening;
      const manifest = await reading;
      const facts = await lanceFacts(table, manifest).catch(async (err: unknown) => {
        // Counting a fragment's rows reads its data files: one may be missing.
        if (lanceErrorKind(err) !== "not-found") throw err;
        throw await notFoundError(err, this.#objects, location.uri, version);
      });
      return describeVersion(manifest, facts);
    });
  }
}
