/**
 * What an Invoke request asks for, read the way Lambda reads it: the function (a name, a partial
 * ARN or a full ARN, each with an optional qualifier), the `Qualifier` query parameter, the
 * invocation type and the log type. Pure: `local/lambda.ts` turns a {@link RequestError} into
 * Lambda's error response.
 * @module
 */

/** The region and account the local service answers as, in ARNs of its error messages. */
export const LOCAL_REGION = "us-east-1";
export const LOCAL_ACCOUNT = "000000000000";

export const INVOCATION_TYPES = ["RequestResponse", "Event", "DryRun"] as const;
export type InvocationType = (typeof INVOCATION_TYPES)[number];
const LOG_TYPES = ["None", "Tail"] as const;

/** The one version the local service has. */
export const LATEST = "$LATEST";

export interface InvokeRequest {
  /** The function's name, whatever form the request named it in. */
  readonly name: string;
  readonly invocationType: InvocationType;
  /** `LogType: Tail`: answer the end of the invocation's log in `X-Amz-Log-Result`. */
  readonly tail: boolean;
}

/** A request Lambda refuses: its HTTP status, `x-amzn-ErrorType` and body. */
export class RequestError extends Error {
  constructor(
    readonly status: number,
    readonly errorType: string,
    readonly body: Readonly<Record<string, string>>,
  ) {
    super(`${errorType}: ${JSON.stringify(body)}`);
  }
}

/**
 * Lambda's pattern for `FunctionName` in Invoke: `name`, `name:qualifier`,
 * `123456789012:function:name[:qualifier]` or `arn:aws:lambda:region:123456789012:function:name[:qualifier]`.
 */
const FUNCTION_NAME =
  /^(?:arn:aws[a-zA-Z-]*:lambda:)?(?:[a-z]{2}(?:-gov)?-[a-z]+-\d:)?(?:\d{12}:)?(?:function:)?([a-zA-Z0-9_-]{1,64})(?::(\$LATEST|[a-zA-Z0-9_-]+))?$/;
const QUALIFIER = /^[a-zA-Z0-9$_-]{1,128}$/;
const FUNCTION_NAME_MAX = 170;

/**
 * Reads an Invoke request. `exists` says whether a function of that name is served.
 * @throws RequestError as Lambda answers it: 400 for a malformed name, qualifier or header, 404
 *   for a function or version that does not exist.
 */
export function readInvokeRequest(
  rawName: string,
  query: URLSearchParams,
  headers: Readonly<Record<string, string | string[] | undefined>>,
  exists: (name: string) => boolean,
): InvokeRequest {
  const match = rawName.length <= FUNCTION_NAME_MAX ? FUNCTION_NAME.exec(rawName) : null;
  const name = match?.[1];
  if (!name) {
    throw validation(
      rawName,
      "functionName",
      `Member must satisfy regular expression pattern: ${FUNCTION_NAME.source}`,
    );
  }
  const derived = match[2];
  const given = query.get("Qualifier") ?? undefined;
  if (given !== undefined && !QUALIFIER.test(given)) {
    throw validation(
      given,
      "qualifier",
      "Member must satisfy regular expression pattern: (|[a-zA-Z0-9$_-]+)",
    );
  }
  if (derived !== undefined && given !== undefined && derived !== given) {
    throw new RequestError(400, "InvalidParameterValueException", {
      Type: "User",
      message:
        "The derived qualifier from the function name does not match the specified qualifier.",
    });
  }
  const qualifier = derived ?? given;
  // No versions or aliases here: only $LATEST exists.
  if (!exists(name) || (qualifier !== undefined && qualifier !== LATEST)) {
    const arn = `arn:aws:lambda:${LOCAL_REGION}:${LOCAL_ACCOUNT}:function:${name}${qualifier === undefined ? "" : `:${qualifier}`}`;
    throw new RequestError(404, "ResourceNotFoundException", {
      Type: "User",
      Message: `Function not found: ${arn}`,
    });
  }
  return {
    name,
    invocationType: oneOf(headers["x-amz-invocation-type"], INVOCATION_TYPES, "invocationType"),
    tail: oneOf(headers["x-amz-log-type"], LOG_TYPES, "logType") === "Tail",
  };
}

function oneOf<T extends string>(
  header: string | string[] | undefined,
  values: readonly T[],
  member: string,
): T {
  const value = Array.isArray(header) ? header.join(",") : header;
  if (value === undefined) return values[0] as T;
  if (!(values as readonly string[]).includes(value)) {
    throw validation(value, member, `Member must satisfy enum value set: [${values.join(", ")}]`);
  }
  return value as T;
}

/** The error of a request that fails the API model's constraints (no SDK class: a generic one). */
function validation(value: string, member: string, constraint: string): RequestError {
  return new RequestError(400, "ValidationException", {
    message: `1 validation error detected: Value '${value}' at '${member}' failed to satisfy constraint: ${constraint}`,
  });
}
