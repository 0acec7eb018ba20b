/**
 * The Lance manifest's wire format, as much of it as lance-fanout reads: the protobuf messages
 * (field numbers from Lance's protos/table.proto and protos/index.proto), their decoded shapes,
 * and the framing helpers (u32-length-prefixed blocks, u64 values, uuids).
 * @module
 */
import protobuf, { type Long, type Type } from "protobufjs";
import { FanoutError } from "./errors.js";

/**
 * A manifest this reader cannot read (damaged, or a form of it no Lance reader knows):
 * `UNSUPPORTED_DATASET`, a fact about the dataset rather than a failure of the service.
 */
export class ManifestError extends FanoutError {
  override readonly name = "ManifestError";

  constructor(message: string, options?: ErrorOptions) {
    super("UNSUPPORTED_DATASET", message, options);
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
  WriterVersion writer_version = 13;
  repeated BasePath base_paths = 18;
}
message WriterVersion {
  string library = 1;
  string version = 2;
  optional string prerelease = 3;
  optional string build_metadata = 4;
}
message BasePath {
  uint32 id = 1;
  bool is_dataset_root = 3;
  string path = 4;
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
  optional uint32 base_id = 9;
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
message FragmentReuseIndexDetails {
  oneof content {
    FragmentReuseContent inline = 1;
    ExternalFile external = 2;
  }
}
message FragmentReuseContent {
  repeated FragmentReuseVersion versions = 1;
}
message FragmentReuseVersion {
  uint64 dataset_version = 1;
  repeated FragmentReuseGroup groups = 3;
}
message FragmentReuseGroup {
  repeated FragmentDigest old_fragments = 2;
  repeated FragmentDigest new_fragments = 3;
}
message FragmentDigest {
  uint64 id = 1;
}
`;

const root = protobuf.parse(PROTO, { keepCase: true }).root;
export const ManifestType = root.lookupType("lance_fanout.manifest.Manifest");
export const IndexSectionType = root.lookupType("lance_fanout.manifest.IndexSection");
export const VectorIndexDetailsType = root.lookupType("lance_fanout.manifest.VectorIndexDetails");
export const FragmentReuseDetailsType = root.lookupType(
  "lance_fanout.manifest.FragmentReuseIndexDetails",
);
export const FragmentReuseContentType = root.lookupType(
  "lance_fanout.manifest.FragmentReuseContent",
);

// Shapes of the decoded messages. protobufjs returns uint64 as Long (the `long` package is installed)
// or as number; absent scalars come from the prototype's defaults.
export type U64 = number | Long;
export interface RawField {
  name: string;
  id: number;
  parent_id: number;
  logical_type: string;
}
export interface RawFragment {
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
export interface RawManifest {
  fields: RawField[];
  fragments: RawFragment[];
  version: U64;
  index_section?: U64 | null;
  reader_feature_flags: U64;
  writer_version?: {
    library: string;
    version: string;
    prerelease?: string | null;
    build_metadata?: string | null;
  } | null;
  base_paths: { id: number; is_dataset_root: boolean; path: string }[];
}
export interface RawIndex {
  uuid?: { uuid: Uint8Array } | null;
  fields: number[];
  name: string;
  dataset_version: U64;
  fragment_bitmap: Uint8Array;
  index_details?: { type_url: string; value: Uint8Array } | null;
  files?: { path: string; size_bytes: U64 }[];
  index_version?: number | null;
  base_id?: number | null;
}
/** Lance's fragment reuse index content: per compaction, which fragments replaced which. */
export interface RawFragmentReuse {
  versions: {
    dataset_version: U64;
    groups: { old_fragments: { id: U64 }[]; new_fragments: { id: U64 }[] }[];
  }[];
}

export function u64(v: U64): bigint {
  if (typeof v === "number") return BigInt(v);
  return (BigInt(v.high >>> 0) << 32n) | BigInt(v.low >>> 0);
}

export function u64Number(v: U64, what: string): number {
  const b = u64(v);
  if (b > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new ManifestError(`${what} ${b} does not fit in a JS number`);
  }
  return Number(b);
}

export function has(obj: object, key: string): boolean {
  return Object.hasOwn(obj, key);
}

/** Reads a u32-length-prefixed protobuf block at `pos`, which must end at or before `end`. */
export function block(bytes: Uint8Array, pos: bigint, end: number, what: string): Uint8Array {
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

export function decode<T>(type: Type, bytes: Uint8Array, what: string): T {
  try {
    return type.decode(bytes) as unknown as T;
  } catch (err) {
    throw new ManifestError(`cannot decode ${what}: ${(err as Error).message}`, { cause: err });
  }
}

export function formatUuid(b: Uint8Array | undefined): string {
  if (b?.length !== 16)
    throw new ManifestError(`index uuid must be 16 bytes, got ${b?.length ?? 0}`);
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
