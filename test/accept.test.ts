/**
 * Content negotiation of `POST /search` (RFC 9110, section 12.5.1): JSON or an Arrow stream by
 * the q-values of `Accept`.
 */
import { describe, expect, test } from "vitest";
import { preferredMediaType } from "../functions/common/accept.js";

const JSON_TYPE = "application/json";
const ARROW = "application/vnd.apache.arrow.stream";
const OFFERED = [JSON_TYPE, ARROW] as const;

describe("preferredMediaType", () => {
  test.each([
    // Nothing asked, or anything goes: the default.
    [undefined, JSON_TYPE],
    ["", JSON_TYPE],
    ["*/*", JSON_TYPE],
    ["application/*", JSON_TYPE],
    // The highest q-value wins; a tie goes to the first offered.
    [ARROW, ARROW],
    ["Application/Vnd.Apache.Arrow.Stream", ARROW],
    [`${JSON_TYPE}, ${ARROW};q=0.1`, JSON_TYPE],
    [`${ARROW}, ${JSON_TYPE};q=0.5`, ARROW],
    [`${ARROW};q=0.5, ${JSON_TYPE};q=0.5`, JSON_TYPE],
    [` ${ARROW} ; Q=0.9 ,\t${JSON_TYPE} ;q=0.3`, ARROW],
    [`${JSON_TYPE};q=0.001, ${ARROW};q=0.002`, ARROW],
    // A more specific range overrides a less specific one, whatever their q-values.
    [`${JSON_TYPE};q=0, */*`, ARROW],
    [`${ARROW};q=0, */*`, JSON_TYPE],
    [`application/*;q=0.2, ${ARROW};q=0.8`, ARROW],
    [`${ARROW};q=0.2, application/*;q=0.8`, JSON_TYPE],
    [`*/*;q=0.9, ${ARROW}`, ARROW],
    // Nothing acceptable: the default rather than 406.
    ["text/html", JSON_TYPE],
    [`${JSON_TYPE};q=0, ${ARROW};q=0`, JSON_TYPE],
    // Media-type parameters are ignored (neither representation has any), quoted commas included.
    [`${ARROW};version=1;q=0.9, ${JSON_TYPE};q=0.8`, ARROW],
    [`${JSON_TYPE};note="a, b";q=0.1, ${ARROW};q=0.2`, ARROW],
    // Malformed elements are skipped, the rest still counts.
    [`${JSON_TYPE};q=2, ${ARROW};q=0.5`, ARROW],
    [`${JSON_TYPE};q=abc, ${ARROW};q=0.5`, ARROW],
    [`${JSON_TYPE};q=0.0001, ${ARROW};q=0.5`, ARROW],
    [`garbage, */json, ${ARROW}`, ARROW],
    [",,,", JSON_TYPE],
  ])("Accept %j prefers %s", (accept, expected) => {
    expect(preferredMediaType(accept, OFFERED)).toBe(expected);
  });
});
