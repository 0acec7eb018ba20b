/**
 * Reading what a synchronous Lambda invoke answered, the one way every caller here reads it.
 * @module
 */
import type { InvokeCommandOutput } from "@aws-sdk/client-lambda";

export interface InvokeAnswer {
  /** The payload as text (`null` when there was none). */
  readonly text: string;
  /** The payload as JSON, or undefined when it is not JSON. */
  readonly body: unknown;
  /**
   * Set when the function crashed (Lambda's `FunctionError`: an unhandled error, a timeout, the
   * memory size), as `<name> failed (<kind>): <its errorMessage>`; a handled error is a body.
   */
  readonly failure?: string;
}

export function readInvokeOutput(
  out: Pick<InvokeCommandOutput, "Payload" | "FunctionError">,
  functionName: string,
): InvokeAnswer {
  const text = out.Payload?.length ? Buffer.from(out.Payload).toString("utf8") : "null";
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (!out.FunctionError) return { text, body };
  const message = (body as { errorMessage?: unknown } | null | undefined)?.errorMessage;
  const failure = `${functionName} failed (${out.FunctionError}): ${String(message ?? text)}`;
  return { text, body, failure };
}
