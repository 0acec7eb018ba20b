/**
 * Proactive content negotiation by `Accept` (RFC 9110, sections 12.4.2 and 12.5.1).
 * @module
 */

interface MediaRange {
  readonly type: string;
  readonly subtype: string;
  /** The weight, 0..1; 0 means "not acceptable". */
  readonly q: number;
}

/** Comma- and semicolon-separated lists, with quoted strings kept whole. */
const ELEMENT = /(?:[^,"]|"(?:[^"\\]|\\.)*")+/g;
const PARAMETER = /(?:[^;"]|"(?:[^"\\]|\\.)*")+/g;
const TOKEN = /^[!#$%&'*+.^_`|~0-9a-z-]+$/;
const WEIGHT = /^q\s*=\s*(.*)$/i;
const QVALUE = /^(?:0(?:\.\d{0,3})?|1(?:\.0{0,3})?)$/;

/**
 * Which of `offered` (media types without parameters) the `Accept` header prefers. Each offered
 * type takes the q-value of the most specific range that matches it (`type/subtype` over
 * `type/*` over the full wildcard); the highest q-value wins, the earlier offered on a tie. With no header,
 * or none of them acceptable, the first offered: RFC 9110 lets a server disregard `Accept`
 * rather than answer 406. Media-type parameters are ignored, malformed elements skipped.
 */
export function preferredMediaType(
  accept: string | undefined,
  offered: readonly [string, ...string[]],
): string {
  const ranges = parseAccept(accept ?? "");
  let [preferred] = offered;
  let best = 0;
  for (const type of offered) {
    const q = quality(type.toLowerCase(), ranges);
    if (q > best) [preferred, best] = [type, q];
  }
  return preferred;
}

function quality(mediaType: string, ranges: readonly MediaRange[]): number {
  const [type, subtype] = mediaType.split("/");
  let specificity = -1;
  let q = 0;
  for (const range of ranges) {
    if (range.type !== "*" && range.type !== type) continue;
    if (range.subtype !== "*" && range.subtype !== subtype) continue;
    const rank = range.type === "*" ? 0 : range.subtype === "*" ? 1 : 2;
    if (rank > specificity || (rank === specificity && range.q > q)) {
      [specificity, q] = [rank, range.q];
    }
  }
  return q;
}

function parseAccept(header: string): MediaRange[] {
  return (header.match(ELEMENT) ?? []).flatMap((element) => {
    const [range = "", ...parameters] = (element.match(PARAMETER) ?? []).map((p) => p.trim());
    const [type = "", subtype = "", ...rest] = range.toLowerCase().split("/");
    const valid =
      TOKEN.test(type) &&
      TOKEN.test(subtype) &&
      rest.length === 0 &&
      (type !== "*" || subtype === "*");
    // The first `q` parameter is the weight; what follows it are extensions (RFC 7231).
    const weight = parameters.map((p) => WEIGHT.exec(p)?.[1]).find((w) => w !== undefined);
    if (!valid || (weight !== undefined && !QVALUE.test(weight))) return [];
    return [{ type, subtype, q: weight === undefined ? 1 : Number(weight) }];
  });
}
