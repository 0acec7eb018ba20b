/**
 * What a lancedb error means, decided in one place. lancedb's Node errors carry no code, only
 * Lance's message (`LanceError(IO): ... not found`, S3's `NoSuchKey` or `AccessDenied` inside
 * it), so the text is classified here into a kind the rest of the code branches on.
 * @module
 */

/**
 * `not-found`: a dataset, version, table or object that does not exist; `access-denied`: S3
 * refused the read (with list permission limited to a prefix, S3 answers a missing key with 403);
 * `unsupported`: Lance cannot read the dataset (a newer writer's feature flags).
 */
export type LanceErrorKind = "not-found" | "access-denied" | "unsupported" | "other";

export function lanceErrorKind(err: unknown): LanceErrorKind {
  const message = messageOf(err);
  if (/Not supported:|cannot be read by this version of Lance/i.test(message)) return "unsupported";
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

/**
 * Lance refused to search several query vectors at once on an index whose files predate batch
 * partition search (IVF_PQ written by pylance 0.21 and older).
 */
export function refusesBatchSearch(err: unknown): boolean {
  return /does not support batch partition search/.test(messageOf(err));
}

/**
 * Lance cannot describe or search an index written before Lance 0.8: no fragment coverage, or
 * no row counts recorded beside it ("Please upgrade lance to 0.8+").
 */
export function refusesLegacyIndex(err: unknown): boolean {
  return /upgrade lance to 0\.8|Index description requires physical row count/i.test(
    messageOf(err),
  );
}

/**
 * Lance 12 cannot take rows by id or offset from legacy (v1) data files, nor from fragments
 * whose row counts are not recorded; its vector search still reads them.
 */
export function refusesTake(err: unknown): boolean {
  return /FilteredRead on v1 files|missing row count stats/i.test(messageOf(err));
}

/**
 * An expression failed on the data (a cast that overflows, a division by zero): with a filter,
 * the caller's filter, which planning cannot catch as it reads no values.
 */
export function failsOnValues(err: unknown): boolean {
  return VALUE_FAILURE.test(messageOf(err));
}

const VALUE_FAILURE = /(?:Cast error|Arithmetic overflow|Divide by zero|Compute error)[^,\n]*/i;

/** What failed on the data, without Lance's wrapping (e.g. `Cast error: Can't cast value 300 to type Int8`). */
export function valueFailure(err: unknown): string {
  return VALUE_FAILURE.exec(messageOf(err))?.[0] ?? lanceMessage(err);
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
