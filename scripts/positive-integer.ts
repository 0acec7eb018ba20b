/**
 * A commander option parser for counts and sizes: a positive whole number, or a usage error
 * that names the option.
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
