/**
 * commander option parsers for counts, sizes and versions: a whole number, or a usage error that
 * names the option.
 * @module
 */
import { InvalidArgumentError } from "commander";

export function positiveInteger(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new InvalidArgumentError("expected a positive whole number");
  }
  return n;
}

/** A whole number, 0 included. */
export function wholeNumber(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError("expected a whole number");
  return n;
}
