/**
 * Read-only parser for one Lance manifest file (`_versions/*.manifest`): schema, fragments with
 * live row counts, and index segments with their fragment coverage. Framing follows lance-table
 * io/manifest.rs (checked against files written by Lance 8 and 12, the engines inside
 * @lancedb/lancedb 0.31 and 0.39); the messages are in shared/manifest-format.ts.
 * @module
 */
import { createHash } from "node:crypto";
import {
  block,
  decode,
  formatUuid,
  has,
  IndexSectionType,
  ManifestError,
  ManifestType,
  type RawFragment,
  type RawIndex,
  type RawManifest,
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
  readonly physicalRows: number;
  readonly deletedRows: number;
  readonly liveRows: number;
  /** Data file paths, relative to the dataset's `data/`. */
  readonly files: readonly string[];
  /**
   * What the fragment holds, as a short digest of its data files (paths, columns, format),
   * deletion file and row ids: equal digests mean the same rows with the same values, whatever
   * the version (base paths, which differ in a shallow clone, are left out).
   */
  readonly content: string;
}

/** One `IndexMetadata` entry, i.e. one segment (delta) of the logical index called `name`. */
export interface ManifestSegment {
  readonly uuid: string;
  readonly name: string;
  readonly fieldIds: readonly number[];
  readonly datasetVersion: number;
  /** Raw `fragment_bitmap`; null when empty (unknown coverage, pre-0.8 indices). */
  readonly fragmentIds: readonly number[] | null;
  readonly typeUrl: string;
  /** From `VectorIndexDetails.metric_type` for vector indices; null otherwise or when unknown. */
  readonly metric: IndexMetric | null;
  readonly indexVersion: number | null;
  /** Sum of the segment's index file sizes (`IndexMetadata.files`); null when not recorded. */
  readonly sizeBytes: number | null;
  /** The segment's index files, relative to `_indices/<uuid>/`; empty when not recorded. */
  readonly files: readonly string[];
}

export interface Manifest {
  readonly version: number;
  readonly readerFeatureFlags: bigint;
  readonly stableRowIds: boolean;
  readonly fields: readonly ManifestField[];
  /** Digest of the schema (ids, names, types): a rename or a dropped column changes it. */
  readonly schema: string;
  readonly fragments: readonly ManifestFragment[];
  /** Excludes system indices (names starting with "__lance"). */
  readonly segments: readonly ManifestSegment[];
  /** A "__lance_frag_reuse" index exists. parseManifest refuses such manifests, so this is false on any returned value. */
  readonly hasFragmentReuseIndex: boolean;
}

/** Reader feature flags this reader understands (feature_flags.rs): deletion files, stable row ids,
 * deprecated v2 format, table config, multiple base paths, transaction file disabled. */
const KNOWN_READER_FLAGS = 1n | 2n | 4n | 8n | 16n | 32n;
const FLAG_STABLE_ROW_IDS = 2n;
const MAGIC = "LANC";
const FOOTER_BYTES = 16;
const FRAG_REUSE_INDEX = "__lance_frag_reuse";
const SYSTEM_INDEX_PREFIX = "__lance";
const VECTOR_DETAILS = "lance.index.pb.vectorindexdetails";
const METRICS: readonly IndexMetric[] = ["l2", "cosine", "dot", "hamming"];
const U64_MAX = (1n << 64n) - 1n;

function metricOf(details: RawIndex["index_details"]): IndexMetric | null {
  // Type URLs are compared case-insensitively (table.proto). An empty value cannot be told apart
  // from old writers that stored the metric only in the index file, so it is "unknown", not L2.
  // The part after the last "/" is the full message name, whatever host prefix the URL has.
  if (details?.type_url.split("/").pop()?.toLowerCase() !== VECTOR_DETAILS) return null;
  if (details.value.length === 0) return null;
  const vid = decode<{ metric_type: number }>(
    VectorIndexDetailsType,
    details.value,
    "VectorIndexDetails",
  );
  return METRICS[vid.metric_type] ?? null;
}

function toSegment(raw: RawIndex): ManifestSegment {
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
  return {
    uuid: formatUuid(raw.uuid?.uuid),
    name: raw.name,
    fieldIds: [...raw.fields],
    datasetVersion: u64Number(raw.dataset_version, `index ${raw.name} dataset_version`),
    fragmentIds,
    typeUrl: raw.index_details?.type_url ?? "",
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

function toFragment(raw: RawFragment): ManifestFragment {
  const id = u64Number(raw.id, "fragment id");
  const physicalRows = u64Number(raw.physical_rows, `fragment ${id} physical_rows`);
  // 0 means "unknown" in legacy files; live counts would be wrong, so refuse rather than guess.
  if (physicalRows === 0) throw new ManifestError(`fragment ${id}: physical_rows unknown (legacy)`);
  let deletedRows = 0;
  if (raw.deletion_file) {
    deletedRows = u64Number(raw.deletion_file.num_deleted_rows, `fragment ${id} num_deleted_rows`);
    if (deletedRows === 0)
      throw new ManifestError(`fragment ${id}: deleted row count unknown (legacy)`);
    if (deletedRows > physicalRows) {
      throw new ManifestError(
        `fragment ${id}: ${deletedRows} deleted rows > ${physicalRows} physical`,
      );
    }
  }
  const files = raw.files.map((f) => f.path);
  const liveRows = physicalRows - deletedRows;
  return { id, physicalRows, deletedRows, liveRows, files, content: fragmentContent(raw) };
}

function fragmentContent(raw: RawFragment): string {
  const deletion = raw.deletion_file;
  const external = raw.external_row_ids;
  const parts = [
    String(u64(raw.id)),
    String(u64(raw.physical_rows)),
    ...raw.files.map(
      (f) => `${f.path}:${f.fields.join(",")}:${f.file_major_version}.${f.file_minor_version}`,
    ),
    deletion
      ? `del:${deletion.file_type}:${u64(deletion.read_version)}:${u64(deletion.id)}:${u64(deletion.num_deleted_rows)}`
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

/** Parses the bytes of one whole manifest file. Throws ManifestError on anything it cannot trust. */
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

  const readerFeatureFlags = u64(m.reader_feature_flags);
  const unknown = readerFeatureFlags & ~KNOWN_READER_FLAGS & U64_MAX;
  if (unknown !== 0n) {
    const bits: string[] = [];
    for (let b = 0n; b < 64n; b++) if (unknown & (1n << b)) bits.push(String(1n << b));
    throw new ManifestError(
      `unsupported reader feature flags: ${bits.join(", ")} (flags 0x${readerFeatureFlags.toString(16)})`,
    );
  }

  let rawIndices: RawIndex[] = [];
  // Presence, not truthiness: the index section is normally at offset 0.
  if (has(m, "index_section") && m.index_section != null) {
    const section = block(bytes, u64(m.index_section), footer, "index section");
    rawIndices = decode<{ indices: RawIndex[] }>(IndexSectionType, section, "IndexSection").indices;
  }
  const hasFragmentReuseIndex = rawIndices.some((i) => i.name === FRAG_REUSE_INDEX);
  if (hasFragmentReuseIndex) {
    // Lance remaps every bitmap through this index at load time; the raw bitmaps may name
    // fragments that compaction already replaced.
    throw new ManifestError(
      `dataset has a ${FRAG_REUSE_INDEX} index; raw index fragment bitmaps cannot be trusted`,
    );
  }

  const fields = m.fields.map((f) => ({
    id: f.id,
    parentId: f.parent_id,
    name: f.name,
    logicalType: f.logical_type,
  }));
  return {
    version: u64Number(m.version, "version"),
    readerFeatureFlags,
    stableRowIds: (readerFeatureFlags & FLAG_STABLE_ROW_IDS) !== 0n,
    fields,
    schema: digest(
      fields.map((f) => `${f.id}:${f.parentId}:${f.name}:${f.logicalType}`).join("\n"),
    ),
    fragments: m.fragments.map(toFragment),
    segments: rawIndices.filter((i) => !i.name.startsWith(SYSTEM_INDEX_PREFIX)).map(toSegment),
    hasFragmentReuseIndex,
  };
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

/** Ids of the fragments present in this version. Lance drops fully deleted fragments from the
 * manifest, so this is the set a segment's raw bitmap is intersected with for effective coverage. */
export function liveFragmentIds(m: Manifest): Set<number> {
  return new Set(m.fragments.map((f) => f.id));
}
