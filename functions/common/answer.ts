/**
 * The shape of a function that answers one payload: parse it, do the work, log one line, and
 * answer the result or an error body (a failure it understands is an answer, not a crash).
 * @module
 */
import { type ErrorBody, FanoutError, toFanoutError } from "../../shared/errors.js";
import { logEvent } from "./log.js";

/** What a schema's `safeParse` gives. */
export type Parsed<T> =
  | { readonly success: true; readonly data: T }
  | { readonly success: false; readonly error: { readonly message: string } };

/**
 * Answers `work(input)` for a payload that `parsed` accepted, logging `fields` of the result
 * (and the time) or the error under `fn`; a payload it refused is `INVALID_REQUEST`.
 */
export async function answer<T extends { readonly requestId: string }, R>(
  fn: string,
  parsed: Parsed<T>,
  work: (input: T) => Promise<R>,
  fields: (result: R, input: T) => Record<string, unknown>,
): Promise<R | ErrorBody> {
  if (!parsed.success) {
    return new FanoutError(
      "INVALID_REQUEST",
      `invalid ${fn} input: ${parsed.error.message}`,
    ).toBody();
  }
  const input = parsed.data;
  const started = performance.now();
  try {
    const result = await work(input);
    const ms = performance.now() - started;
    logEvent({ requestId: input.requestId, fn, ...fields(result, input), ms });
    return result;
  } catch (err) {
    const error = toFanoutError(err);
    logEvent({ requestId: input.requestId, fn, error: error.code, message: error.message });
    return error.toBody();
  }
}
