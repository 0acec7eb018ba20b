/**
 * ListObjects (V1) and ListObjectsV2 of the local S3 (local/s3.ts), in place of s3rver 3.7.1's list
 * controller, which is not S3's where folders and pages are concerned:
 * - its filesystem store does not descend into a directory that lies below a common prefix, so a
 *   folder that holds only sub-folders (`db/items.lance/` below `db/`) gives no CommonPrefix:
 *   `aws s3 ls s3://bucket/` prints nothing and lancedb's `tableNames()` returns `[]`;
 * - it walks files in directory order, which is not key order (the folder `a/` comes before the key
 *   `a-b`, the file `a.B._S3rver_object` before `a._S3rver_object`), and stops at MaxKeys: pages
 *   come out of order and the next page skips keys;
 * - CommonPrefixes count neither towards MaxKeys and KeyCount nor for where the next page starts,
 *   and a truncated page without keys is an internal error;
 * - its V2 continuation token is DES-encrypted, and OpenSSL 3 (Node >= 17) has no DES by default:
 *   every truncated V2 page is a 500.
 *
 * Here the keys below the prefix are collected, rolled up at the delimiter, and keys and prefixes
 * are sorted together in UTF-8 byte order and paged through like S3 does. s3rver still routes,
 * authenticates and checks the bucket (all before the controller) and renders the XML.
 * Keys are read back from s3rver's file names as on POSIX systems (s3rver escapes some on Windows).
 * @module
 */
/// <reference path="./s3rver.d.ts" />
import type { Dirent } from "node:fs";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import type S3rver from "s3rver";
import bucketController from "s3rver/lib/controllers/bucket.js";
import S3Error from "s3rver/lib/models/error.js";

/** s3rver keeps object `k` in the file `k._S3rver_object` (lib/stores/filesystem.js). */
const OBJECT_SUFFIX = "._S3rver_object";
/** s3rver's dummy account (lib/models/account.js), the owner of every object. */
const OWNER = { ID: "123456789000", DisplayName: "S3rver" };
/** S3 answers at most 1000 keys and prefixes per page, whatever MaxKeys asks. */
const PAGE_LIMIT = 1000;

/** The s3rver internals this module relies on that are missing (none in s3rver 3.7.1). */
export function missingListingInternals(): string[] {
  return [
    typeof bucketController?.getBucket !== "function" && "controllers/bucket.getBucket",
    typeof S3Error !== "function" && "models/error",
  ].filter((name): name is string => typeof name === "string");
}

/**
 * Makes s3rver answer list requests with {@link listObjects}. s3rver's router calls the controller
 * module's `getBucket` on every request, so this holds for every s3rver in the process.
 */
export function useS3Listing(): void {
  bucketController.getBucket = listObjects;
}

interface ListRequest {
  readonly version: 1 | 2;
  readonly prefix: string;
  readonly delimiter: string;
  /** Marker (V1) or StartAfter / continuation token (V2): entries up to this one are left out. */
  readonly after: string;
  readonly maxKeys: number;
}

interface ListPage {
  readonly keys: readonly string[];
  readonly commonPrefixes: readonly string[];
  readonly isTruncated: boolean;
  /** The last key or prefix of the page: where the next page starts. */
  readonly last: string | undefined;
}

/** The list controller, for `GET /:bucket` without a subresource. */
async function listObjects(ctx: S3rver.Context): Promise<void> {
  const bucket = ctx.params.bucket ?? "";
  const param = (name: string) => queryParameter(ctx.query, name);
  const request = listRequest(ctx.query, bucket);
  const page = await listPage(join(ctx.store.rootDirectory, bucket), request);
  const fetchOwner = request.version === 1 || param("fetch-owner") === "true";
  const contents = await describeObjects(ctx.store, bucket, page.keys, fetchOwner);
  const token = param("continuation-token") || undefined;
  const next = page.isTruncated ? page.last : undefined;
  ctx.body = {
    ListBucketResult: {
      "@": { xmlns: "http://doc.s3.amazonaws.com/2006-03-01/" },
      Name: bucket,
      Prefix: request.prefix,
      ...(request.version === 2
        ? {
            StartAfter: token === undefined ? param("start-after") : undefined,
            ContinuationToken: token,
            NextContinuationToken: next === undefined ? undefined : continuationToken(bucket, next),
            KeyCount: contents.length + page.commonPrefixes.length,
          }
        : {
            Marker: request.after,
            // As S3: only with a delimiter; without one, clients go on after the last key.
            NextMarker: request.delimiter === "" ? undefined : next,
          }),
      // S3 echoes MaxKeys as asked.
      MaxKeys: param("max-keys") ?? PAGE_LIMIT,
      Delimiter: request.delimiter || undefined,
      IsTruncated: page.isTruncated,
      Contents: contents,
      CommonPrefixes: page.commonPrefixes.map((prefix) => ({ Prefix: prefix })),
    },
  };
}

/** The list request's parameters, checked as s3rver's own controller checks them. */
function listRequest(query: S3rver.Context["query"], bucket: string): ListRequest {
  const param = (name: string) => queryParameter(query, name);
  const common = {
    prefix: param("prefix") ?? "",
    delimiter: param("delimiter") ?? "",
    maxKeys: maxKeys(param("max-keys")),
  };
  if (param("list-type") === "2") {
    if ("marker" in query) {
      throw invalidArgument("marker", "Marker unsupported with REST.GET.BUCKET in list-type=2");
    }
    const token = param("continuation-token");
    const after = token ? continueAfter(token, bucket) : (param("start-after") ?? "");
    return { version: 2, after, ...common };
  }
  if ("continuation-token" in query) {
    throw invalidArgument(
      "continuation-token",
      "continuation-token only supported in REST.GET.BUCKET with list-type=2",
    );
  }
  if ("start-after" in query) {
    // S3's message (camelCase included).
    throw invalidArgument(
      "start-after",
      "startAfter only supported in REST.GET.BUCKET with list-type=2",
    );
  }
  return { version: 1, after: param("marker") ?? "", ...common };
}

function queryParameter(query: S3rver.Context["query"], name: string): string | undefined {
  const value = query[name];
  return Array.isArray(value) ? value[0] : value;
}

function maxKeys(text: string | undefined): number {
  if (text === undefined) return PAGE_LIMIT;
  if (!/^-?\d+$/.test(text)) {
    throw invalidArgument("max-keys", "Provided max-keys not an integer or within integer range");
  }
  const value = Number(text);
  if (value < 0 || value > 2147483647) {
    throw invalidArgument(
      "maxKeys",
      "Argument maxKeys must be an integer between 0 and 2147483647",
    );
  }
  return Math.min(value, PAGE_LIMIT);
}

function invalidArgument(name: string, message: string): Error {
  return new S3Error("InvalidArgument", message, { ArgumentName: name });
}

/** Opaque to clients like S3's: the bucket and the page's last entry (key or prefix). */
function continuationToken(bucket: string, last: string): string {
  return Buffer.from(`${bucket}/${last}`, "utf8").toString("base64url");
}

/** The entry a token from {@link continuationToken} continues after; 400 for any other token. */
function continueAfter(token: string, bucket: string): string {
  const text = Buffer.from(token, "base64url").toString("utf8");
  const after = text.slice(bucket.length + 1);
  // Decoding is lenient; a token that does not encode back to itself was not ours.
  if (!text.startsWith(`${bucket}/`) || continuationToken(bucket, after) !== token) {
    throw invalidArgument("continuation-token", "The continuation token provided is incorrect");
  }
  return after;
}

// ---------------------------------------------------------------------------------------------
// The listing

/** One page of the bucket's keys and common prefixes, in UTF-8 byte order after `after`. */
async function listPage(bucketPath: string, request: ListRequest): Promise<ListPage> {
  const entries = new Map<string, boolean>(); // key or common prefix -> is a common prefix
  await collect(bucketPath, "", request, entries);
  const after = Buffer.from(request.after, "utf8");
  const sorted = [...entries.keys()]
    .map((entry) => ({ entry, bytes: Buffer.from(entry, "utf8") }))
    .filter(({ bytes }) => Buffer.compare(bytes, after) > 0)
    .sort((a, b) => Buffer.compare(a.bytes, b.bytes))
    .map(({ entry }) => entry);
  const page = sorted.slice(0, request.maxKeys);
  return {
    keys: page.filter((entry) => entries.get(entry) === false),
    commonPrefixes: page.filter((entry) => entries.get(entry) === true),
    isTruncated: page.length > 0 && sorted.length > page.length,
    last: page.at(-1),
  };
}

/**
 * Adds the keys with the request's prefix found below `directory` (which holds the keys that
 * start with `directoryKey`), each rolled up to its common prefix where it has one. A directory
 * whose own key already rolls up is only checked to hold some object: all keys below it share
 * that common prefix, since the delimiter's first occurrence after the prefix lies in its key.
 */
async function collect(
  directory: string,
  directoryKey: string,
  request: ListRequest,
  entries: Map<string, boolean>,
): Promise<void> {
  const { prefix } = request;
  for (const file of await readDirectory(directory)) {
    const path = join(directory, file.name);
    if (file.isDirectory()) {
      const key = `${directoryKey}${file.name}/`;
      if (!key.startsWith(prefix)) {
        // Keys below `key` can still have the prefix only if `key` begins the prefix.
        if (prefix.startsWith(key)) await collect(path, key, request, entries);
        continue;
      }
      const rolledUp = commonPrefix(key, request);
      if (rolledUp === undefined) await collect(path, key, request, entries);
      else if (!entries.has(rolledUp) && (await holdsObject(path))) entries.set(rolledUp, true);
    } else if (file.name.endsWith(OBJECT_SUFFIX)) {
      // Other files are s3rver's metadata and checksums, or writes in progress (local/s3.ts).
      const key = directoryKey + file.name.slice(0, -OBJECT_SUFFIX.length);
      if (!key.startsWith(prefix)) continue;
      const rolledUp = commonPrefix(key, request);
      entries.set(rolledUp ?? key, rolledUp !== undefined);
    }
  }
}

/** S3's roll-up: the key up to the delimiter's first occurrence after the prefix, if any. */
function commonPrefix(key: string, { prefix, delimiter }: ListRequest): string | undefined {
  if (delimiter === "") return undefined;
  const at = key.indexOf(delimiter, prefix.length);
  return at === -1 ? undefined : key.slice(0, at + delimiter.length);
}

/** Whether an object lies anywhere below `directory` (s3rver leaves emptied directories behind). */
async function holdsObject(directory: string): Promise<boolean> {
  const files = await readDirectory(directory);
  if (files.some((file) => !file.isDirectory() && file.name.endsWith(OBJECT_SUFFIX))) return true;
  for (const file of files) {
    if (file.isDirectory() && (await holdsObject(join(directory, file.name)))) return true;
  }
  return false;
}

/** A directory's entries; none when a concurrent DELETE has just removed it. */
async function readDirectory(directory: string): Promise<Dirent[]> {
  try {
    return await readdir(directory, { withFileTypes: true });
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    if (code === "ENOENT" || code === "ENOTDIR") return [];
    throw error;
  }
}

/** The page's `Contents`; a key deleted since it was listed is left out. */
async function describeObjects(
  store: S3rver.FilesystemStore,
  bucket: string,
  keys: readonly string[],
  fetchOwner: boolean,
): Promise<object[]> {
  const described = await Promise.all(
    keys.map(async (key) => {
      try {
        const metadata = await store.getMetadata(bucket, key);
        return {
          Key: key,
          LastModified: new Date(metadata["last-modified"]).toISOString(),
          ETag: metadata.etag,
          Size: Number(metadata["content-length"]),
          Owner: fetchOwner ? OWNER : undefined,
          StorageClass: "STANDARD",
        };
      } catch (error) {
        if ((error as { code?: unknown } | null)?.code === "ENOENT") return undefined;
        throw error;
      }
    }),
  );
  return described.filter((object) => object !== undefined);
}
