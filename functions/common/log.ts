import { redact } from "../../shared/errors.js";

/**
 * One JSON line per event on stdout (CloudWatch parses it), with the request id on every line.
 * @module
 */
export function logEvent(fields: Record<string, unknown>): void {
  if (process.env.LANCE_FANOUT_LOG === "off") return;
  process.stdout.write(
    `${redact(JSON.stringify({ time: new Date().toISOString(), ...fields }))}\n`,
  );
}
