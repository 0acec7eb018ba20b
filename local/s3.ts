/**
 * The local S3 of the embedded stack and of the tests: s3rver 3.7.1, in-process, on 127.0.0.1 only.
 *
 * Plain s3rver ignores conditional PUTs (`If-None-Match: *` overwrites), and Lance commits every
 * version with one, so concurrent writers would silently lose commits. A middleware placed first
 * in s3rver's Koa chain makes object writes behave like S3's: writes to one key are serialised,
 * and a failed `If-None-Match` / `If-Match` precondition answers `412 PreconditionFailed`.
 * s3rver also writes objects in place, so a GET during a PUT saw a truncated object; writes here
 * go to a temporary file that is renamed into place (see {@link hardenStore}). s3rver's listing
 * loses folders below a common prefix and pages out of S3's order; local/s3-list.ts replaces it.
 *
 * Relies on s3rver internals (`middleware`, `store`, the filesystem store's methods, the list
 * controller), hence the exact pin of s3rver in package.json; {@link assertInternals} fails fast
 * if they change.
 * @module
 */
/// <reference path="./s3rver.d.ts" />
import { createHash, randomUUID } from "node:crypto";
import { mkdir, open, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { setTimeout as sleep } from "node:timers/promises";
import S3rver from "s3rver";
import { missingListingInternals, useS3Listing } from "./s3-list.js";

export interface LocalS3Options {
  /** Where s3rver keeps buckets and objects; created when missing. Reused on restart. */
  readonly directory: string;
  /** @default 0 = pick a free port */
  readonly port?: number;
  /** Buckets to create at start; buckets that already exist in `directory` are kept. */
  readonly buckets?: readonly string[];
  /** First-byte delay of every request, in ms (see {@link LocalS3.setLatency}). @default 0 */
  readonly latencyMs?: number;
}

export interface LocalS3 {
  /** http://127.0.0.1:PORT */
  readonly endpoint: string;
  readonly port: number;
  readonly credentials: { accessKeyId: string; secretAccessKey: string };
  /** lancedb storageOptions for this server */
  storageOptions(): Record<string, string>;
  /**
   * Fault injection for tests: every request of `fault.methods` whose path (`/bucket/key`)
   * matches `keys` answers `status` (403 as `AccessDenied`, others as `InternalError`) until
   * cleared with `undefined`.
   */
  injectFault(fault: Fault | undefined): void;
  /**
   * Delays every request's first byte by `ms` from now on, as S3's own first-byte latency (tens
   * of ms for a small GET) would; 0 for none.
   * @throws RangeError for a negative or non-finite `ms`.
   */
  setLatency(ms: number): void;
  /** The current first-byte delay, in ms. */
  readonly latencyMs: number;
  /**
   * `METHOD /path?query` of each request answered with the current fault, and for DeleteObjects
   * the keys it asked to delete (` key1 key2`).
   */
  readonly faulted: readonly string[];
  stop(): Promise<void>;
}

export interface Fault {
  readonly keys: RegExp;
  readonly status: number;
  /**
   * HTTP methods, each optionally with the subresource that names an S3 operation:
   * `"POST?delete"` is DeleteObjects. @default ["GET"]
   */
  readonly methods?: readonly string[];
}

const HOST = "127.0.0.1";
/** s3rver's hard-coded dummy account (lib/models/account.js). */
const ACCESS_KEY_ID = "S3RVER";
const SECRET_ACCESS_KEY = "S3RVER";
/** S3's rules for bucket names (also keeps names from escaping `directory`). */
const BUCKET_NAME = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
/** s3rver's `vhost` middleware pattern for the default service endpoint `amazonaws.com`. */
const SERVICE_HOST = /^(?:(.+)\.)?s3(-website)?([-.].+)?\.amazonaws\.com$/;
/** s3rver's upload ids: `crypto.randomBytes(16).toString("hex")`. */
const UPLOAD_ID = /^[0-9a-f]{32}$/;

/**
 * Starts s3rver on 127.0.0.1 (port 0 picks a free port), silent, with `buckets` created, with
 * S3-like conditional writes and optionally a first-byte delay of `latencyMs` on every request.
 */
export async function startLocalS3(options: LocalS3Options): Promise<LocalS3> {
  const { directory, port = 0, buckets = [], latencyMs = 0 } = options;
  if (typeof directory !== "string" || directory.length === 0) {
    throw new TypeError("startLocalS3: directory must be a non-empty path");
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new RangeError(`startLocalS3: port must be an integer in 0..65535, got ${port}`);
  }
  checkLatency(latencyMs);
  for (const name of buckets) {
    if (!BUCKET_NAME.test(name) || name.includes("..")) {
      throw new TypeError(`startLocalS3: invalid bucket name ${JSON.stringify(name)}`);
    }
  }

  await mkdir(directory, { recursive: true });
  const server = new S3rver({
    address: HOST,
    port,
    directory,
    silent: true,
    // Path-style requests only: a virtual-host guess from the Host header would change which
    // object a request names after the conditional-write middleware has looked at it.
    vhostBuckets: false,
    configureBuckets: [...new Set(buckets)].map((name) => ({ name })),
  });
  assertInternals(server);
  hardenStore(server.store);
  useS3Listing();
  // Koa composes `middleware` when `run()` listens, so entries added now run for every request.
  server.middleware.unshift(conditionalWrites(server.store));
  let latency = latencyMs;
  server.middleware.unshift(async (_ctx, next) => {
    if (latency > 0) await sleep(latency);
    await next();
  });
  let fault: Fault | undefined;
  const faulted: string[] = [];
  server.middleware.unshift(async (ctx, next) => {
    if (fault && faultApplies(fault, ctx)) {
      faulted.push(`${ctx.method} ${ctx.url}${await deletedKeys(ctx)}`);
      const code = fault.status === 403 ? "AccessDenied" : "InternalError";
      ctx.status = fault.status;
      ctx.body = `<Error><Code>${code}</Code><Message>injected fault</Message></Error>`;
      return;
    }
    await next();
  });

  const address = await server.run();
  const httpServer = server.httpServer;
  if (httpServer === undefined) {
    throw new Error("startLocalS3: s3rver did not start an HTTP server");
  }
  const boundPort = address.port;
  const endpoint = `http://${HOST}:${boundPort}`;
  const credentials = { accessKeyId: ACCESS_KEY_ID, secretAccessKey: SECRET_ACCESS_KEY };

  let stopped: Promise<void> | undefined;
  return {
    endpoint,
    port: boundPort,
    credentials,
    storageOptions: () => ({
      aws_endpoint: endpoint,
      allow_http: "true",
      aws_access_key_id: ACCESS_KEY_ID,
      aws_secret_access_key: SECRET_ACCESS_KEY,
      aws_region: "us-east-1",
    }),
    injectFault(next) {
      fault = next;
      faulted.length = 0;
    },
    get faulted() {
      return [...faulted];
    },
    setLatency(ms) {
      checkLatency(ms);
      latency = ms;
    },
    get latencyMs() {
      return latency;
    },
    stop() {
      stopped ??= new Promise<void>((resolve, reject) => {
        httpServer.close((error) => (error ? reject(error) : resolve()));
        // Clients keep pooled keep-alive connections open; do not wait for them to go away.
        httpServer.closeAllConnections();
      });
      return stopped;
    },
  };
}

function faultApplies(fault: Fault, ctx: S3rver.Context): boolean {
  const methods = fault.methods ?? ["GET"];
  const applies = methods.some((entry) => {
    const [method, subresource] = entry.split("?");
    return method === ctx.method && (subresource === undefined || subresource in ctx.query);
  });
  return applies && fault.keys.test(ctx.path);
}

/** " key1 key2" of a DeleteObjects request (its body is not read by anyone else: it is refused). */
async function deletedKeys(ctx: S3rver.Context): Promise<string> {
  if (ctx.method !== "POST" || !("delete" in ctx.query)) return "";
  const chunks: Buffer[] = [];
  for await (const chunk of ctx.req) chunks.push(chunk as Buffer);
  const keys = Buffer.concat(chunks)
    .toString("utf8")
    .matchAll(/<Key>([^<]*)<\/Key>/g);
  return [...keys].map((m) => ` ${m[1]}`).join("");
}

function assertInternals(server: S3rver): void {
  const store = server.store as Partial<S3rver.FilesystemStore> | undefined;
  const missing = [
    !Array.isArray(server.middleware) && "middleware",
    typeof store?.existsObject !== "function" && "store.existsObject",
    typeof store?.getMetadata !== "function" && "store.getMetadata",
    typeof store?.getResourcePath !== "function" && "store.getResourcePath",
    typeof store?.putMetadata !== "function" && "store.putMetadata",
    typeof store?.putObject !== "function" && "store.putObject",
    typeof store?.putPart !== "function" && "store.putPart",
    typeof store?.rootDirectory !== "string" && "store.rootDirectory",
    ...missingListingInternals(),
  ].filter(Boolean);
  if (missing.length > 0) {
    throw new Error(
      `startLocalS3: s3rver internals changed (missing ${missing.join(", ")}); s3rver 3.7.1 is required`,
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Conditional writes

type WriteKind = "put" | "complete" | "delete";

interface WriteTarget {
  readonly kind: WriteKind;
  readonly bucket: string;
  readonly key: string;
}

/**
 * Serialises object writes per key and evaluates `If-Match` / `If-None-Match` while the key is
 * locked, so that a check and the write it guards cannot interleave with another write.
 */
function conditionalWrites(store: S3rver.FilesystemStore): S3rver.Middleware {
  const locks = new KeyedMutex();
  return async (ctx, next) => {
    const target = writeTarget(ctx);
    if (target === undefined) return next();
    const release = await locks.acquire(`${target.bucket}/${target.key}`);
    try {
      const failure = await failedPrecondition(store, target, ctx);
      if (failure !== undefined) {
        respondWithError(ctx, failure);
        return;
      }
      await next();
    } finally {
      release();
    }
  };
}

/** Object-level writes: PUT (also copy), DELETE, and POST ?uploadId (complete multipart upload). */
function writeTarget(ctx: S3rver.Context): WriteTarget | undefined {
  let kind: WriteKind;
  const subresources = Object.keys(ctx.query).filter((name) => !isPlainQueryParameter(name));
  if (ctx.method === "PUT" && subresources.length === 0) kind = "put";
  else if (ctx.method === "DELETE" && subresources.length === 0) kind = "delete";
  else if (ctx.method === "POST" && subresources.length === 1 && subresources[0] === "uploadId") {
    kind = "complete";
  } else return undefined;

  let path = ctx.path;
  const vhostBucket = SERVICE_HOST.exec(ctx.hostname)?.[1];
  if (vhostBucket !== undefined) path = `/${vhostBucket}${path}`;
  const match = /^\/([^/]+)\/(.+)$/s.exec(path);
  if (match === null) return undefined;
  // Decoded like @koa/router decodes s3rver's `:bucket` and `:key*` route parameters.
  return { kind, bucket: safeDecode(match[1] ?? ""), key: safeDecode(match[2] ?? "") };
}

/** `?x-id=PutObject` (AWS SDK v3) and presigned-URL parameters do not name a subresource. */
function isPlainQueryParameter(name: string): boolean {
  return name === "x-id" || name.toLowerCase().startsWith("x-amz-");
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

interface S3ErrorResponse {
  readonly status: number;
  readonly code: string;
  readonly message: string;
  readonly detail: Readonly<Record<string, string>>;
}

async function failedPrecondition(
  store: S3rver.FilesystemStore,
  { bucket, key }: WriteTarget,
  ctx: S3rver.Context,
): Promise<S3ErrorResponse | undefined> {
  const ifMatch = ctx.get("if-match").trim();
  const ifNoneMatch = ctx.get("if-none-match").trim();
  if (ifMatch === "" && ifNoneMatch === "") return undefined;
  const preconditionFailed = (condition: string): S3ErrorResponse => ({
    status: 412,
    code: "PreconditionFailed",
    message: "At least one of the pre-conditions you specified did not hold",
    detail: { Condition: condition },
  });

  if (ifMatch !== "") {
    const etag = await storedEtag(store, bucket, key);
    if (etag === undefined) {
      // What S3 answers to a conditional write on a key that does not exist.
      return {
        status: 404,
        code: "NoSuchKey",
        message: "The specified key does not exist.",
        detail: { Key: key },
      };
    }
    if (!matchesEtag(ifMatch, etag)) return preconditionFailed("If-Match");
  }
  if (ifNoneMatch === "*") {
    if (await objectExists(store, bucket, key)) return preconditionFailed("If-None-Match");
  } else if (ifNoneMatch !== "") {
    const etag = await storedEtag(store, bucket, key);
    if (etag !== undefined && matchesEtag(ifNoneMatch, etag)) {
      return preconditionFailed("If-None-Match");
    }
  }
  return undefined;
}

/** Whether a header's comma-separated entity tags contain `etag` (or `*`); quotes and W/ ignored. */
function matchesEtag(header: string, etag: string): boolean {
  const stored = normalizeEtag(etag);
  return header
    .split(",")
    .map(normalizeEtag)
    .some((tag) => tag === "*" || tag === stored);
}

function normalizeEtag(tag: string): string {
  return tag
    .trim()
    .replace(/^W\//, "")
    .replace(/^"(.*)"$/s, "$1");
}

function isMissing(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === "ENOENT" || code === "ENOTDIR";
}

async function objectExists(
  store: S3rver.FilesystemStore,
  bucket: string,
  key: string,
): Promise<boolean> {
  try {
    return await store.existsObject(bucket, key);
  } catch (error) {
    if (isMissing(error)) return false;
    throw error;
  }
}

async function storedEtag(
  store: S3rver.FilesystemStore,
  bucket: string,
  key: string,
): Promise<string | undefined> {
  try {
    return (await store.getMetadata(bucket, key)).etag;
  } catch (error) {
    if (isMissing(error)) return undefined;
    throw error;
  }
}

function respondWithError(ctx: S3rver.Context, error: S3ErrorResponse): void {
  const fields = { Code: error.code, Message: error.message, ...error.detail };
  const body = Object.entries(fields)
    .map(([name, value]) => `<${name}>${escapeXml(value)}</${name}>`)
    .join("");
  ctx.status = error.status;
  ctx.body = `<?xml version="1.0" encoding="UTF-8"?>\n<Error>${body}</Error>`;
  ctx.type = "application/xml";
  ctx.set("x-amz-error-code", error.code);
}

function escapeXml(text: string): string {
  return text.replace(/[<>&"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

/** A promise chain per key; entries are dropped when their chain drains. */
class KeyedMutex {
  readonly #tails = new Map<string, Promise<void>>();

  async acquire(key: string): Promise<() => void> {
    const previous = this.#tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const tail = previous.then(() => held);
    this.#tails.set(key, tail);
    await previous;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      release();
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    };
  }
}

// ---------------------------------------------------------------------------------------------
// Latency injection

function checkLatency(ms: number): void {
  if (!Number.isFinite(ms) || ms < 0) {
    throw new RangeError(`local S3: latency must be a finite number of ms >= 0, got ${ms}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Atomic object writes

/**
 * s3rver's `putObject` streams into the object's file in place: a GET (or LIST) during a PUT sees a
 * truncated object with status 200, and a new object is visible before it is complete. Lance
 * lists `_versions/` and reads the newest manifest, so it could read a half-written one. Here the
 * body goes to a temporary file (not listed: its name does not end in s3rver's object suffix),
 * the ETag and metadata are stored, and only then is the file renamed into place. Parts of
 * multipart uploads are written the same way, so that an upload is complete once acknowledged.
 */
function hardenStore(store: S3rver.FilesystemStore): void {
  store.putObject = async (object) => {
    const objectPath = store.getResourcePath(object.bucket, object.key, "object");
    return writeAtomically(objectPath, object.content, (md5) =>
      store.putMetadata(object.bucket, object.key, object.metadata, md5),
    );
  };
  store.putPart = async (bucket, uploadId, partNumber, content) => {
    const part = Number(partNumber);
    if (!UPLOAD_ID.test(uploadId) || !Number.isInteger(part) || part < 1 || part > 10_000) {
      throw new Error(
        `invalid upload part ${JSON.stringify(uploadId)}/${JSON.stringify(partNumber)}`,
      );
    }
    const partPath = join(store.getResourcePath(bucket, undefined, "uploads"), uploadId, `${part}`);
    return writeAtomically(partPath, content, (md5) => writeFile(`${partPath}.md5`, md5));
  };
}

async function writeAtomically(
  path: string,
  content: Readable | Buffer,
  beforeRename: (md5: string) => Promise<void>,
): Promise<{ size: number; md5: string }> {
  const temporary = `${path}.${randomUUID()}.partial`;
  const file = await openForWriting(temporary);
  try {
    const hash = createHash("md5");
    let size = 0;
    const measure = new Transform({
      transform(chunk: Buffer, _encoding, callback) {
        hash.update(chunk);
        size += chunk.length;
        callback(null, chunk);
      },
    });
    const source = Buffer.isBuffer(content) ? Readable.from([content]) : content;
    await pipeline(source, measure, file.createWriteStream());
    const md5 = hash.digest("hex");
    await beforeRename(md5);
    await rename(temporary, path);
    return { size, md5 };
  } catch (error) {
    await file.close().catch(() => undefined);
    await rm(temporary, { force: true });
    throw error;
  }
}

/** Opens a new file, creating its directory; retries when a concurrent DELETE removed it. */
async function openForWriting(path: string) {
  for (let attempt = 1; ; attempt++) {
    await mkdir(dirname(path), { recursive: true });
    try {
      return await open(path, "wx");
    } catch (error) {
      // s3rver's deleteObject removes directories it leaves empty.
      if (attempt >= 5 || (error as { code?: unknown }).code !== "ENOENT") throw error;
    }
  }
}
