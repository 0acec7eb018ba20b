// Read-only parser for one Lance manifest file (`_versions/*.manifest`): schema, fragments with live
// row counts, and index segments with their fragment coverage. Field numbers and framing follow
// Lance's protos/table.proto, protos/index.proto and lance-table io/manifest.rs (checked against
// files written by Lance 8.0.0, the engine inside @lancedb/lancedb 0.31).
import { createHash } from "node:crypto";
import protobuf, { type Long, type Type } from "protobufjs";
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

export class ManifestError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "ManifestError";
  }
}

// Only the fields this reader needs; protobufjs skips the rest. `optional` keeps field presence,
// which matters for index_section (its value is usually 0, the first block in the file).
const PROTO = `
syntax = "proto3";
package lance_fanout.manifest;

message Manifest {
  repeated Field fields = 1;
  repeated DataFragment fragments = 2;
  uint64 version = 3;
  optional uint64 index_section = 6;
  uint64 reader_feature_flags = 9;
}
message Field {
  string name = 2;
  int32 id = 3;
  int32 parent_id = 4;
  string logical_type = 5;
}
message DataFragment {
  uint64 id = 1;
  repeated DataFile files = 2;
  DeletionFile deletion_file = 3;
  uint64 physical_rows = 4;
  bytes inline_row_ids = 5;
  ExternalFile external_row_ids = 6;
}
message DataFile {
  string path = 1;
  repeated int32 fields = 2;
  uint32 file_major_version = 4;
  uint32 file_minor_version = 5;
}
message DeletionFile {
  int32 file_type = 1;
  uint64 read_version = 2;
  uint64 id = 3;
  uint64 num_deleted_rows = 4;
}
message ExternalFile {
  string path = 1;
  uint64 offset = 2;
  uint64 size = 3;
}
message IndexSection {
  repeated IndexMetadata indices = 1;
}
message IndexMetadata {
  UUID uuid = 1;
  repeated int32 fields = 2;
  string name = 3;
  uint64 dataset_version = 4;
  bytes fragment_bitmap = 5;
  Any index_details = 6;
  optional int32 index_version = 7;
  repeated IndexFile files = 10;
}
message IndexFile {
  string path = 1;
  uint64 size_bytes = 2;
}
message UUID {
  bytes uuid = 1;
}
message Any {
  string type_url = 1;
  bytes value = 2;
}
message VectorIndexDetails {
  int32 metric_type = 1;
}
`;

const root = protobuf.parse(PROTO, { keepCase: true }).root;
const ManifestType = root.lookupType("lance_fanout.manifest.Manifest");
const IndexSectionType = root.lookupType("lance_fanout.manifest.IndexSection");
const VectorIndexDetailsType = root.lookupType("lance_fanout.manifest.VectorIndexDetails");

// Shapes of the decoded messages. protobufjs returns uint64 as Long (the `long` package is installed)
// or as number; absent scalars come from the prototype's defaults.
type U64 = number | Long;
interface RawField {
  name: string;
  id: number;
  parent_id: number;
  logical_type: string;
}
interface RawFragment {
  id: U64;
  files: {
    path: string;
    fields: number[];
    file_major_version: number;
    file_minor_version: number;
  }[];
  deletion_file?: { file_type: number; read_version: U64; id: U64; num_deleted_rows: U64 } | null;
  physical_rows: U64;
  inline_row_ids: Uint8Array;
  external_row_ids?: { path: string; offset: U64; size: U64 } | null;
}
interface RawManifest {
  fields: RawField[];
  fragments: RawFragment[];
  version: U64;
  index_section?: U64 | null;
  reader_feature_flags: U64;
}
interface RawIndex {
  uuid?: { uuid: Uint8Array } | null;
  fields: number[];
  name: string;
  dataset_version: U64;
  fragment_bitmap: Uint8Array;
  index_details?: { type_url: string; value: Uint8Array } | null;
  files?: { path: string; size_bytes: U64 }[];
  index_version?: number | null;
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

function u64(v: U64): bigint {
  if (typeof v === "number") return BigInt(v);
  return (BigInt(v.high >>> 0) << 32n) | BigInt(v.low >>> 0);
}

function u64Number(v: U64, what: string): number {
  const b = u64(v);
  if (b > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new ManifestError(`${what} ${b} does not fit in a JS number`);
  }
  return Number(b);
}

function has(obj: object, key: string): boolean {
  return Object.hasOwn(obj, key);
}

/** Reads a u32-length-prefixed protobuf block at `pos`, which must end at or before `end`. */
function block(bytes: Uint8Array, pos: bigint, end: number, what: string): Uint8Array {
  if (pos < 0n || pos + 4n > BigInt(end)) {
    throw new ManifestError(`${what} position ${pos} is outside the file (size ${bytes.length})`);
  }
  const p = Number(pos);
  const len = new DataView(bytes.buffer, bytes.byteOffset + p, 4).getUint32(0, true);
  if (p + 4 + len > end) {
    throw new ManifestError(`${what} at ${p} with length ${len} runs past byte ${end}`);
  }
  return bytes.subarray(p + 4, p + 4 + len);
}

function decode<T>(type: Type, bytes: Uint8Array, what: string): T {
  try {
    return type.decode(bytes) as unknown as T;
  } catch (err) {
    throw new ManifestError(`cannot decode ${what}: ${(err as Error).message}`, { cause: err });
  }
}

function formatUuid(b: Uint8Array | undefined): string {
  if (b?.length !== 16)
    throw new ManifestError(`index uuid must be 16 bytes, got ${b?.length ?? 0}`);
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

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
