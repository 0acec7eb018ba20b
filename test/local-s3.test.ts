import { mkdtemp, rm } from "node:fs/promises";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  CompleteMultipartUploadCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import * as lancedb from "@lancedb/lancedb";
import S3rver from "s3rver";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalS3, startLocalS3 } from "../local/s3.js";

// Every AWS code path stays on loopback (test/support/env.ts sets the rest).
process.env.AWS_EC2_METADATA_DISABLED = "true";

const BUCKET = "fanout-test";
const DIM = 16;

const directories: string[] = [];
async function tempDirectory(): Promise<string> {
  const directory = await mkdtemp(join(tmpdir(), "local-s3-test-"));
  directories.push(directory);
  return directory;
}

afterAll(async () => {
  await Promise.all(directories.map((d) => rm(d, { recursive: true, force: true })));
});

function clientFor(s3: LocalS3): S3Client {
  return new S3Client({
    endpoint: s3.endpoint,
    forcePathStyle: true,
    region: "us-east-1",
    credentials: s3.credentials,
    maxAttempts: 1,
  });
}

/** The HTTP status and S3 error code a rejected command carries. */
async function failure(promise: Promise<unknown>): Promise<{ status?: number; code: string }> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof S3ServiceException) {
      return { status: error.$metadata.httpStatusCode, code: error.name };
    }
    throw error;
  }
  throw new Error("expected the request to fail");
}

function vector(seed: number): number[] {
  return Array.from({ length: DIM }, (_, i) => Math.sin(seed * 31 + i));
}

describe("startLocalS3", () => {
  let s3: LocalS3;
  let client: S3Client;

  beforeAll(async () => {
    s3 = await startLocalS3({ directory: await tempDirectory(), buckets: [BUCKET] });
    client = clientFor(s3);
  });

  afterAll(async () => {
    client?.destroy();
    await s3?.stop();
  });

  it("exposes an endpoint on 127.0.0.1, the picked port, and lancedb storage options", () => {
    expect(s3.port).toBeGreaterThan(0);
    expect(s3.endpoint).toBe(`http://127.0.0.1:${s3.port}`);
    expect(s3.credentials).toEqual({ accessKeyId: "S3RVER", secretAccessKey: "S3RVER" });
    expect(s3.storageOptions()).toEqual({
      aws_endpoint: s3.endpoint,
      allow_http: "true",
      aws_access_key_id: "S3RVER",
      aws_secret_access_key: "S3RVER",
      aws_region: "us-east-1",
    });
  });

  it("puts, gets and lists objects through the AWS SDK", async () => {
    const put = await client.send(
      new PutObjectCommand({ Bucket: BUCKET, Key: "plain/a.txt", Body: "hello" }),
    );
    await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: "plain/b.txt", Body: "world" }));
    const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: "plain/a.txt" }));
    expect(await got.Body?.transformToString()).toBe("hello");
    expect(got.ETag).toBe(put.ETag);
    const listed = await client.send(
      new ListObjectsV2Command({ Bucket: BUCKET, Prefix: "plain/" }),
    );
    expect(listed.Contents?.map((o) => o.Key)).toEqual(["plain/a.txt", "plain/b.txt"]);
    expect(listed.Contents?.map((o) => o.Size)).toEqual([5, 5]);
  });

  it("answers If-None-Match: * with 412 PreconditionFailed when the key exists", async () => {
    const key = "conditional/create";
    await client.send(
      new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: "first", IfNoneMatch: "*" }),
    );
    expect(
      await failure(
        client.send(
          new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: "second", IfNoneMatch: "*" }),
        ),
      ),
    ).toEqual({ status: 412, code: "PreconditionFailed" });
    const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
    expect(await got.Body?.transformToString()).toBe("first");
  });

  it("answers If-Match with a stale ETag with 412 and writes with the current one", async () => {
    const key = "conditional/update";
    const first = await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: "v1" }));
    expect(first.ETag).toMatch(/^"[0-9a-f]{32}"$/);
    const wrong = '"0123456789abcdef0123456789abcdef"';
    expect(
      await failure(
        client.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: "v2", IfMatch: wrong })),
      ),
    ).toEqual({ status: 412, code: "PreconditionFailed" });

    const second = await client.send(
      new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: "v2", IfMatch: first.ETag }),
    );
    expect(second.ETag).not.toBe(first.ETag);
    // Quotes are optional in the header.
    const unquoted = second.ETag?.replaceAll('"', "");
    await client.send(
      new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: "v3", IfMatch: unquoted }),
    );
    // The first ETag is stale now.
    expect(
      await failure(
        client.send(
          new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: "v4", IfMatch: first.ETag }),
        ),
      ),
    ).toEqual({ status: 412, code: "PreconditionFailed" });
    const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
    expect(await got.Body?.transformToString()).toBe("v3");

    // Like S3: If-Match on a key that does not exist is 404 NoSuchKey.
    expect(
      await failure(
        client.send(
          new PutObjectCommand({
            Bucket: BUCKET,
            Key: "conditional/absent",
            Body: "x",
            IfMatch: wrong,
          }),
        ),
      ),
    ).toMatchObject({ status: 404 });
  });

  it("lets exactly one of many concurrent If-None-Match: * writers of one key win", async () => {
    const key = "conditional/race";
    const results = await Promise.allSettled(
      Array.from({ length: 16 }, (_, i) =>
        client.send(
          new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: `writer ${i}`, IfNoneMatch: "*" }),
        ),
      ),
    );
    const winners = results.flatMap((r, i) => (r.status === "fulfilled" ? [i] : []));
    expect(winners).toHaveLength(1);
    for (const r of results) {
      if (r.status === "rejected") {
        expect(r.reason).toBeInstanceOf(S3ServiceException);
        expect((r.reason as S3ServiceException).$metadata.httpStatusCode).toBe(412);
      }
    }
    const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
    expect(await got.Body?.transformToString()).toBe(`writer ${winners[0]}`);
  });

  it("completes multipart uploads, conditionally too", async () => {
    const upload = async (key: string, ifNoneMatch?: string) => {
      const { UploadId } = await client.send(
        new CreateMultipartUploadCommand({ Bucket: BUCKET, Key: key }),
      );
      const parts = await Promise.all(
        ["part one|", "part two"].map(async (body, i) => {
          const { ETag } = await client.send(
            new UploadPartCommand({
              Bucket: BUCKET,
              Key: key,
              UploadId,
              PartNumber: i + 1,
              Body: body,
            }),
          );
          return { ETag, PartNumber: i + 1 };
        }),
      );
      return client.send(
        new CompleteMultipartUploadCommand({
          Bucket: BUCKET,
          Key: key,
          UploadId,
          MultipartUpload: { Parts: parts },
          IfNoneMatch: ifNoneMatch,
        }),
      );
    };
    await upload("multipart/a", "*");
    const got = await client.send(new GetObjectCommand({ Bucket: BUCKET, Key: "multipart/a" }));
    expect(await got.Body?.transformToString()).toBe("part one|part two");
    expect(await failure(upload("multipart/a", "*"))).toEqual({
      status: 412,
      code: "PreconditionFailed",
    });
  });

  it("does not show an object before its PUT has completed", async () => {
    const key = "atomic/slow";
    // An unsigned PUT (s3rver accepts anonymous requests) whose body arrives in two halves.
    const half = Buffer.alloc(64 * 1024, 1);
    const put = request({
      host: "127.0.0.1",
      port: s3.port,
      method: "PUT",
      path: `/${BUCKET}/${key}`,
      headers: { "content-length": String(half.length * 2) },
    });
    const response = new Promise<number>((resolve, reject) => {
      put.on("error", reject);
      put.on("response", (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      });
    });
    put.write(half);
    await new Promise((resolve) => setTimeout(resolve, 200));
    // Plain s3rver answers 200 here with the first half only.
    expect(
      await failure(client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key }))),
    ).toMatchObject({ status: 404 });
    const listed = await client.send(
      new ListObjectsV2Command({ Bucket: BUCKET, Prefix: "atomic/" }),
    );
    expect(listed.KeyCount ?? 0).toBe(0);
    put.end(half);
    expect(await response).toBe(200);
    const head = await client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key }));
    expect(head.ContentLength).toBe(half.length * 2);
  });
});

describe("startLocalS3 lifecycle", () => {
  it("listens on 127.0.0.1 only", async () => {
    // Capture the s3rver instance that startLocalS3 runs, to look at its HTTP server.
    const instances: S3rver[] = [];
    const run = S3rver.prototype.run;
    S3rver.prototype.run = function (this: S3rver) {
      instances.push(this);
      return run.call(this);
    };
    let s3: LocalS3 | undefined;
    try {
      s3 = await startLocalS3({ directory: await tempDirectory() });
    } finally {
      S3rver.prototype.run = run;
    }
    try {
      expect(instances).toHaveLength(1);
      const address = instances[0]?.httpServer?.address();
      expect(address).toEqual({ address: "127.0.0.1", family: "IPv4", port: s3.port });
    } finally {
      await s3.stop();
    }
    expect(instances[0]?.httpServer?.listening).toBe(false);
  });

  it("restarts on the same directory with the buckets and objects it had", async () => {
    const directory = await tempDirectory();
    const first = await startLocalS3({ directory, buckets: [BUCKET, "other"] });
    const firstClient = clientFor(first);
    await firstClient.send(
      new PutObjectCommand({ Bucket: BUCKET, Key: "kept", Body: "still here" }),
    );
    firstClient.destroy();
    await first.stop();
    await first.stop(); // idempotent

    const second = await startLocalS3({ directory, buckets: [BUCKET, BUCKET, "other", "third"] });
    const secondClient = clientFor(second);
    try {
      const got = await secondClient.send(new GetObjectCommand({ Bucket: BUCKET, Key: "kept" }));
      expect(await got.Body?.transformToString()).toBe("still here");
      await secondClient.send(new PutObjectCommand({ Bucket: "third", Key: "k", Body: "x" }));
    } finally {
      secondClient.destroy();
      await second.stop();
    }
  });

  it("delays every response by latencyMs", async () => {
    const s3 = await startLocalS3({
      directory: await tempDirectory(),
      buckets: [BUCKET],
      latencyMs: 120,
    });
    const client = clientFor(s3);
    try {
      await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: "k", Body: "x" }));
      const started = performance.now();
      await client.send(new HeadObjectCommand({ Bucket: BUCKET, Key: "k" }));
      expect(performance.now() - started).toBeGreaterThanOrEqual(115);
    } finally {
      client.destroy();
      await s3.stop();
    }
  });

  it("rejects bad options before starting anything", async () => {
    const directory = await tempDirectory();
    await expect(startLocalS3({ directory, port: -1 })).rejects.toThrow(RangeError);
    await expect(startLocalS3({ directory, port: 1.5 })).rejects.toThrow(RangeError);
    await expect(startLocalS3({ directory, latencyMs: Number.NaN })).rejects.toThrow(RangeError);
    await expect(startLocalS3({ directory, buckets: ["../escape"] })).rejects.toThrow(TypeError);
    await expect(startLocalS3({ directory: "" })).rejects.toThrow(TypeError);
  });
});

describe("concurrent lancedb writers through the local S3", () => {
  const WRITERS = 4;
  const BATCHES = 6;
  const ROWS = 5;
  let s3: LocalS3;

  beforeAll(async () => {
    s3 = await startLocalS3({ directory: await tempDirectory(), buckets: [BUCKET] });
  });

  afterAll(async () => {
    await s3?.stop();
  });

  it("lose no rows and commit distinct versions", async () => {
    const uri = `s3://${BUCKET}/db`;
    const storageOptions = s3.storageOptions();
    const setup = await lancedb.connect(uri, { storageOptions });
    const created = await setup.createTable("items", [{ id: 0, writer: -1, vector: vector(0) }]);
    const createdVersion = await created.version();
    created.close();

    // Separate connections, as separate processes would have.
    const tables = await Promise.all(
      Array.from({ length: WRITERS }, async () => {
        const db = await lancedb.connect(uri, { storageOptions });
        return db.openTable("items");
      }),
    );
    const versions = await Promise.all(
      tables.map(async (table, writer) => {
        const committed: number[] = [];
        for (let batch = 0; batch < BATCHES; batch++) {
          const rows = Array.from({ length: ROWS }, (_, row) => {
            const id = 1 + writer * 10_000 + batch * 100 + row;
            return { id, writer, vector: vector(id) };
          });
          committed.push((await table.add(rows)).version);
        }
        return committed;
      }),
    );
    for (const table of tables) table.close();

    const written = 1 + WRITERS * BATCHES * ROWS;
    const check = await (await lancedb.connect(uri, { storageOptions })).openTable("items");
    try {
      const ids = (await check.query().select(["id"]).toArray()).map((r) => Number(r.id));
      expect({ rows: await check.countRows(), distinctIds: new Set(ids).size }).toEqual({
        rows: written,
        distinctIds: written,
      });
      const all = versions.flat();
      expect(new Set(all).size).toBe(WRITERS * BATCHES);
      expect(Math.min(...all)).toBeGreaterThan(createdVersion);
      expect(await check.version()).toBe(createdVersion + WRITERS * BATCHES);
    } finally {
      check.close();
    }
  });
});

/** Keys of every shape that trips a filesystem-backed listing, in no particular order. */
const LISTED_KEYS = [
  "top",
  "a-b", // '-' sorts before '/', so before everything under "a/"
  "a/x",
  "a/y/z",
  "a/y/zz/deep",
  "a/yy",
  "a.B", // s3rver's file "a.B._S3rver_object" sorts before "a._S3rver_object"
  "a",
  "b/1/2/3/4",
  "c/",
  "c/d",
  "n/\uFF21", // UTF-8 EF BC A1: before the emoji, after it in UTF-16 code units
  "n/\u{1F600}",
  "n/\u00E9",
];

interface ListQuery {
  readonly prefix?: string;
  readonly delimiter?: string;
  readonly startAfter?: string;
}

/** S3's listing, written from its documentation: keys and rolled-up prefixes in UTF-8 order. */
function expectedEntries(keys: readonly string[], query: ListQuery): string[] {
  const { prefix = "", delimiter = "", startAfter = "" } = query;
  const entries = new Set<string>();
  for (const key of keys) {
    if (!key.startsWith(prefix)) continue;
    const at = delimiter === "" ? -1 : key.indexOf(delimiter, prefix.length);
    entries.add(at === -1 ? key : key.slice(0, at + delimiter.length));
  }
  const utf8 = (text: string) => Buffer.from(text, "utf8");
  return [...entries]
    .sort((a, b) => Buffer.compare(utf8(a), utf8(b)))
    .filter((entry) => Buffer.compare(utf8(entry), utf8(startAfter)) > 0);
}

interface ListedPage {
  readonly keys: string[];
  readonly prefixes: string[];
  readonly truncated: boolean;
  readonly keyCount?: number;
}

/** Every page of a ListObjectsV2 listing, following NextContinuationToken. */
async function listPagesV2(
  client: S3Client,
  bucket: string,
  query: ListQuery & { readonly maxKeys?: number },
): Promise<ListedPage[]> {
  const pages: ListedPage[] = [];
  let token: string | undefined;
  do {
    const out = await client.send(
      new ListObjectsV2Command({
        Bucket: bucket,
        Prefix: query.prefix,
        Delimiter: query.delimiter,
        StartAfter: token === undefined ? query.startAfter : undefined,
        MaxKeys: query.maxKeys,
        ContinuationToken: token,
      }),
    );
    pages.push({
      keys: (out.Contents ?? []).map((o) => o.Key ?? ""),
      prefixes: (out.CommonPrefixes ?? []).map((p) => p.Prefix ?? ""),
      truncated: out.IsTruncated === true,
      keyCount: out.KeyCount,
    });
    token = out.NextContinuationToken;
    expect(token !== undefined).toBe(out.IsTruncated === true);
  } while (token !== undefined && pages.length <= LISTED_KEYS.length);
  return pages;
}

/** Every page of a ListObjects (V1) listing, following NextMarker (or the last key, as S3 says). */
async function listPagesV1(
  client: S3Client,
  bucket: string,
  query: Omit<ListQuery, "startAfter"> & { readonly marker?: string; readonly maxKeys?: number },
): Promise<ListedPage[]> {
  const pages: ListedPage[] = [];
  let marker = query.marker;
  for (;;) {
    const out = await client.send(
      new ListObjectsCommand({
        Bucket: bucket,
        Prefix: query.prefix,
        Delimiter: query.delimiter,
        Marker: marker,
        MaxKeys: query.maxKeys,
      }),
    );
    const page = {
      keys: (out.Contents ?? []).map((o) => o.Key ?? ""),
      prefixes: (out.CommonPrefixes ?? []).map((p) => p.Prefix ?? ""),
      truncated: out.IsTruncated === true,
    };
    pages.push(page);
    if (!page.truncated || pages.length > LISTED_KEYS.length) return pages;
    // S3 sends NextMarker only with a delimiter; without one the next marker is the last key.
    if (query.delimiter) expect(out.NextMarker).toBeDefined();
    marker = out.NextMarker ?? page.keys.at(-1);
  }
}

/** The entries of each page in S3's order (keys and prefixes of one page interleaved). */
function pageEntries(pages: readonly ListedPage[]): string[][] {
  return pages.map((page) => expectedEntries([...page.keys, ...page.prefixes], {}));
}

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out.length > 0 ? out : [[]];
}

describe("listing the local S3 by folder", () => {
  const LIST_BUCKET = "listing";
  let s3: LocalS3;
  let client: S3Client;

  beforeAll(async () => {
    s3 = await startLocalS3({ directory: await tempDirectory(), buckets: [LIST_BUCKET] });
    client = clientFor(s3);
    for (const key of LISTED_KEYS) {
      await client.send(new PutObjectCommand({ Bucket: LIST_BUCKET, Key: key, Body: key }));
    }
  });

  afterAll(async () => {
    client?.destroy();
    await s3?.stop();
  });

  it("lists the folders and keys at the bucket root with Delimiter /", async () => {
    const [page, ...more] = await listPagesV2(client, LIST_BUCKET, { delimiter: "/" });
    expect(more).toEqual([]);
    expect(page).toEqual({
      keys: ["a", "a-b", "a.B", "top"],
      prefixes: ["a/", "b/", "c/", "n/"],
      truncated: false,
      keyCount: 8,
    });
  });

  it("lists the folders and keys directly under a prefix with Delimiter /", async () => {
    const [page] = await listPagesV2(client, LIST_BUCKET, { prefix: "a/", delimiter: "/" });
    expect(page).toEqual({
      keys: ["a/x", "a/yy"],
      prefixes: ["a/y/"],
      truncated: false,
      keyCount: 3,
    });
    const [nested] = await listPagesV2(client, LIST_BUCKET, { prefix: "a/y/", delimiter: "/" });
    expect(nested).toMatchObject({ keys: ["a/y/z"], prefixes: ["a/y/zz/"] });
    // A folder with only deeper folders in it, and a key ending in the delimiter.
    expect(await listPagesV2(client, LIST_BUCKET, { prefix: "b/", delimiter: "/" })).toEqual([
      { keys: [], prefixes: ["b/1/"], truncated: false, keyCount: 1 },
    ]);
    expect(await listPagesV2(client, LIST_BUCKET, { prefix: "c/", delimiter: "/" })).toEqual([
      { keys: ["c/", "c/d"], prefixes: [], truncated: false, keyCount: 2 },
    ]);
  });

  it("lists in UTF-8 byte order, as S3 does", async () => {
    const [page] = await listPagesV2(client, LIST_BUCKET, { prefix: "n/" });
    expect(page?.keys).toEqual(["n/\u00E9", "n/\uFF21", "n/\u{1F600}"]);
    const [all] = await listPagesV2(client, LIST_BUCKET, {});
    expect(all?.keys).toEqual(expectedEntries(LISTED_KEYS, {}));
  });

  it("pages through keys and prefixes in order with ListObjectsV2 and any MaxKeys", async () => {
    for (const query of [
      { delimiter: "/" },
      { prefix: "a/", delimiter: "/" },
      { prefix: "a" },
      {},
      { delimiter: "/", startAfter: "a-b" },
      { delimiter: "/", startAfter: "a/" }, // a prefix given as StartAfter is not listed again
      { prefix: "a/", delimiter: "/", startAfter: "a/y/z" },
    ]) {
      const expected = expectedEntries(LISTED_KEYS, query);
      for (const maxKeys of [1, 2, 3, 5, 1000]) {
        const pages = await listPagesV2(client, LIST_BUCKET, { ...query, maxKeys });
        const where = JSON.stringify({ ...query, maxKeys });
        expect(pageEntries(pages), where).toEqual(chunks(expected, maxKeys));
        expect(
          pages.map((p) => p.keyCount),
          where,
        ).toEqual(pages.map((p) => p.keys.length + p.prefixes.length));
        expect(
          pages.map((p) => p.truncated),
          where,
        ).toEqual(pages.map((_, i) => i < pages.length - 1));
      }
    }
  });

  it("pages through keys and prefixes in order with ListObjects (V1) and any MaxKeys", async () => {
    for (const query of [
      { delimiter: "/" },
      { prefix: "a/", delimiter: "/" },
      { prefix: "a" },
      {},
      { delimiter: "/", marker: "a/" },
    ]) {
      const expected = expectedEntries(LISTED_KEYS, { ...query, startAfter: query.marker });
      for (const maxKeys of [1, 2, 3, 5, 1000]) {
        const pages = await listPagesV1(client, LIST_BUCKET, { ...query, maxKeys });
        const where = JSON.stringify({ ...query, maxKeys });
        expect(pageEntries(pages), where).toEqual(chunks(expected, maxKeys));
      }
    }
  });

  it("answers bad list parameters with 400 InvalidArgument", async () => {
    for (const bad of [{ ContinuationToken: "not-a-token" }, { MaxKeys: -1 }]) {
      expect(
        await failure(client.send(new ListObjectsV2Command({ Bucket: LIST_BUCKET, ...bad }))),
      ).toEqual({ status: 400, code: "InvalidArgument" });
    }
    // A token of another bucket does not continue this one.
    const other = "other-bucket";
    await client.send(new CreateBucketCommand({ Bucket: other }));
    await client.send(new PutObjectCommand({ Bucket: other, Key: "k1", Body: "x" }));
    await client.send(new PutObjectCommand({ Bucket: other, Key: "k2", Body: "x" }));
    const { NextContinuationToken } = await client.send(
      new ListObjectsV2Command({ Bucket: other, MaxKeys: 1 }),
    );
    expect(NextContinuationToken).toBeDefined();
    expect(
      await failure(
        client.send(
          new ListObjectsV2Command({
            Bucket: LIST_BUCKET,
            ContinuationToken: NextContinuationToken,
          }),
        ),
      ),
    ).toEqual({ status: 400, code: "InvalidArgument" });
  });

  it("lets lancedb list the tables of a database (and not those of a nested one)", async () => {
    const storageOptions = s3.storageOptions();
    const db = await lancedb.connect(`s3://${LIST_BUCKET}/db`, { storageOptions });
    const nested = await lancedb.connect(`s3://${LIST_BUCKET}/db/nested`, { storageOptions });
    try {
      for (const [connection, name] of [
        [db, "alpha"],
        [db, "beta"],
        [nested, "inner"],
      ] as const) {
        (await connection.createTable(name, [{ id: 1, vector: vector(1) }])).close();
      }
      expect(await db.tableNames()).toEqual(["alpha", "beta"]);
      expect(await nested.tableNames()).toEqual(["inner"]);
    } finally {
      db.close();
      nested.close();
    }
  });
});
