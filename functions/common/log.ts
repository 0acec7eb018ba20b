/**
 * One JSON line per event on stdout (CloudWatch parses it), with the request id on every line.
 * @module
 */
import { loadConfig } from "../../shared/config.js";
import { redact } from "../../shared/errors.js";

export function logEvent(fields: Record<string, unknown>): void {
  if (!logging()) return;
  process.stdout.write(
    `${redact(JSON.stringify({ time: new Date().toISOString(), ...fields }))}\n`,
  );
}

/** `LANCE_FANOUT_LOG`, read on the first event (a function's environment does not change). */
let enabled: boolean | undefined;

function logging(): boolean {
  try {
    enabled ??= loadConfig().log;
    return enabled;
  } catch {
    // An invalid configuration fails the invocation: its error is worth a line.
    return true;
  }
}
