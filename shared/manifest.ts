/**
 * Read-only parser for one Lance manifest file (`_versions/*.manifest`): schema, fragments with
 * the row counts they record, and index segments with their fragment coverage, in every form
 * Lance's own reader accepts (lance-table format/manifest.rs, format/fragment.rs,
 * io/manifest.rs), from pylance 0.7 to Lance 12: checked against the corpus of datasets other
 * writers made (test/fixtures/writers). The messages are in shared/manifest-format.ts.
 * @module
 */
import { createHash } from "node:crypto";
import {
  block,
  decode,
  FragmentReuseDetailsType,
  formatUuid,
  has,
  IndexSectionType,
  ManifestError,
  ManifestType,
  type RawFragment,
  type RawFragmentReuse,
  type RawIndex,
  type RawManifest,
  type U64,
  u64,
  u64Number,
  VectorIndexDetailsType,
} from "./manifest-format.js";
import { decodeRoaring } from "./roaring.js";

export type IndexMetric = "l2" | "cosine" | "dot" | "hamming";

export interface ManifestField {
  readonly id: number;
  readonly parentId: number;
  readonly name: string;
  readonly logicalType: string;
}

export interface ManifestFragment {
  readonly id: number;
  /**
   * Rows of the fragment's data files, deleted ones included, as the manifest records them; null
   * where Lance counts them from the data files instead (a manifest without a writer version, or
   * 0: not recorded). Lance's `FileFragment::physical_rows`.
   */
  readonly physicalRows: number | null;
  /** Deleted rows as recorded; null where Lance counts them from the deletion file (0: not recorded). */
  readonly deletedRows: number | null;
  /** Data file paths, relative to the dataset's `data/`. */
  readonly files: readonly string[];
  /**
   * What the fragment holds, as a short digest of its data files (paths, columns, format),
   * deletion file and row ids: equal digests mean the same rows with the same values, whatever
   * the version. Row counts are left out (Lance fills in the ones old writers did not record
   * on its next commit), and so are base paths (a shallow clone adds them).
   */
  readonly content: string;
}

/** One `IndexMetadata` entry, i.e. one segment (delta) of the logical index called `name`. */
export interface ManifestSegment {
  readonly uuid: string;
  readonly name: string;
  readonly fieldIds: readonly number[];
  readonly datasetVersion: number;
  /**
   * The fragments the segment covers (`fragment_bitmap`; by {@link readManifest}, remapped
   * through the fragment reuse index as Lance does on load); null when empty (unknown coverage,
   * indices written before Lance 0.8).
   */
  readonly fragmentIds: readonly number[] | null;
  readonly typeUrl: string;
  /**
   * A vector index, as Lance tells one (`IndexDetails::is_vector`): its details are
   * `VectorIndexDetails`, or it has none (writers before 0.20) and indexes a vector column.
   */
  readonly vector: boolean;
  /**
   * From `VectorIndexDetails.metric_type`; null otherwise, and where the writer left it out
   * (Lance before 7.0: Lance reads it from the index files, and so does lance-fanout, through
   * lancedb: shared/lance/version-facts.ts).
   */
  readonly metric: IndexMetric | null;
  readonly indexVersion: number | null;
  /** Sum of the segment's index file sizes (`IndexMetadata.files`); null when not recorded. */
  readonly sizeBytes: number | null;
  /** The segment's index files, relative to `_indices/<uuid>/`; empty when not recorded. */
  readonly files: readonly string[];
}

/** The Lance library and version that wrote a manifest, e.g. `lance 0.21.0`. */
export type Writer = string;

export interface Manifest {
  readonly version: number;
  /** Who wrote this version; null for writers before Lance 0.8, which did not record it. */
  readonly writer: Writer | null;
  readonly readerFeatureFlags: bigint;
  readonly stableRowIds: boolean;
  readonly fields: readonly ManifestField[];
  /** Digest of the schema (ids, names, types): a rename or a dropped column changes it. */
  readonly schema: string;
  readonly fragments: readonly ManifestFragment[];
  /** Excludes system indices (names starting with "__lance"). */
  readonly segments: readonly ManifestSegment[];
  /** The fragment reuse index (compaction with deferred index remap), if the version has one. */
  readonly fragmentReuse: FragmentReuseRef | null;
}

/** Where a version's fragment reuse index keeps what compaction replaced: inline or in a file. */
export type FragmentReuseRef =
  | { readonly inline: RawFragmentReuse }
  | {
      /** The object's path relative to the dataset root, or its absolute URI (base paths). */
      readonly path: string;
      readonly offset: number;
      readonly size: number;
    };

/** Reader feature flags this reader understands (feature_flags.rs): deletion files, stable row ids,
 * deprecated v2 format, table config, multiple base paths, transaction file disabled. */
const KNOWN_READER_FLAGS = 1n | 2n | 4n | 8n | 16n | 32n;
/** What newer Lance writers mean by the flags this reader does not implement (feature_flags.rs). */
const FEATURES: Readonly<Record<string, string>> = {
  "64": "data overlay files",
  "128": "covering index metadata",
  "256": "mixed data file versions",
  "512": "fragment reuse with stable row ids",
  "1024": "a tagged fragment reuse index",
  "2048": "semantic types",
  "4096": "a fragment tree",
};
const FLAG_STABLE_ROW_IDS = 2n;
const MAGIC = "LANC";
const FOOTER_BYTES = 16;
const FRAG_REUSE_INDEX = "__lance_frag_reuse";
const SYSTEM_INDEX_PREFIX = "__lance";
const VECTOR_DETAILS = "vectorindexdetails";
const METRICS: readonly IndexMetric[] = ["l2", "cosine", "dot", "hamming"];
const U64_MAX = (1n << 64n) - 1n;

/** The last part of a type URL, lowercased: type URLs compare case-insensitively (table.proto). */
function typeName(typeUrl: string): string {
  return typeUrl.split(/[/.]/).pop()?.toLowerCase() ?? "";
}

function metricOf(details: RawIndex["index_details"]): IndexMetric | null {
  // An empty value (writers before Lance 7.0, under lance.table. or lance.index.pb.) names no
  // metric: Lance reads it from the index files. It is "unknown", not L2.
  if (!details || typeName(details.type_url) !== VECTOR_DETAILS) return null;
  if (details.value.length === 0) return null;
  const vid = decode<{ metric_type: number }>(
    VectorIndexDetailsType,
    details.value,
    "VectorIndexDetails",
  );
  return METRICS[vid.metric_type] ?? null;
}

function toSegment(raw: RawIndex, fields: ReadonlyMap<number, ManifestField>): ManifestSegment {
  let fragmentIds: number[] | null = null;
  if (raw.fragment_bitmap.length > 0) {
    try {
      fragmentIds = decodeRoaring(raw.fragment_bitmap);
    } catch (err) {
      throw new ManifestError(`index ${raw.name}: bad fragment_bitmap: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }
  const typeUrl = raw.index_details?.type_url ?? "";
  const keyed = fields.get(raw.fields[0] ?? -1);
  return {
    uuid: formatUuid(raw.uuid?.uuid),
    name: raw.name,
    fieldIds: [...raw.fields],
    datasetVersion: u64Number(raw.dataset_version, `index ${raw.name} dataset_version`),
    fragmentIds,
    typeUrl,
    vector:
      typeName(typeUrl) === VECTOR_DETAILS ||
      (typeUrl === "" && keyed?.logicalType.startsWith("fixed_size_list:") === true),
    metric: metricOf(raw.index_details),
    indexVersion: has(raw, "index_version") ? (raw.index_version ?? null) : null,
    sizeBytes: raw.files?.length
      ? raw.files.reduce(
          (sum, f) => sum + u64Number(f.size_bytes, `index ${raw.name} file size`),
          0,
        )
      : null,
    files: raw.files?.map((f) => f.path) ?? [],
  };
}

function toFragment(raw: RawFragment, writer: Writer | null): ManifestFragment {
  const id = u64Number(raw.id, "fragment id");
  // Lance trusts a recorded count only from a writer that records its version: pylance 0.8.0's
  // migration filled physical_rows with live rows (lance test_data/v0.8.0).
  const recorded = u64Number(raw.physical_rows, `fragment ${id} physical_rows`);
  const physicalRows = writer !== null && recorded > 0 ? recorded : null;
  let deletedRows: number | null = 0;
  if (raw.deletion_file) {
    const deleted = u64Number(
      raw.deletion_file.num_deleted_rows,
      `fragment ${id} num_deleted_rows`,
    );
    deletedRows = deleted > 0 ? deleted : null;
  }
  if (physicalRows !== null && deletedRows !== null && deletedRows > physicalRows) {
    throw new ManifestError(
      `fragment ${id}: ${deletedRows} deleted rows > ${physicalRows} physical`,
    );
  }
  const files = raw.files.map((f) => f.path);
  return { id, physicalRows, deletedRows, files, content: fragmentContent(raw) };
}

function fragmentContent(raw: RawFragment): string {
  const deletion = raw.deletion_file;
  const external = raw.external_row_ids;
  const parts = [
    String(u64(raw.id)),
    ...raw.files.map(
      (f) => `${f.path}:${f.fields.join(",")}:${f.file_major_version}.${f.file_minor_version}`,
    ),
    deletion
      ? `del:${deletion.file_type}:${u64(deletion.read_version)}:${u64(deletion.id)}`
      : "del:-",
    external
      ? `rowids:${external.path}:${u64(external.offset)}:${u64(external.size)}`
      : `rowids:${digest(Uint8Array.from(raw.inline_row_ids))}`,
  ];
  return digest(parts.join("\n"));
}

/** A short, collision-safe digest (128 bits of SHA-256). */
export function digest(data: string | Uint8Array): string {
  return createHash("sha256").update(data).digest("hex").slice(0, 32);
}

function writerOf(m: RawManifest): Writer | null {
  const w = m.writer_version;
  if (!w?.library) return null;
  const pre = w.prerelease ? `-${w.prerelease}` : "";
  const build = w.build_metadata ? `+${w.build_metadata}` : "";
  return `${w.library} ${w.version}${pre}${build}`;
}

/**
 * Parses the bytes of one whole manifest file, as recorded: index bitmaps are not yet remapped
 * through a fragment reuse index (see {@link readManifest}). Throws ManifestError on anything
 * it cannot trust.
 */
export function parseManifest(bytes: Uint8Array): Manifest {
  // Footer: i64 manifest position, u16 major, u16 minor, "LANC".
  if (bytes.length < FOOTER_BYTES)
    throw new ManifestError(`manifest too short (${bytes.length} bytes)`);
  const footer = bytes.length - FOOTER_BYTES;
  const magic = new TextDecoder().decode(bytes.subarray(bytes.length - 4));
  if (magic !== MAGIC) throw new ManifestError(`bad manifest magic ${JSON.stringify(magic)}`);
  const pos = new DataView(bytes.buffer, bytes.byteOffset + footer, 8).getBigInt64(0, true);
  const body = block(bytes, pos, footer, "manifest");
  // Lance's own check: the manifest block ends exactly where the footer starts.
  if (Number(pos) + 4 + body.length !== footer) {
    throw new ManifestError(
      `manifest block at ${pos} (${body.length} bytes) does not end at the footer`,
    );
  }
  const m = decode<RawManifest>(ManifestType, body, "Manifest");
  const writer = writerOf(m);
  const readerFeatureFlags = u64(m.reader_feature_flags);
  refuseUnknownFlags(readerFeatureFlags, writer);

  let rawIndices: RawIndex[] = [];
  // Presence, not truthiness: the index section is normally at offset 0.
  if (has(m, "index_section") && m.index_section != null) {
    const section = block(bytes, u64(m.index_section), footer, "index section");
    rawIndices = decode<{ indices: RawIndex[] }>(IndexSectionType, section, "IndexSection").indices;
  }
  const fields = m.fields.map((f) => ({
    id: f.id,
    parentId: f.parent_id,
    name: f.name,
    logicalType: f.logical_type,
  }));
  const byId = new Map(fields.map((f) => [f.id, f]));
  return {
    version: u64Number(m.version, "version"),
    writer,
    readerFeatureFlags,
    stableRowIds: (readerFeatureFlags & FLAG_STABLE_ROW_IDS) !== 0n,
    fields,
    schema: digest(
      fields.map((f) => `${f.id}:${f.parentId}:${f.name}:${f.logicalType}`).join("\n"),
    ),
    fragments: m.fragments.map((f) => toFragment(f, writer)),
    segments: rawIndices
      .filter((i) => !i.name.startsWith(SYSTEM_INDEX_PREFIX))
      .map((i) => toSegment(i, byId)),
    fragmentReuse: fragmentReuseOf(rawIndices, m),
  };
}

function refuseUnknownFlags(flags: bigint, writer: Writer | null): void {
  const unknown = flags & ~KNOWN_READER_FLAGS & U64_MAX;
  if (unknown === 0n) return;
  const bits: string[] = [];
  for (let b = 0n; b < 64n; b++) if (unknown & (1n << b)) bits.push(String(1n << b));
  const named = bits.map((bit) => (FEATURES[bit] ? `${bit} (${FEATURES[bit]})` : bit));
  throw new ManifestError(
    `written by ${writer ?? "an unknown writer"} with reader feature flags lance-fanout does not ` +
      `read: ${named.join(", ")} (flags 0x${flags.toString(16)})`,
  );
}

/** The version's fragment reuse index, where its content is (Lance's `load_frag_reuse_index_details`). */
function fragmentReuseOf(indices: readonly RawIndex[], m: RawManifest): FragmentReuseRef | null {
  const index = indices.find((i) => i.name === FRAG_REUSE_INDEX);
  if (!index) return null;
  const details = index.index_details;
  if (!details?.type_url.toLowerCase().endsWith("fragmentreuseindexdetails")) {
    throw new ManifestError(`${FRAG_REUSE_INDEX} has no fragment reuse details`);
  }
  const decoded = decode<{
    inline?: RawFragmentReuse | null;
    external?: { path: string; offset: U64; size: U64 } | null;
  }>(FragmentReuseDetailsType, details.value, "FragmentReuseIndexDetails");
  if (decoded.inline) return { inline: decoded.inline };
  if (!decoded.external) throw new ManifestError(`${FRAG_REUSE_INDEX} details have no content`);
  const uuid = formatUuid(index.uuid?.uuid);
  return {
    path: `${indexRoot(index, m)}/${uuid}/${decoded.external.path}`,
    offset: u64Number(decoded.external.offset, "fragment reuse offset"),
    size: u64Number(decoded.external.size, "fragment reuse size"),
  };
}

/**
 * Where an index's files live: `_indices` under the dataset root, or under the base path its
 * `base_id` names (a shallow clone's indices stay in the source).
 */
function indexRoot(index: RawIndex, m: RawManifest): string {
  if (index.base_id == null) return "_indices";
  const base = m.base_paths.find((b) => b.id === index.base_id);
  if (!base) throw new ManifestError(`index ${index.name}: unknown base path ${index.base_id}`);
  return base.is_dataset_root ? `${base.path}/_indices` : base.path;
}

/** Candidate manifest paths for `version`, relative to the dataset root: [V2 name, V1 name].
 * Lance tries them in this order. */
export function manifestFileNames(version: number): readonly string[] {
  if (!Number.isSafeInteger(version) || version < 0) {
    throw new RangeError(`invalid dataset version ${version}`);
  }
  const inverted = (U64_MAX - BigInt(version)).toString().padStart(20, "0");
  return [`_versions/${inverted}.manifest`, `_versions/${version}.manifest`];
}

/** The version a `_versions/` file name holds (V1 or V2 naming), or undefined for other files. */
export function versionOfFile(name: string): number | undefined {
  const match = /^(\d+)\.manifest$/.exec(name);
  if (!match?.[1]) return undefined;
  const n = BigInt(match[1]);
  const version = match[1].length === 20 ? U64_MAX - n : n;
  return version <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(version) : undefined;
}

/** Ids of the fragments present in this version. Lance drops fully deleted fragments from the
 * manifest, so this is the set a segment's raw bitmap is intersected with for effective coverage. */
export function liveFragmentIds(m: Manifest): Set<number> {
  return new Set(m.fragments.map((f) => f.id));
}
