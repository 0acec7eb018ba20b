/**
 * Why a plan has the shape it has, in words: what the cost model weighed (the index's bytes
 * against one environment's cache, the segments, the slots, the batch) and the estimate of each
 * plan it weighed. `fanout plan`, `explain` and every response carry it (`plan.reason`).
 * @module
 */
import type { Strategy } from "./request.js";
import type { ExecutionProfile, Split } from "./strategy.js";

export interface ReasonFacts {
  /** The strategy the request asked for (`auto` unless set). */
  readonly requested: Strategy;
  /** Index segments, or unindexed fragments when there is no index. */
  readonly kind: "index" | "flat";
  readonly units: number;
  /** Bytes the index takes in a cache per byte of its files. */
  readonly cachedPerFileByte: number;
  readonly queries: number;
  readonly profile: Pick<ExecutionProfile, "indexCacheBytes" | "slots">;
}

const MIB = 1024 * 1024;
/** The other plans named, cheapest first. */
const OTHERS_SHOWN = 6;

export function planReason(split: Split, facts: ReasonFacts): string {
  const weighed = split.considered.length;
  const why =
    facts.requested === "auto"
      ? weighed > 1
        ? `the lowest estimate of the ${weighed} plans auto weighed`
        : "the only plan auto could weigh"
      : `strategy "${facts.requested}" was asked for`;
  return [
    `${shape(split.groups.length, split.chunks.length)}, est. ${ms(split.estimatedMs)}: ${why}.`,
    facts.kind === "index" ? indexSentence(facts, indexBytes(split)) : flatSentence(facts),
    facts.units === 1 && facts.kind === "index"
      ? "One segment: an index is split by segment only, so only a batch's chunks can fan out."
      : "",
    facts.queries > 1
      ? `${facts.queries} queries: a batch can also split into chunks, each its own task.`
      : "",
    others(split),
  ]
    .filter(Boolean)
    .join(" ");
}

/** The index files' bytes over every group; null when the manifest does not record them. */
function indexBytes(split: Split): number | null {
  let sum = 0;
  for (const group of split.groups) {
    if (group.indexBytes === null) return null;
    sum += group.indexBytes;
  }
  return sum;
}

function indexSentence(facts: ReasonFacts, indexBytes: number | null): string {
  const { units } = facts;
  const { indexCacheBytes: cache, slots } = facts.profile;
  const segments = `${units} segment${units === 1 ? "" : "s"}`;
  if (indexBytes === null) {
    return `The index (${segments}) does not record its size, so the model counts it as fitting a segment-search's cache.`;
  }
  const cached = indexBytes * facts.cachedPerFileByte;
  const inCache = cached === indexBytes ? "" : ` (about ${mib(cached)} in a cache)`;
  const sizes = `The index is ${mib(indexBytes)} in ${segments}${inCache}; a segment-search environment caches ${mib(cache)}, over ${slots} slot${slots === 1 ? "" : "s"}.`;
  if (cached <= cache) {
    return `${sizes} It fits one cache: more groups would add invokes and save no storage reads.`;
  }
  const caches = Math.ceil(cached / cache);
  if (slots === 1) {
    return `${sizes} It does not fit one cache, and with one slot every environment holds every group: more groups hold no more of it (about ${caches} slots would hold it all: segmentSearchSlots).`;
  }
  return `${sizes} It is ${(cached / cache).toFixed(1)} caches large: groups spread over the slots keep their share of it cached instead of reading it from storage on every query.`;
}

function flatSentence(facts: ReasonFacts): string {
  return `No vector index to split: ${facts.units} fragment${facts.units === 1 ? " is" : "s are"} searched exactly.`;
}

function others(split: Split): string {
  const rest = split.considered
    .filter((x) => x.groups !== split.groups.length || x.chunks !== split.chunks.length)
    .sort((a, b) => a.estimatedMs - b.estimatedMs)
    .slice(0, OTHERS_SHOWN)
    .map((x) => `${shape(x.groups, x.chunks)} est. ${ms(x.estimatedMs)}`);
  return rest.length > 0 ? `Other plans: ${rest.join("; ")}.` : "";
}

function shape(groups: number, chunks: number): string {
  const tasks = groups * chunks;
  if (tasks === 1) return "1 task";
  if (chunks === 1) return `${groups} groups (${tasks} tasks)`;
  if (groups === 1) return `${chunks} query chunks (${tasks} tasks)`;
  return `${groups} groups x ${chunks} query chunks (${tasks} tasks)`;
}

function ms(value: number): string {
  return `${value < 10 ? value.toFixed(1) : Math.round(value).toLocaleString("en-US")} ms`;
}

function mib(bytes: number): string {
  return `${(bytes / MIB).toFixed(bytes < 10 * MIB ? 1 : 0)} MiB`;
}
