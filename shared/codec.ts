/**
 * Compact binary forms for what travels between functions: query vectors as little-endian
 * float32 and candidates as packed u64 row ids plus float32 distances, each base64 in JSON.
 * Smaller than JSON number arrays and exact (Lance searches and scores in float32).
 * @module
 */

/** A query matrix: `count` vectors of `dimension` float32 values. */
export interface EncodedVectors {
  readonly dimension: number;
  readonly count: number;
  readonly data: string;
}

export function encodeVectors(vectors: readonly Float32Array[]): EncodedVectors {
  const dimension = vectors[0]?.length ?? 0;
  const flat = new Float32Array(dimension * vectors.length);
  vectors.forEach((v, i) => {
    flat.set(v, i * dimension);
  });
  return { dimension, count: vectors.length, data: toBase64(flat) };
}

export function decodeVectors(encoded: EncodedVectors): Float32Array[] {
  const flat = new Float32Array(fromBase64(encoded.data, 4));
  if (flat.length !== encoded.dimension * encoded.count) {
    throw new TypeError(
      `Expected ${encoded.count} vectors of dimension ${encoded.dimension}, got ${flat.length} values`,
    );
  }
  return Array.from({ length: encoded.count }, (_, i) =>
    flat.subarray(i * encoded.dimension, (i + 1) * encoded.dimension),
  );
}

/** Per-query candidate lists, each sorted by (distance, row id). */
export interface QueryCandidates {
  readonly rowIds: BigUint64Array;
  readonly distances: Float32Array;
}

/** Candidates of several queries, flattened: `counts[i]` entries belong to query i. */
export interface EncodedCandidates {
  readonly counts: number[];
  readonly rowIds: string;
  readonly distances: string;
}

export function encodeCandidates(perQuery: readonly QueryCandidates[]): EncodedCandidates {
  const total = perQuery.reduce((sum, q) => sum + q.rowIds.length, 0);
  const rowIds = new BigUint64Array(total);
  const distances = new Float32Array(total);
  let offset = 0;
  for (const q of perQuery) {
    rowIds.set(q.rowIds, offset);
    distances.set(q.distances, offset);
    offset += q.rowIds.length;
  }
  return {
    counts: perQuery.map((q) => q.rowIds.length),
    rowIds: toBase64(rowIds),
    distances: toBase64(distances),
  };
}

export function decodeCandidates(encoded: EncodedCandidates): QueryCandidates[] {
  const rowIds = new BigUint64Array(fromBase64(encoded.rowIds, 8));
  const distances = new Float32Array(fromBase64(encoded.distances, 4));
  const total = encoded.counts.reduce((sum, n) => sum + n, 0);
  if (rowIds.length !== total || distances.length !== total) {
    throw new TypeError(`Expected ${total} candidates, got ${rowIds.length} row ids`);
  }
  let offset = 0;
  return encoded.counts.map((n) => {
    const slice = {
      rowIds: rowIds.subarray(offset, offset + n),
      distances: distances.subarray(offset, offset + n),
    };
    offset += n;
    return slice;
  });
}

function toBase64(array: ArrayBufferView): string {
  return Buffer.from(array.buffer, array.byteOffset, array.byteLength).toString("base64");
}

/** Decodes into a fresh, aligned buffer (typed arrays need an offset divisible by their width). */
function fromBase64(data: string, width: number): ArrayBuffer {
  const bytes = Buffer.from(data, "base64");
  if (bytes.length % width !== 0) {
    throw new TypeError(`Expected a multiple of ${width} bytes, got ${bytes.length}`);
  }
  const buffer = new ArrayBuffer(bytes.length);
  new Uint8Array(buffer).set(bytes);
  return buffer;
}
