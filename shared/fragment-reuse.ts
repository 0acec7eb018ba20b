/**
 * Lance's fragment reuse index (`__lance_frag_reuse`): compaction with deferred index remap
 * rewrites fragments without rewriting the indices, and records which new fragments replaced
 * which old ones. Lance remaps every index segment's fragment bitmap through it when it loads
 * the indices (lance-table system_index/frag_reuse.rs `remap_fragment_bitmap`); so does this
 * module, so that groups and views cover the fragments a search really reads. Pure.
 * @module
 */
import type { Manifest, ManifestSegment } from "./manifest.js";
import {
  decode,
  FragmentReuseContentType,
  type RawFragmentReuse,
  u64Number,
} from "./manifest-format.js";

/** Decodes the content of an external fragment reuse file (`details.binpb`). */
export function decodeFragmentReuse(bytes: Uint8Array): RawFragmentReuse {
  return decode<RawFragmentReuse>(FragmentReuseContentType, bytes, "fragment reuse content");
}

/** The manifest with every segment's fragments as Lance reads them through `reuse`. */
export function remapSegments(manifest: Manifest, reuse: RawFragmentReuse): Manifest {
  return {
    ...manifest,
    segments: manifest.segments.map((segment) => remapSegment(segment, reuse)),
  };
}

function remapSegment(segment: ManifestSegment, reuse: RawFragmentReuse): ManifestSegment {
  if (segment.fragmentIds === null) return segment;
  return { ...segment, fragmentIds: remapFragments(segment.fragmentIds, reuse) };
}

/**
 * Each compaction's rewrite groups, in order: a segment that covered every old fragment of a
 * group covers its new fragments instead. One that covered only some of them (a straddle, left
 * by lance #6610) loses those and gains nothing: the rewritten fragments also hold rows it never
 * indexed, so Lance searches them flat until the next index optimize.
 */
export function remapFragments(ids: readonly number[], reuse: RawFragmentReuse): number[] {
  const covered = new Set(ids);
  for (const version of reuse.versions) {
    for (const group of version.groups) {
      const old = group.old_fragments.map((f) => u64Number(f.id, "fragment reuse fragment id"));
      const removed = old.filter((id) => covered.delete(id)).length;
      if (removed === 0 || removed < old.length) continue;
      for (const f of group.new_fragments)
        covered.add(u64Number(f.id, "fragment reuse fragment id"));
    }
  }
  return [...covered].sort((a, b) => a - b);
}
