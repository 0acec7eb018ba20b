import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { type Connection, connect, Index, type Table } from "@lancedb/lancedb";
import protobuf from "protobufjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addSegment, settleIndex } from "../local/index-segments.js";
import { remapFragments, remapSegments } from "../shared/fragment-reuse.js";
import {
  liveFragmentIds,
  type Manifest,
  type ManifestFragment,
  manifestFileNames,
  parseManifest,
} from "../shared/manifest.js";
import { ManifestError, type RawFragmentReuse } from "../shared/manifest-format.js";
import { decodeRoaring } from "../shared/roaring.js";

// Opt in to Lance's future default; silences a warning printed by every indexStats() call.
process.env.LANCE_INCLUDE_VECTOR_CENTROIDS ??= "false";

// ---------------------------------------------------------------------------------------------
// Roaring: a small encoder written straight from RoaringFormatSpec, so expected bytes are built
// independently of the decoder under test.

type Container =
  | { key: number; kind: "array" | "bitmap"; lows: number[] }
  | { key: number; kind: "run"; runs: [start: number, length: number][] };

class Bytes {
  readonly parts: number[] = [];
  u16(v: number): this {
    this.parts.push(v & 0xff, (v >>> 8) & 0xff);
    return this;
  }
  u32(v: number): this {
    return this.u16(v & 0xffff).u16(v >>> 16);
  }
  raw(b: Iterable<number>): this {
    this.parts.push(...b);
    return this;
  }
  get length(): number {
    return this.parts.length;
  }
  build(): Uint8Array {
    return Uint8Array.from(this.parts);
  }
}

function cardinality(c: Container): number {
  return c.kind === "run" ? c.runs.reduce((s, [, len]) => s + len, 0) : c.lows.length;
}

function containerBody(c: Container): number[] {
  const b = new Bytes();
  if (c.kind === "run") {
    b.u16(c.runs.length);
    for (const [start, len] of c.runs) b.u16(start).u16(len - 1);
  } else if (c.kind === "array") {
    for (const v of c.lows) b.u16(v);
  } else {
    const bits = new Uint8Array(8192);
    for (const v of c.lows) bits[v >> 3] = (bits[v >> 3] as number) | (1 << (v & 7));
    b.raw(bits);
  }
  return b.parts;
}

/** Serializes per spec. `offsets` overrides whether the offset header is written (to build bad input). */
function encodeRoaring(containers: Container[], offsets?: boolean): Uint8Array {
  const hasRuns = containers.some((c) => c.kind === "run");
  const n = containers.length;
  const out = new Bytes();
  if (hasRuns) {
    out.u32(12347 | ((n - 1) << 16));
    const flags = new Uint8Array(Math.ceil(n / 8));
    containers.forEach((c, i) => {
      if (c.kind === "run") flags[i >> 3] = (flags[i >> 3] as number) | (1 << (i & 7));
    });
    out.raw(flags);
  } else {
    out.u32(12346).u32(n);
  }
  for (const c of containers) out.u16(c.key).u16(cardinality(c) - 1);
  const bodies = containers.map(containerBody);
  if (offsets ?? (!hasRuns || n >= 4)) {
    let at = out.length + 4 * n;
    for (const body of bodies) {
      out.u32(at);
      at += body.length;
    }
  }
  for (const body of bodies) out.raw(body);
  return out.build();
}

const range = (from: number, to: number, step = 1): number[] => {
  const r: number[] = [];
  for (let v = from; v < to; v += step) r.push(v);
  return r;
};

describe("decodeRoaring", () => {
  it("decodes the 18-byte bitmap {3} written by Lance (hand-written bytes)", () => {
    const bytes = Uint8Array.from([0x3a, 0x30, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 3, 0]);
    expect(decodeRoaring(bytes)).toEqual([3]);
    expect(encodeRoaring([{ key: 0, kind: "array", lows: [3] }])).toEqual(bytes);
  });

  it("returns [] for empty input and for a bitmap with no containers", () => {
    expect(decodeRoaring(new Uint8Array())).toEqual([]);
    expect(decodeRoaring(encodeRoaring([]))).toEqual([]);
  });

  it("decodes array containers across several keys, including keys >= 0x8000", () => {
    const bytes = encodeRoaring([
      { key: 0, kind: "array", lows: [0, 7, 65535] },
      { key: 2, kind: "array", lows: [1] },
      { key: 0x8000, kind: "array", lows: [1, 2] },
    ]);
    expect(decodeRoaring(bytes)).toEqual([0, 7, 65535, 2 * 65536 + 1, 2 ** 31 + 1, 2 ** 31 + 2]);
  });

  it("decodes a bitmap container (cardinality > 4096)", () => {
    const lows = range(0, 60000, 10); // 6000 values
    const bytes = encodeRoaring([
      { key: 1, kind: "bitmap", lows },
      { key: 3, kind: "array", lows: [5] },
    ]);
    expect(bytes.length).toBe(8 + 8 + 8 + 8192 + 2);
    expect(decodeRoaring(bytes)).toEqual([...lows.map((v) => 65536 + v), 3 * 65536 + 5]);
  });

  it("decodes run containers with fewer than 4 containers (no offset header)", () => {
    const bytes = encodeRoaring([
      {
        key: 0,
        kind: "run",
        runs: [
          [0, 3],
          [10, 2],
        ],
      },
      { key: 1, kind: "array", lows: [4] },
    ]);
    // cookie(4) + flags(1) + descriptive(8) + run(2+8) + array(2)
    expect(bytes.length).toBe(25);
    expect(decodeRoaring(bytes)).toEqual([0, 1, 2, 10, 11, 65536 + 4]);
    // With an (illegal here) offset header the decoder must not read it as container data.
    expect(() =>
      decodeRoaring(encodeRoaring([{ key: 0, kind: "run", runs: [[0, 3]] }], true)),
    ).toThrow(Error);
  });

  it("decodes run containers with 4 or more containers (offset header present)", () => {
    const containers: Container[] = [
      { key: 0, kind: "run", runs: [[0, 5]] },
      { key: 1, kind: "array", lows: [9] },
      { key: 2, kind: "run", runs: [[65530, 6]] },
      { key: 3, kind: "array", lows: [1, 2] },
      { key: 4, kind: "bitmap", lows: range(0, 5000) },
      { key: 9, kind: "run", runs: [[0, 65536]] },
    ];
    const expected = [
      ...range(0, 5),
      65536 + 9,
      ...range(2 * 65536 + 65530, 3 * 65536),
      3 * 65536 + 1,
      3 * 65536 + 2,
      ...range(4 * 65536, 4 * 65536 + 5000),
      ...range(9 * 65536, 10 * 65536),
    ];
    expect(decodeRoaring(encodeRoaring(containers))).toEqual(expected);
    // Without the offset header the layout is wrong for n >= 4.
    expect(() => decodeRoaring(encodeRoaring(containers, false))).toThrow(Error);
  });

  it("applies the offset-header threshold exactly at 4 containers when runs are present", () => {
    for (let n = 1; n <= 5; n++) {
      const containers: Container[] = range(0, n).map((key) =>
        key === 0 ? { key, kind: "run", runs: [[1, 4]] } : { key, kind: "array", lows: [key] },
      );
      const expected = [1, 2, 3, 4, ...range(1, n).map((k) => k * 65536 + k)];
      expect(decodeRoaring(encodeRoaring(containers)), `n=${n}`).toEqual(expected);
      expect(() => decodeRoaring(encodeRoaring(containers, n < 4)), `n=${n}`).toThrow(Error);
    }
  });

  it("handles more than 8 containers (multi-byte run-flag bitset)", () => {
    const containers: Container[] = range(0, 10).map((key) =>
      key === 9 ? { key, kind: "run", runs: [[100, 3]] } : { key, kind: "array", lows: [key] },
    );
    const bytes = encodeRoaring(containers);
    expect(bytes[4]).toBe(0); // containers 0-7 are not runs
    expect(bytes[5]).toBe(0b10); // container 9 is
    expect(decodeRoaring(bytes)).toEqual([
      ...range(0, 9).map((k) => k * 65536 + k),
      9 * 65536 + 100,
      9 * 65536 + 101,
      9 * 65536 + 102,
    ]);
  });

  it("rejects malformed input", () => {
    const good = encodeRoaring([
      { key: 0, kind: "array", lows: [1, 2, 3] },
      { key: 5, kind: "run", runs: [[7, 2]] },
    ]);
    expect(decodeRoaring(good)).toEqual([1, 2, 3, 5 * 65536 + 7, 5 * 65536 + 8]);
    for (let cut = 1; cut < good.length; cut++) {
      expect(() => decodeRoaring(good.subarray(0, cut)), `prefix ${cut}`).toThrow(/truncated/);
    }
    expect(() => decodeRoaring(Uint8Array.from([...good, 0]))).toThrow(/trailing/);
    const badCookie = good.slice();
    badCookie[0] = 0x3c;
    expect(() => decodeRoaring(badCookie)).toThrow(/cookie/);
    expect(() => decodeRoaring(new Bytes().u32(12346).u32(0).u32(0).build())).toThrow(/trailing/);
    // Header cardinality that disagrees with the run container.
    const badCard = good.slice();
    badCard[9 + 2] = 5; // second container's cardinality-1: 2 values claimed as 6
    expect(() => decodeRoaring(badCard)).toThrow(/header says 6/);
    // Unsorted keys.
    const unsorted = encodeRoaring([
      { key: 2, kind: "array", lows: [1] },
      { key: 1, kind: "array", lows: [1] },
    ]);
    expect(() => decodeRoaring(unsorted)).toThrow(/increasing/);
    // Huge container count with a tiny buffer: fails fast instead of allocating.
    expect(() => decodeRoaring(new Bytes().u32(12346).u32(0xffffffff).build())).toThrow(
      /truncated/,
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Manifest framing helpers (independent of shared/manifest.ts).

const FOOTER = 16;

function manifestBlock(bytes: Uint8Array): { pos: number; len: number } {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const pos = Number(view.getBigInt64(bytes.length - FOOTER, true));
  return { pos, len: view.getUint32(pos, true) };
}

function u32le(v: number): number[] {
  return new Bytes().u32(v).parts;
}

function footer(manifestPos: number): number[] {
  const f = new Uint8Array(FOOTER);
  const view = new DataView(f.buffer);
  view.setBigInt64(0, BigInt(manifestPos), true);
  view.setUint16(8, 0, true);
  view.setUint16(10, 2, true);
  f.set(new TextEncoder().encode("LANC"), 12);
  return [...f];
}

/** Total size of the files under `dir`. */
function directoryBytes(dir: string): number {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .reduce((sum, e) => sum + statSync(path.join(e.parentPath, e.name)).size, 0);
}

/** Appends protobuf bytes to the manifest message of a real file (last value wins for scalars). */
function patchManifest(bytes: Uint8Array, extra: Uint8Array): Uint8Array {
  const { pos, len } = manifestBlock(bytes);
  expect(pos + 4 + len).toBe(bytes.length - FOOTER);
  return Uint8Array.from([
    ...bytes.subarray(0, pos),
    ...u32le(len + extra.length),
    ...bytes.subarray(pos + 4, pos + 4 + len),
    ...extra,
    ...footer(pos),
  ]);
}

// Writer-side schema, written separately from the reader's, from the note's field tables.
const writerRoot = protobuf.parse(
  `syntax = "proto3";
  package w;
  message Manifest {
    repeated Field fields = 1; repeated DataFragment fragments = 2; uint64 version = 3;
    optional uint64 index_section = 6; uint64 reader_feature_flags = 9; uint64 writer_feature_flags = 10;
    WriterVersion writer_version = 13; repeated BasePath base_paths = 18;
  }
  message WriterVersion { string library = 1; string version = 2; optional string prerelease = 3; }
  message BasePath { uint32 id = 1; bool is_dataset_root = 3; string path = 4; }
  message Field { int32 type = 1; string name = 2; int32 id = 3; int32 parent_id = 4; string logical_type = 5; }
  message DataFragment { uint64 id = 1; DeletionFile deletion_file = 3; uint64 physical_rows = 4; }
  message DeletionFile { int32 file_type = 1; uint64 read_version = 2; uint64 id = 3; uint64 num_deleted_rows = 4; }
  message IndexSection { repeated IndexMetadata indices = 1; }
  message IndexMetadata {
    UUID uuid = 1; repeated int32 fields = 2; string name = 3; uint64 dataset_version = 4;
    bytes fragment_bitmap = 5; Any index_details = 6; optional int32 index_version = 7; optional uint64 created_at = 8;
    optional uint32 base_id = 9; repeated IndexFile files = 10;
  }
  message FragmentReuseIndexDetails { oneof content { Content inline = 1; ExternalFile external = 2; } }
  message ExternalFile { string path = 1; uint64 offset = 2; uint64 size = 3; }
  message Content { repeated ReuseVersion versions = 1; }
  message ReuseVersion { uint64 dataset_version = 1; repeated Group groups = 3; }
  message Group { bytes changed_row_addrs = 1; repeated Digest old_fragments = 2; repeated Digest new_fragments = 3; }
  message Digest { uint64 id = 1; uint64 physical_rows = 2; uint64 num_deleted_rows = 3; }
  message IndexFile { string path = 1; uint64 size_bytes = 2; }
  message UUID { bytes uuid = 1; }
  message Any { string type_url = 1; bytes value = 2; }
  message VectorIndexDetails { int32 metric_type = 1; uint64 target_partition_size = 2; }`,
  { keepCase: true },
).root;
const W = (name: string) => writerRoot.lookupType(`w.${name}`);

function encode(type: string, obj: Record<string, unknown>): Uint8Array {
  const t = W(type);
  // fromObject drops unknown keys silently; catch typos in the fixtures instead. (verify() is not
  // used because it rejects decimal strings for uint64 values beyond 2^53.)
  for (const key of Object.keys(obj))
    if (!t.fields[key]) throw new Error(`${type} has no field ${key}`);
  return t.encode(t.fromObject(obj)).finish();
}

/** Frames a synthetic manifest file: [IndexSection at 0 when given] [Manifest] [footer]. */
function frame(manifest: Record<string, unknown>, indices?: Record<string, unknown>[]): Uint8Array {
  const out: number[] = [];
  const m = { ...manifest };
  if (indices) {
    const section = encode("IndexSection", { indices });
    out.push(...u32le(section.length), ...section);
    m.index_section = 0;
  }
  const body = encode("Manifest", m);
  const pos = out.length;
  out.push(...u32le(body.length), ...body, ...footer(pos));
  return Uint8Array.from(out);
}

const anyDigest = expect.stringMatching(/^[0-9a-f]{32}$/);
const UUID_BYTES = Uint8Array.from(range(0, 16).map((i) => i * 17));
const UUID_TEXT = "00112233-4455-6677-8899-aabbccddeeff";
const vectorDetails = (metric: number) => ({
  type_url: "/lance.index.pb.VectorIndexDetails",
  value: encode("VectorIndexDetails", { metric_type: metric, target_partition_size: 8192 }),
});
const synthIndex = (over: Record<string, unknown> = {}) => ({
  uuid: { uuid: UUID_BYTES },
  fields: [1],
  name: "vector_idx",
  dataset_version: 3,
  fragment_bitmap: encodeRoaring([{ key: 0, kind: "array", lows: [0, 2] }]),
  index_details: vectorDetails(0),
  index_version: 1,
  ...over,
});
const synthManifest = (over: Record<string, unknown> = {}) => ({
  fields: [
    { name: "id", id: 0, parent_id: -1, logical_type: "int32" },
    { name: "vector", id: 1, parent_id: -1, logical_type: "fixed_size_list:float:16" },
  ],
  fragments: [
    { id: 0, physical_rows: 100 },
    {
      id: 2,
      physical_rows: 50,
      deletion_file: { file_type: 1, id: "18000000000000000000", num_deleted_rows: 7 },
    },
  ],
  version: 5,
  writer_version: { library: "lance", version: "12.0.0" },
  ...over,
});

const fragmentReuseDetails = (content: Record<string, unknown>) => ({
  type_url: "/lance.table.FragmentReuseIndexDetails",
  value: encode("FragmentReuseIndexDetails", content),
});

function expectManifestError(fn: () => unknown, message: RegExp): void {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ManifestError);
    expect((err as Error).name).toBe("ManifestError");
    expect((err as Error).message).toMatch(message);
    return;
  }
  throw new Error("expected a ManifestError");
}

describe("remapFragments (Lance's remap_fragment_bitmap)", () => {
  const group = (old: number[], now: number[]) => ({
    old_fragments: old.map((id) => ({ id })),
    new_fragments: now.map((id) => ({ id })),
  });
  const reuse = (...versions: ReturnType<typeof group>[][]) => ({
    versions: versions.map((groups, i) => ({ dataset_version: i + 2, groups })),
  });

  it("replaces a rewrite group the bitmap covers whole by its new fragments, in order", () => {
    const twice = reuse([group([0, 1], [5])], [group([5, 2], [6, 7])]);
    expect(remapFragments([0, 1, 2, 3], twice)).toEqual([3, 6, 7]);
    expect(remapFragments([3], twice)).toEqual([3]);
  });

  it("drops a straddled group's old fragments and adds nothing (its rows are searched flat)", () => {
    expect(remapFragments([0, 1], reuse([group([1, 2], [3])]))).toEqual([0]);
  });
});

describe("manifestFileNames", () => {
  it("gives the V2 (inverted, 20 digits) name first, then the V1 name", () => {
    expect(manifestFileNames(12)).toEqual([
      "_versions/18446744073709551603.manifest",
      "_versions/12.manifest",
    ]);
    expect(manifestFileNames(1)[0]).toBe("_versions/18446744073709551614.manifest");
    // Exercises BigInt precision: a Number subtraction would round here.
    expect(manifestFileNames(2 ** 53 - 1)[0]).toBe("_versions/18437736874454810624.manifest");
    expect(manifestFileNames(2 ** 53 - 1)[1]).toBe("_versions/9007199254740991.manifest");
  });

  it("rejects invalid versions", () => {
    for (const v of [-1, 1.5, Number.NaN, 2 ** 53])
      expect(() => manifestFileNames(v)).toThrow(RangeError);
  });
});

describe("parseManifest on synthetic files", () => {
  it("decodes fields, fragments and a segment whose index section sits at offset 0", () => {
    const m = parseManifest(frame(synthManifest({ reader_feature_flags: 1 }), [synthIndex()]));
    expect(m.version).toBe(5);
    expect(m.readerFeatureFlags).toBe(1n);
    expect(m.stableRowIds).toBe(false);
    expect(m.fields).toEqual([
      { id: 0, parentId: -1, name: "id", logicalType: "int32" },
      { id: 1, parentId: -1, name: "vector", logicalType: "fixed_size_list:float:16" },
    ]);
    expect(m.writer).toBe("lance 12.0.0");
    expect(m.fragments).toEqual([
      { id: 0, physicalRows: 100, deletedRows: 0, files: [], content: anyDigest },
      { id: 2, physicalRows: 50, deletedRows: 7, files: [], content: anyDigest },
    ]);
    expect(m.segments).toEqual([
      {
        uuid: UUID_TEXT,
        name: "vector_idx",
        fieldIds: [1],
        datasetVersion: 3,
        fragmentIds: [0, 2],
        typeUrl: "/lance.index.pb.VectorIndexDetails",
        vector: true,
        metric: "l2",
        indexVersion: 1,
        sizeBytes: null,
        files: [],
      },
    ]);
    expect(m.fragmentReuse).toBeNull();
    expect([...liveFragmentIds(m)]).toEqual([0, 2]);
  });

  it("lists the segment's index files and sums their sizes (field 10), beyond 2^32", () => {
    const files = [
      { path: "index.idx", size_bytes: 5_000_000_000 },
      { path: "auxiliary.idx", size_bytes: 1234 },
    ];
    const m = parseManifest(frame(synthManifest(), [synthIndex({ files })]));
    expect(m.segments[0]?.sizeBytes).toBe(5_000_001_234);
    expect(m.segments[0]?.files).toEqual(["index.idx", "auxiliary.idx"]);
  });

  it("has no segments when index_section is absent, even though an index block precedes it", () => {
    const withSection = frame(synthManifest(), [synthIndex()]);
    // Same bytes, but the manifest re-encoded without field 6.
    const { pos } = manifestBlock(withSection);
    const body = encode("Manifest", synthManifest());
    const without = Uint8Array.from([
      ...withSection.subarray(0, pos),
      ...u32le(body.length),
      ...body,
      ...footer(pos),
    ]);
    expect(parseManifest(withSection).segments).toHaveLength(1);
    expect(parseManifest(without).segments).toEqual([]);
  });

  it("maps metrics, vector and scalar indices, empty bitmaps and missing index_version", () => {
    const m = parseManifest(
      frame(synthManifest(), [
        synthIndex({ index_details: vectorDetails(1) }),
        synthIndex({ index_details: vectorDetails(2), fragment_bitmap: new Uint8Array() }),
        synthIndex({ index_details: vectorDetails(3), index_version: undefined }),
        synthIndex({
          name: "id_idx",
          fields: [0],
          index_details: { type_url: "/lance.table.BTreeIndexDetails", value: new Uint8Array() },
        }),
        synthIndex({
          index_details: {
            type_url: "/lance.index.pb.VectorIndexDetails",
            value: new Uint8Array(),
          },
        }),
        synthIndex({ index_details: vectorDetails(9) }),
        // No details (writers before 0.20): a vector index where it indexes a vector column.
        synthIndex({ index_details: undefined }),
        synthIndex({ name: "id_idx", fields: [0], index_details: undefined }),
        // Empty details under the old package name (writers 0.20 to 7.0).
        synthIndex({
          index_details: { type_url: "/lance.table.VectorIndexDetails", value: new Uint8Array() },
        }),
      ]),
    );
    expect(m.segments.map((s) => s.metric)).toEqual([
      "cosine",
      "dot",
      "hamming",
      null,
      null,
      null,
      null,
      null,
      null,
    ]);
    expect(m.segments.map((s) => s.vector)).toEqual([
      true,
      true,
      true,
      false,
      true,
      true,
      true,
      false,
      true,
    ]);
    expect(m.segments.map((s) => s.fragmentIds)).toEqual([
      [0, 2],
      null,
      [0, 2],
      [0, 2],
      [0, 2],
      [0, 2],
      [0, 2],
      [0, 2],
      [0, 2],
    ]);
    expect(m.segments.map((s) => s.indexVersion)).toEqual([1, 1, null, 1, 1, 1, 1, 1, 1]);
    expect(m.segments[3]?.typeUrl).toBe("/lance.table.BTreeIndexDetails");
    expect(m.segments[6]?.typeUrl).toBe("");
  });

  it("skips system indices and remaps segments through an inline fragment reuse index", () => {
    const m = parseManifest(
      frame(synthManifest(), [synthIndex(), synthIndex({ name: "__lance_mem_wal", fields: [] })]),
    );
    expect(m.segments.map((s) => s.name)).toEqual(["vector_idx"]);
    // Compaction rewrote fragments 0 and 1 into 3, then 2 into 4; the segment covered 0 and 2.
    const reuse = synthIndex({
      name: "__lance_frag_reuse",
      fields: [],
      index_details: fragmentReuseDetails({
        inline: {
          versions: [
            {
              dataset_version: 6,
              groups: [{ old_fragments: [{ id: 0 }], new_fragments: [{ id: 3 }] }],
            },
            {
              dataset_version: 8,
              groups: [{ old_fragments: [{ id: 2 }], new_fragments: [{ id: 4 }] }],
            },
          ],
        },
      }),
    });
    const raw = parseManifest(frame(synthManifest(), [synthIndex(), reuse]));
    expect(raw.segments.map((s) => s.fragmentIds)).toEqual([[0, 2]]);
    expect(raw.fragmentReuse).not.toBeNull();
    const remapped = remapSegments(raw, (raw.fragmentReuse as { inline: RawFragmentReuse }).inline);
    expect(remapped.segments.map((s) => s.fragmentIds)).toEqual([[3, 4]]);
  });

  it("points at an external fragment reuse file, under the base path its index names", () => {
    const external = (over: Record<string, unknown>) =>
      parseManifest(
        frame(
          synthManifest({
            base_paths: [{ id: 7, is_dataset_root: true, path: "s3://b/src.lance" }],
          }),
          [
            synthIndex({
              name: "__lance_frag_reuse",
              fields: [],
              index_details: fragmentReuseDetails({
                external: { path: "details.binpb", offset: 10, size: 20 },
              }),
              ...over,
            }),
          ],
        ),
      ).fragmentReuse;
    expect(external({})).toEqual({
      path: `_indices/${UUID_TEXT}/details.binpb`,
      offset: 10,
      size: 20,
    });
    expect(external({ base_id: 7 })).toEqual({
      path: `s3://b/src.lance/_indices/${UUID_TEXT}/details.binpb`,
      offset: 10,
      size: 20,
    });
    expectManifestError(() => external({ base_id: 8 }), /unknown base path 8/);
  });

  it("accepts known reader flags and reports stable row ids", () => {
    const m = parseManifest(frame(synthManifest({ reader_feature_flags: 63 })));
    expect(m.readerFeatureFlags).toBe(63n);
    expect(m.stableRowIds).toBe(true);
  });

  it("refuses unknown reader flags, naming the writer, the bits and their features (u64)", () => {
    expectManifestError(
      () => parseManifest(frame(synthManifest({ reader_feature_flags: 64 + 4096 + 1 }))),
      /written by lance 12\.0\.0 .*: 64 \(data overlay files\), 4096 \(a fragment tree\) \(/,
    );
    expectManifestError(
      () => parseManifest(frame(synthManifest({ reader_feature_flags: "9223372036854775809" }))),
      /: 9223372036854775808 \(flags 0x8000000000000001\)/,
    );
  });

  it("leaves to Lance the row counts a writer did not record, as Lance's reader does", () => {
    const counts = (over: Record<string, unknown>) =>
      parseManifest(frame(synthManifest(over))).fragments.map((f) => [
        f.physicalRows,
        f.deletedRows,
      ]);
    // 0 is "not recorded", for physical rows and for a deletion file's count.
    expect(counts({ fragments: [{ id: 1, physical_rows: 0 }] })).toEqual([[null, 0]]);
    expect(counts({ fragments: [{ id: 1, physical_rows: 5, deletion_file: { id: 1 } }] })).toEqual([
      [5, null],
    ]);
    // Without a writer version (pylance 0.8.0's migration) recorded counts are not trusted.
    const legacy = parseManifest(
      frame(
        synthManifest({ writer_version: undefined, fragments: [{ id: 1, physical_rows: 90 }] }),
      ),
    );
    expect(legacy.writer).toBeNull();
    expect(legacy.fragments[0]?.physicalRows).toBeNull();
    const pre = parseManifest(
      frame(
        synthManifest({
          writer_version: { library: "lance", version: "6.0.0", prerelease: "beta.3" },
        }),
      ),
    );
    expect(pre.writer).toBe("lance 6.0.0-beta.3");
  });

  it("refuses bad uuids, bitmaps, impossible row counts and versions too large for a number", () => {
    expectManifestError(
      () =>
        parseManifest(frame(synthManifest(), [synthIndex({ uuid: { uuid: new Uint8Array(4) } })])),
      /uuid/,
    );
    expectManifestError(
      () =>
        parseManifest(
          frame(synthManifest(), [synthIndex({ fragment_bitmap: Uint8Array.from([1, 2, 3, 4]) })]),
        ),
      /fragment_bitmap.*cookie/,
    );
    expectManifestError(
      () =>
        parseManifest(
          frame(
            synthManifest({
              fragments: [{ id: 1, physical_rows: 5, deletion_file: { num_deleted_rows: 6 } }],
            }),
          ),
        ),
      /deleted rows/,
    );
    // A detached version has bit 63 set.
    expectManifestError(
      () => parseManifest(frame(synthManifest({ version: "9223372036854775813" }))),
      /version/,
    );
  });

  it("refuses broken framing", () => {
    const good = frame(synthManifest(), [synthIndex()]);
    expect(parseManifest(good).version).toBe(5);
    const badMagic = good.slice();
    badMagic[good.length - 1] = 0x44;
    expectManifestError(() => parseManifest(badMagic), /magic/);
    expectManifestError(() => parseManifest(good.subarray(0, 10)), /too short/);
    expectManifestError(
      () => parseManifest(good.subarray(good.length - FOOTER)),
      /outside the file/,
    );
    expectManifestError(() => parseManifest(good.subarray(1)), /manifest/);
    // Manifest position pointing at the index section: its length does not end at the footer.
    const wrongPos = Uint8Array.from([...good.subarray(0, good.length - FOOTER), ...footer(0)]);
    expectManifestError(() => parseManifest(wrongPos), /does not end at the footer/);
    // A length prefix that runs into the footer.
    const { pos, len } = manifestBlock(good);
    const longLen = good.slice();
    new DataView(longLen.buffer).setUint32(pos, len + 3, true);
    expectManifestError(() => parseManifest(longLen), /runs past/);
    // Index section pointer beyond the file.
    const badSection = patchManifest(good, Uint8Array.from([0x30, 0xe8, 0x07])); // field 6 = 1000
    expectManifestError(() => parseManifest(badSection), /index section/);
    // Garbage protobuf body of the right length.
    const garbage = Uint8Array.from([...u32le(3), 0x0a, 0xff, 0xff, ...footer(0)]);
    expectManifestError(() => parseManifest(garbage), /cannot decode Manifest/);
  });
});

// ---------------------------------------------------------------------------------------------
// Real datasets written by @lancedb/lancedb.

const DIM = 16;

/** Deterministic rows (mulberry32) so failures reproduce. */
function rowsFrom(start: number, count: number, seed = start + 1) {
  let s = seed >>> 0;
  const rand = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return Array.from({ length: count }, (_, i) => ({
    id: start + i,
    cat: `c${(start + i) % 3}`,
    vector: Array.from({ length: DIM }, rand),
  }));
}

function readManifestFile(tableDir: string, version: number): { name: string; bytes: Uint8Array } {
  for (const name of manifestFileNames(version)) {
    const file = path.join(tableDir, name);
    if (existsSync(file)) return { name, bytes: readFileSync(file) };
  }
  throw new Error(`no manifest for version ${version} under ${tableDir}`);
}

/** Effective coverage as Lance computes it: live fragments in any segment's bitmap; unknown = all. */
function coveredFragments(m: Manifest, indexName: string): Set<number> {
  const live = liveFragmentIds(m);
  const segs = m.segments.filter((s) => s.name === indexName);
  if (segs.some((s) => s.fragmentIds === null)) return live;
  return new Set(segs.flatMap((s) => s.fragmentIds ?? []).filter((id) => live.has(id)));
}

function rowsIn(m: Manifest, ids: Set<number>, inside: boolean): number {
  return m.fragments.filter((f) => ids.has(f.id) === inside).reduce((s, f) => s + liveRows(f), 0);
}

/** Live rows as the manifest records them (lancedb 0.39 records every count). */
function liveRows(f: ManifestFragment): number {
  return (f.physicalRows ?? Number.NaN) - (f.deletedRows ?? Number.NaN);
}

/** Cross-checks a parsed manifest against what lancedb reports for the table's current version. */
async function expectAgreesWithLance(table: Table, m: Manifest): Promise<void> {
  expect(m.version).toBe(await table.version());
  expect(m.fragments.reduce((s, f) => s + liveRows(f), 0)).toBe(await table.countRows());
  expect(m.fragments.length).toBe((await table.stats()).fragmentStats.numFragments);
  const indices = await table.listIndices();
  expect(new Set(m.segments.map((s) => s.name))).toEqual(new Set(indices.map((i) => i.name)));
  for (const idx of indices) {
    const segs = m.segments.filter((s) => s.name === idx.name);
    expect(segs.length, idx.name).toBe(idx.numSegments);
    expect(segs[0]?.uuid, idx.name).toBe(idx.indexUuid);
    expect(segs[0]?.typeUrl, idx.name).toBe(idx.typeUrl);
    expect(segs[0]?.indexVersion, idx.name).toBe(idx.indexVersion);
    const covered = coveredFragments(m, idx.name);
    expect(rowsIn(m, covered, true), idx.name).toBe(idx.numIndexedRows);
    expect(rowsIn(m, covered, false), idx.name).toBe(idx.numUnindexedRows);
    const stats = await table.indexStats(idx.name);
    expect(rowsIn(m, covered, true), idx.name).toBe(stats?.numIndexedRows);
    expect(segs.length, idx.name).toBe(stats?.numIndices);
    for (const s of segs) expect(s.metric ?? undefined, idx.name).toBe(stats?.distanceType);
  }
}

const ivfPq = (distanceType: "l2" | "cosine" = "l2") =>
  Index.ivfPq({ numPartitions: 4, numSubVectors: 4, distanceType });

describe("parseManifest on datasets written by lancedb", () => {
  let dir: string;
  let db: Connection;
  // "plain": default options (V2 names), several segments, deletes, an unindexed fragment and a
  // fragment whose rows were all deleted.
  let plain: Table;
  let beforeFullDelete: number;
  let fullyDeletedFragment: number;
  let stable: Table;
  let v1: Table;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "manifest-test-"));
    db = await connect(dir);

    plain = await db.createTable("plain", rowsFrom(0, 4000));
    await plain.createIndex("vector", { config: ivfPq() });
    // 4,000 rows over 4 partitions: Lance joins them (under 2,048 rows each) before the deltas.
    await settleIndex(plain, 4);
    for (let round = 1; round <= 3; round++) await addSegment(plain, rowsFrom(round * 4000, 4000));
    await plain.delete("id < 200 AND id % 2 = 0");
    await plain.add(rowsFrom(20000, 1000)); // after the last optimize: unindexed
    await plain.add(rowsFrom(30000, 300));
    beforeFullDelete = await plain.version();
    const before = parseManifest(
      readManifestFile(path.join(dir, "plain.lance"), beforeFullDelete).bytes,
    );
    fullyDeletedFragment = before.fragments.at(-1)?.id ?? -1;
    await plain.delete("id >= 30000");

    stable = await db.createTable("stable", rowsFrom(0, 4000), {
      storageOptions: { new_table_enable_stable_row_ids: "true" },
    });
    await stable.createIndex("vector", { config: ivfPq() });
    await stable.add(rowsFrom(4000, 4000));
    await stable.optimize();
    await stable.delete("id % 100 = 1");

    v1 = await db.createTable("v1", rowsFrom(0, 3000), {
      storageOptions: { new_table_enable_v2_manifest_paths: "false" },
    });
    await v1.createIndex("vector", { config: ivfPq("cosine") });
    await v1.createIndex("id", { config: Index.btree() });
    await v1.add(rowsFrom(3000, 500));
  });

  afterAll(async () => {
    plain?.close();
    stable?.close();
    v1?.close();
    db?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("plain: V2 file name, several segments, deletions, unindexed and removed fragments", async () => {
    const version = await plain.version();
    const tableDir = path.join(dir, "plain.lance");
    const { name, bytes } = readManifestFile(tableDir, version);
    expect(name).toMatch(/^_versions\/\d{20}\.manifest$/);
    expect(existsSync(path.join(tableDir, `_versions/${version}.manifest`))).toBe(false);
    const m = parseManifest(bytes);
    await expectAgreesWithLance(plain, m);

    expect(m.stableRowIds).toBe(false);
    expect(m.readerFeatureFlags & 1n).toBe(1n); // deletion files present
    expect(m.fields.map((f) => f.name)).toEqual(["id", "cat", "vector"]);
    expect(m.fields.find((f) => f.name === "vector")?.logicalType).toBe(
      `fixed_size_list:float:${DIM}`,
    );
    const vectorField = m.fields.find((f) => f.name === "vector")?.id;

    const segs = m.segments.filter((s) => s.name === "vector_idx");
    expect(segs).toHaveLength(4);
    for (const s of segs) {
      expect(s.uuid).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      expect(s.fieldIds).toEqual([vectorField]);
      expect(s.metric).toBe("l2");
      expect(s.typeUrl).toBe("/lance.index.pb.VectorIndexDetails");
      expect(s.datasetVersion).toBeGreaterThan(0);
      expect(s.datasetVersion).toBeLessThan(version);
      expect(s.fragmentIds?.length).toBeGreaterThan(0);
      // What a view's prewarm budget counts: the bytes of the segment's directory.
      expect(s.sizeBytes).toBe(directoryBytes(path.join(tableDir, "_indices", s.uuid)));
      expect([...s.files].sort()).toEqual(
        readdirSync(path.join(tableDir, "_indices", s.uuid)).sort(),
      );
    }
    for (const f of m.fragments) {
      expect(f.files.length).toBeGreaterThan(0);
      for (const file of f.files) expect(existsSync(path.join(tableDir, "data", file))).toBe(true);
    }
    expect(new Set(segs.map((s) => s.uuid)).size).toBe(segs.length);

    // 100 even ids below 200 were deleted from an indexed fragment.
    expect(m.fragments.reduce((s, f) => s + (f.deletedRows ?? Number.NaN), 0)).toBe(100);
    const covered = coveredFragments(m, "vector_idx");
    const unindexed = m.fragments.filter((f) => !covered.has(f.id));
    expect(unindexed.map(liveRows)).toEqual([1000]);
    expect(rowsIn(m, covered, true)).toBe(16000 - 100);

    // The 300-row fragment is gone from the manifest once all its rows were deleted.
    expect(fullyDeletedFragment).toBeGreaterThanOrEqual(0);
    expect(liveFragmentIds(m).has(fullyDeletedFragment)).toBe(false);
    const before = parseManifest(readManifestFile(tableDir, beforeFullDelete).bytes);
    const fully = before.fragments.find((f) => f.id === fullyDeletedFragment);
    expect(fully && liveRows(fully)).toBe(300);
  });

  it("plain: every historical version agrees with checkout(version)", async () => {
    const tableDir = path.join(dir, "plain.lance");
    const old = await db.openTable("plain");
    try {
      const latest = await plain.version();
      const segmentCounts: number[] = [];
      for (let v = 1; v <= latest; v++) {
        await old.checkout(v);
        const m = parseManifest(readManifestFile(tableDir, v).bytes);
        await expectAgreesWithLance(old, m);
        segmentCounts.push(m.segments.length);
      }
      expect(segmentCounts[0]).toBe(0); // v1: table created, no index yet
      expect(Math.max(...segmentCounts)).toBe(4);
    } finally {
      old.close();
    }
  });

  it("stable row ids: flag 2 set, counts agree", async () => {
    const m = parseManifest(
      readManifestFile(path.join(dir, "stable.lance"), await stable.version()).bytes,
    );
    expect(m.stableRowIds).toBe(true);
    expect(m.readerFeatureFlags & 2n).toBe(2n);
    expect(m.fragments.reduce((s, f) => s + (f.deletedRows ?? Number.NaN), 0)).toBe(80);
    await expectAgreesWithLance(stable, m);
  });

  it("V1 names: cosine vector index and a scalar index", async () => {
    const version = await v1.version();
    const tableDir = path.join(dir, "v1.lance");
    const v2Name = manifestFileNames(version)[0] ?? "";
    expect(existsSync(path.join(tableDir, v2Name))).toBe(false);
    const { name, bytes } = readManifestFile(tableDir, version);
    expect(name).toBe(`_versions/${version}.manifest`);
    const m = parseManifest(bytes);
    await expectAgreesWithLance(v1, m);
    const vec = m.segments.filter((s) => s.name === "vector_idx");
    expect(vec.map((s) => s.metric)).toEqual(["cosine"]);
    const scalar = m.segments.filter((s) => s.name === "id_idx");
    expect(scalar).toHaveLength(1);
    expect(scalar[0]?.metric).toBeNull();
    expect(scalar[0]?.typeUrl.toLowerCase()).toContain("btree");
    expect(scalar[0]?.fieldIds).toEqual([m.fields.find((f) => f.name === "id")?.id]);
    // The last add is not covered by either index.
    expect(rowsIn(m, coveredFragments(m, "id_idx"), false)).toBe(500);
  });

  it("refuses corrupt copies of a real manifest", async () => {
    const { bytes } = readManifestFile(path.join(dir, "plain.lance"), await plain.version());
    expect(parseManifest(bytes).version).toBe(await plain.version());
    const badMagic = bytes.slice();
    badMagic[bytes.length - 4] = 0x6c; // "lANC"
    expectManifestError(() => parseManifest(badMagic), /magic/);
    expectManifestError(() => parseManifest(bytes.subarray(0, bytes.length - 1)), /magic/);
    expectManifestError(() => parseManifest(bytes.subarray(0, bytes.length - 100)), /magic/);
    expectManifestError(() => parseManifest(bytes.subarray(7)), /manifest|index section/);
    // Body truncated by one byte and re-framed: the length equation still holds, protobuf fails.
    const { pos, len } = manifestBlock(bytes);
    const cut = Uint8Array.from([
      ...bytes.subarray(0, pos),
      ...u32le(len - 1),
      ...bytes.subarray(pos + 4, pos + 3 + len),
      ...footer(pos),
    ]);
    expectManifestError(() => parseManifest(cut), /cannot decode Manifest/);
  });

  it("content digests: kept by untouched fragments across versions and in a shallow clone", async () => {
    const table = await db.createTable("digest", rowsFrom(0, 2000));
    await table.add(rowsFrom(2000, 2000));
    const at = async (t: Table, name: string) =>
      parseManifest(readManifestFile(path.join(dir, `${name}.lance`), await t.version()).bytes);
    const content = (m: Manifest) => m.fragments.map((f) => [f.id, f.content]);
    const base = await at(table, "digest");
    await table.add(rowsFrom(4000, 500));
    const appended = await at(table, "digest");
    expect(content(appended).slice(0, 2)).toEqual(content(base));
    expect(appended.schema).toBe(base.schema);
    await table.delete("id = 5");
    const deleted = await at(table, "digest");
    expect(deleted.fragments[0]?.content).not.toBe(base.fragments[0]?.content);
    expect(content(deleted).slice(1)).toEqual(content(appended).slice(1));
    await table.update({ where: "id = 2500", valuesSql: { id: "id + 100000" } });
    const updated = await at(table, "digest");
    expect(updated.fragments[1]?.content).not.toBe(deleted.fragments[1]?.content);
    expect(updated.fragments[0]?.content).toBe(deleted.fragments[0]?.content);
    const clone = await db.cloneTable("digest_clone", path.join(dir, "digest.lance"), {
      sourceVersion: updated.version,
      isShallow: true,
    });
    expect(content(await at(clone, "digest_clone"))).toEqual(content(updated));
    await table.alterColumns([{ path: "cat", rename: "kind" }]);
    const renamed = await at(table, "digest");
    expect(renamed.schema).not.toBe(updated.schema);
    expect(content(renamed)).toEqual(content(updated));
    clone.close();
    table.close();
  });

  it("refuses a real manifest patched with an unknown reader flag, accepts known ones", async () => {
    const { bytes } = readManifestFile(path.join(dir, "plain.lance"), await plain.version());
    // Field 9 (varint): tag 0x48. 64 = data overlays (unknown to this reader).
    expectManifestError(
      () => parseManifest(patchManifest(bytes, Uint8Array.from([0x48, 64]))),
      /: 64 \(data overlay files\) /,
    );
    // 1 | 16 (multiple base paths) is understood.
    const ok = parseManifest(patchManifest(bytes, Uint8Array.from([0x48, 17])));
    expect(ok.readerFeatureFlags).toBe(17n);
    expect(ok.segments).toEqual(parseManifest(bytes).segments);
  });
});
