/**
 * Every failure a caller can see has a stable `code` and an HTTP status. Handlers turn a
 * {@link FanoutError} into `{ error: { code, message } }`; anything else becomes `INTERNAL`.
 * @module
 */

/** HTTP status of each error code. The keys are the stable codes of the API. */
export const ERROR_STATUS = {
  INVALID_REQUEST: 400,
  AMBIGUOUS_INDEX: 400,
  METRIC_MISMATCH: 400,
  FORBIDDEN_DATASET: 403,
  DATASET_NOT_FOUND: 404,
  VERSION_NOT_FOUND: 404,
  INDEX_NOT_FOUND: 404,
  INCOMPLETE_INDEX_COVERAGE: 409,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_DATASET: 422,
  INTERNAL: 500,
  SEGMENT_SEARCH_FAILED: 502,
  TIMEOUT: 504,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** The JSON body of every error response. */
export interface ErrorBody {
  readonly error: {
    readonly code: ErrorCode;
    readonly message: string;
    readonly details?: unknown;
  };
}

/** A failure with a stable code; `details` carries machine-readable context (e.g. fragments). */
export class FanoutError extends Error {
  override readonly name: string = "FanoutError";
  readonly code: ErrorCode;
  readonly details: unknown;

  constructor(code: ErrorCode, message: string, options?: ErrorOptions & { details?: unknown }) {
    super(message, options);
    this.code = code;
    this.details = options?.details;
  }

  get status(): number {
    return ERROR_STATUS[this.code];
  }

  /** The body a caller sees, with secrets scrubbed from the message. */
  toBody(): ErrorBody {
    const { code, details } = this;
    const message = redact(this.message);
    return { error: details === undefined ? { code, message } : { code, message, details } };
  }
}

/**
 * Removes credentials from text that leaves the service (error bodies, logs): the values of the
 * secret AWS variables, and anything shaped like `secret=...` / `token: ...`.
 */
export function redact(
  text: string,
  env: Readonly<Record<string, string | undefined>> = process.env,
): string {
  let out = text;
  for (const name of ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"]) {
    const value = env[name];
    if (value && value.length >= 4) out = out.split(value).join("[redacted]");
  }
  return out.replace(
    /((?:secret|token|password|signature|credential)[\w-]*["']?\s*[:=]\s*["']?)[^\s"',}]+/gi,
    "$1[redacted]",
  );
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === "string" && Object.hasOwn(ERROR_STATUS, value);
}

/** Wraps anything thrown into a FanoutError; unknown failures become INTERNAL with their message. */
export function toFanoutError(err: unknown): FanoutError {
  if (err instanceof FanoutError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new FanoutError("INTERNAL", message, { cause: err });
}

/** Rebuilds a FanoutError from an error body that crossed a function boundary. */
export function fromErrorBody(body: ErrorBody): FanoutError {
  const { code, message, details } = body.error;
  return new FanoutError(isErrorCode(code) ? code : "INTERNAL", message, { details });
}

export function isErrorBody(value: unknown): value is ErrorBody {
  if (typeof value !== "object" || value === null || !("error" in value)) return false;
  const error = (value as { error: unknown }).error;
  return typeof error === "object" && error !== null && "code" in error && "message" in error;
}
