/**
 * Proof that the IAM policies are enough, without AWS: a proxy in front of the local S3 sees
 * every request a function makes, maps it to the IAM action, resource and `s3:prefix` that S3
 * authorizes, and answers it the way S3 would for the function's role:
 * - a request no statement allows gets `403 AccessDenied` (it never reaches the store);
 * - a GET or HEAD of a missing key gets `403` instead of `404` unless the role may list the
 *   whole bucket: S3 only reveals that a key does not exist to callers with `s3:ListBucket`, and
 *   a listing permission limited by an `s3:prefix` condition is assumed not to count (that check
 *   has no prefix in its context), the pessimistic reading.
 * The evaluator covers what the stack uses: Allow statements with `*`/`?` globs and
 * `StringLike`/`StringEquals` conditions on `s3:prefix`.
 * @module
 */
import { createServer, request as httpRequest, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface RecordedRequest {
  readonly method: string;
  readonly bucket: string;
  /** The object key, "" for a bucket-level request. */
  readonly key: string;
  readonly query: URLSearchParams;
  /** `x-amz-copy-source`, decoded, without a leading "/". */
  readonly copySource: string | undefined;
  readonly body: Buffer;
}

export interface RecordingProxy {
  readonly endpoint: string;
  /** Every request, allowed or not. */
  readonly requests: RecordedRequest[];
  /** The accesses answered 403 because no statement allows them. */
  readonly denied: S3Access[];
  stop(): Promise<void>;
}

/**
 * Forwards requests to `target` (path-style S3) as S3 would answer a role with `statements`,
 * recording each one.
 */
export async function startS3AuthProxy(
  target: string,
  statements: readonly IamStatement[],
): Promise<RecordingProxy> {
  const upstream = new URL(target);
  const requests: RecordedRequest[] = [];
  const denied: S3Access[] = [];
  const accessDenied = (res: ServerResponse, head: boolean) => {
    res.writeHead(403, { "content-type": "application/xml" });
    res.end(
      head ? undefined : "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>",
    );
  };
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const url = new URL(req.url ?? "/", "http://proxy");
    const [, bucket = "", ...key] = url.pathname.split("/");
    const copySource = req.headers["x-amz-copy-source"];
    const recorded: RecordedRequest = {
      method: req.method ?? "GET",
      bucket: decodeURIComponent(bucket),
      key: decodeURIComponent(key.join("/")),
      query: url.searchParams,
      copySource:
        typeof copySource === "string"
          ? decodeURIComponent(copySource.split("?")[0] ?? "").replace(/^\//, "")
          : undefined,
      body,
    };
    requests.push(recorded);
    const refused = s3Accesses(recorded).filter((a) => !isAllowed(a, statements));
    if (refused.length > 0) {
      denied.push(...refused);
      accessDenied(res, recorded.method === "HEAD");
      return;
    }
    const objectRead =
      recorded.key !== "" && (recorded.method === "GET" || recorded.method === "HEAD");
    const revealsMissing = isAllowed(
      { action: "s3:ListBucket", resource: `arn:aws:s3:::${recorded.bucket}`, request: "" },
      statements,
    );
    const headers = { ...req.headers };
    delete headers.expect;
    const forward = httpRequest(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers },
      (answer) => {
        if (answer.statusCode === 404 && objectRead && !revealsMissing) {
          answer.resume();
          accessDenied(res, recorded.method === "HEAD");
          return;
        }
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    forward.on("error", (err) => {
      res.writeHead(502);
      res.end(String(err));
    });
    forward.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    requests,
    denied,
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** What IAM authorizes for one request (one request can need several). */
export interface S3Access {
  readonly action: string;
  readonly resource: string;
  /** The `s3:prefix` condition key of a listing; absent when the request has none. */
  readonly prefix?: string;
  /** The request, for messages. */
  readonly request: string;
}

/** The IAM authorizations S3 checks for a request (docs: "Actions, resources and condition keys for Amazon S3"). */
export function s3Accesses(r: RecordedRequest): S3Access[] {
  const request = `${r.method} /${r.bucket}/${r.key}${r.query.size ? `?${r.query}` : ""}`;
  const bucketArn = `arn:aws:s3:::${r.bucket}`;
  const object = (action: string, key = r.key): S3Access => ({
    action,
    resource: `${bucketArn}/${key}`,
    request,
  });
  if (r.key === "") {
    if (
      (r.method === "GET" && (r.query.has("list-type") || !r.query.size)) ||
      r.method === "HEAD"
    ) {
      const prefix = r.query.get("prefix") ?? undefined;
      return [
        {
          action: "s3:ListBucket",
          resource: bucketArn,
          request,
          ...(prefix === undefined ? {} : { prefix }),
        },
      ];
    }
    if (r.method === "POST" && r.query.has("delete")) {
      const keys = [...r.body.toString("utf8").matchAll(/<Key>([^<]*)<\/Key>/g)].map((m) =>
        (m[1] ?? "")
          .replaceAll("&lt;", "<")
          .replaceAll("&gt;", ">")
          .replaceAll("&quot;", '"')
          .replaceAll("&apos;", "'")
          .replaceAll("&amp;", "&"),
      );
      return keys.map((key) => object("s3:DeleteObject", key));
    }
    return [{ action: `unknown bucket request`, resource: bucketArn, request }];
  }
  switch (r.method) {
    case "GET":
      return [object(r.query.has("uploadId") ? "s3:ListMultipartUploadParts" : "s3:GetObject")];
    case "HEAD":
      return [object("s3:GetObject")];
    case "PUT":
      return r.copySource
        ? [
            object("s3:PutObject"),
            { action: "s3:GetObject", resource: `arn:aws:s3:::${r.copySource}`, request },
          ]
        : [object("s3:PutObject")];
    case "POST":
      return r.query.has("uploads") || r.query.has("uploadId")
        ? [object("s3:PutObject")]
        : [object("unknown object POST")];
    case "DELETE":
      return [object(r.query.has("uploadId") ? "s3:AbortMultipartUpload" : "s3:DeleteObject")];
    default:
      return [object(`unknown method ${r.method}`)];
  }
}

/** An IAM policy statement as CloudFormation templates hold it. */
export interface IamStatement {
  readonly Effect: string;
  readonly Action: string | readonly string[];
  readonly Resource: unknown;
  readonly Condition?: Readonly<
    Record<string, Readonly<Record<string, string | readonly string[]>>>
  >;
}

const asArray = <T>(value: T | readonly T[]): readonly T[] =>
  Array.isArray(value) ? (value as readonly T[]) : [value as T];

/** IAM's glob: `*` any run of characters (slashes included), `?` one character. */
export function iamGlob(pattern: string, value: string): boolean {
  const regex = pattern
    .replace(/[.+^${}()|[\]\\]/g, "\\$&")
    .replaceAll("*", ".*")
    .replaceAll("?", ".");
  return new RegExp(`^${regex}$`, "s").test(value);
}

function conditionsHold(statement: IamStatement, access: S3Access): boolean {
  for (const [operator, entries] of Object.entries(statement.Condition ?? {})) {
    for (const [key, values] of Object.entries(entries)) {
      if (key !== "s3:prefix" || (operator !== "StringLike" && operator !== "StringEquals"))
        return false;
      const prefix = access.prefix;
      if (prefix === undefined) return false;
      const match = (v: string) => (operator === "StringLike" ? iamGlob(v, prefix) : v === prefix);
      if (!asArray(values).some(match)) return false;
    }
  }
  return true;
}

/** Whether some Allow statement covers the access (the stack has no Deny statements). */
export function isAllowed(access: S3Access, statements: readonly IamStatement[]): boolean {
  return statements.some(
    (s) =>
      s.Effect === "Allow" &&
      asArray(s.Action).some((a) => iamGlob(a, access.action)) &&
      asArray(s.Resource).some((r) => typeof r === "string" && iamGlob(r, access.resource)) &&
      conditionsHold(s, access),
  );
}
