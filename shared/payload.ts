/**
 * Lambda's payload limit and the one check of a payload against it.
 * @module
 */
import { FanoutError } from "./errors.js";

/** A synchronous Lambda invoke carries at most 6 MB each way. */
export const MAX_PAYLOAD_BYTES = 6 * 1024 * 1024;

/** Bytes of `payload` as JSON, what a Lambda invoke carries. */
export function payloadBytes(payload: unknown): number {
  return Buffer.byteLength(JSON.stringify(payload));
}

/**
 * `payload`, if its JSON fits `limit` bytes.
 * @throws FanoutError `PAYLOAD_TOO_LARGE` naming `what` and the size, and `hint` if given.
 */
export function withinPayloadLimit<T>(
  payload: T,
  what: string,
  limit = MAX_PAYLOAD_BYTES,
  hint = "",
): T {
  const bytes = payloadBytes(payload);
  if (bytes > limit) {
    throw new FanoutError(
      "PAYLOAD_TOO_LARGE",
      `${what} would be ${bytes} bytes, over the ${limit}-byte payload limit${hint}`,
    );
  }
  return payload;
}
