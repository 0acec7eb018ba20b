// Decoder for the portable 32-bit Roaring serialization (RoaringFormatSpec), the format Lance uses
// for `IndexMetadata.fragment_bitmap`. Hand-written so the manifest reader stays pure TS with no
// async WebAssembly initialisation; inputs are a few dozen bytes.

const SERIAL_COOKIE_NO_RUNCONTAINER = 12346;
const SERIAL_COOKIE = 12347;
// With run containers, the offset header is only written when there are at least this many containers.
const NO_OFFSET_THRESHOLD = 4;
// Containers with more values than this are stored as 2^16-bit bitmaps instead of sorted arrays.
const ARRAY_MAX_CARDINALITY = 4096;
const BITMAP_BYTES = 8192;

/** Decodes a portable Roaring bitmap into its sorted values. Empty input is the empty set. */
export function decodeRoaring(bytes: Uint8Array): number[] {
  if (bytes.length === 0) return [];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let pos = 0;
  const need = (n: number, what: string): void => {
    if (pos + n > bytes.length) {
      throw new Error(
        `roaring: truncated input reading ${what} (need ${n} bytes at offset ${pos}, have ${bytes.length - pos})`,
      );
    }
  };
  const u16 = (what: string): number => {
    need(2, what);
    const v = view.getUint16(pos, true);
    pos += 2;
    return v;
  };
  const u32 = (what: string): number => {
    need(4, what);
    const v = view.getUint32(pos, true);
    pos += 4;
    return v;
  };

  const cookie = u32("cookie");
  let count: number;
  let runFlags: Uint8Array | null = null;
  if ((cookie & 0xffff) === SERIAL_COOKIE) {
    count = (cookie >>> 16) + 1;
    const flagBytes = Math.ceil(count / 8);
    need(flagBytes, "run-flag bitset");
    runFlags = bytes.subarray(pos, pos + flagBytes);
    pos += flagBytes;
  } else if (cookie === SERIAL_COOKIE_NO_RUNCONTAINER) {
    count = u32("container count");
  } else {
    throw new Error(`roaring: bad cookie ${cookie} (expected 12346 or 12347 in the low 16 bits)`);
  }
  // A count the buffer cannot hold is malformed; checking up front also bounds the allocations below.
  need(count * 4, "descriptive header");

  const keys: number[] = [];
  const cardinalities: number[] = [];
  for (let i = 0; i < count; i++) {
    keys.push(u16("container key"));
    cardinalities.push(u16("container cardinality") + 1);
  }
  if (runFlags === null || count >= NO_OFFSET_THRESHOLD) {
    // Offsets are redundant for a sequential decoder; skip them.
    need(count * 4, "offset header");
    pos += count * 4;
  }

  const out: number[] = [];
  let previousKey = -1;
  for (let i = 0; i < count; i++) {
    const key = keys[i] as number;
    if (key <= previousKey)
      throw new Error(`roaring: container keys not strictly increasing at ${i}`);
    previousKey = key;
    const high = key * 0x10000; // multiply, not shift: keys >= 0x8000 would go negative with <<
    const isRun = runFlags !== null && ((runFlags[i >> 3] as number) & (1 << (i & 7))) !== 0;
    const before = out.length;
    if (isRun) {
      const runs = u16("run count");
      need(runs * 4, "runs");
      for (let r = 0; r < runs; r++) {
        const start = u16("run start");
        const length = u16("run length") + 1;
        if (start + length > 0x10000) throw new Error(`roaring: run overflows container ${i}`);
        for (let v = start; v < start + length; v++) out.push(high + v);
      }
    } else if ((cardinalities[i] as number) <= ARRAY_MAX_CARDINALITY) {
      const n = cardinalities[i] as number;
      need(n * 2, "array container");
      for (let j = 0; j < n; j++) out.push(high + u16("array value"));
    } else {
      need(BITMAP_BYTES, "bitmap container");
      for (let b = 0; b < BITMAP_BYTES; b++) {
        const byte = bytes[pos + b] as number;
        if (byte === 0) continue;
        for (let bit = 0; bit < 8; bit++) if (byte & (1 << bit)) out.push(high + b * 8 + bit);
      }
      pos += BITMAP_BYTES;
    }
    // Array and bitmap cardinalities must match the header; a run container's header cardinality is
    // also defined by the spec, so checking every kind catches corrupt input early.
    if (out.length - before !== cardinalities[i]) {
      throw new Error(
        `roaring: container ${i} holds ${out.length - before} values, header says ${cardinalities[i]}`,
      );
    }
  }
  if (pos !== bytes.length) {
    throw new Error(`roaring: ${bytes.length - pos} trailing bytes after the last container`);
  }
  for (let j = 1; j < out.length; j++) {
    if ((out[j] as number) <= (out[j - 1] as number)) {
      throw new Error("roaring: values not strictly increasing");
    }
  }
  return out;
}
