/**
 * What a lancedb error means, decided in one place. lancedb's Node errors carry no code, only
 * Lance's message (`LanceError(IO): ... not found`, S3's `NoSuchKey` or `AccessDenied` inside
 * it), so the text is classified here into a kind the rest of the code branches on.
 * @module
 */

/**
 * `not-found`: a dataset, version, table or object that does not exist; `access-denied`: S3
 * refused the read (with list permission limited to a prefix, S3 answers a missing key with 403).
 */
export type LanceErrorKind = "not-found" | "access-denied" | "other";

export function lanceErrorKind(err: unknown): LanceErrorKind {
  const message = messageOf(err);
  if (/not found|NoSuchBucket|NoSuchKey|does not exist/i.test(message)) return "not-found";
  if (/AccessDenied|\b403\b/.test(message)) return "access-denied";
  return "other";
}

/** The object a not-found error names, if it names one. */
export function missingObject(err: unknown): string | undefined {
  // Lance 12 nests it: "Not found: Wrapped error: Not found: <path>, <source location>".
  const found = /Object at location (\S+) not found|Not found: (?!Wrapped\b)([^,\s]+)/i.exec(
    messageOf(err),
  );
  return found?.[1] ?? found?.[2];
}

/** The first line of a lance error, without its Rust source locations. */
export function lanceMessage(err: unknown): string {
  const message = messageOf(err);
  const inner = /Caused by: (.*?)(?:, \/|$)/.exec(message)?.[1] ?? message;
  return inner.split(/,\s*\/usr\//)[0]?.trim() ?? inner;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
