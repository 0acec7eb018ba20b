/**
 * Single objects in a local directory or on S3: the few small files lance-fanout parses itself
 * (manifests) and the index files a view needs a copy of. Lance reads and writes the data itself.
 * @module
 */
import { readdir, readFile, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import {
  DeleteObjectsCommand,
  GetObjectCommand,
  NoSuchKey,
  paginateListObjectsV2,
  S3Client,
} from "@aws-sdk/client-s3";
import type { S3Config } from "./config.js";
import { splitS3Uri } from "./dataset.js";

export interface ObjectStore {
  /** The object's bytes, or `undefined` when it does not exist. */
  read(uri: string): Promise<Uint8Array | undefined>;
  /** Every object under `prefix` (a folder URI ending in "/"), with its size and age. */
  list(prefix: string): Promise<StoredObject[]>;
  /** Deletes the objects (missing ones are fine). Only gc calls it, under the view prefix. */
  remove(uris: readonly string[]): Promise<void>;
}

export interface StoredObject {
  readonly uri: string;
  readonly bytes: number;
  readonly modified: Date;
}

export function createObjectStore(s3: S3Config): ObjectStore {
  let client: S3Client | undefined;
  const s3Client = () => {
    client ??= new S3Client({
      region: s3.region,
      endpoint: s3.endpoint,
      forcePathStyle: Boolean(s3.endpoint),
      credentials:
        s3.accessKeyId && s3.secretAccessKey
          ? {
              accessKeyId: s3.accessKeyId,
              secretAccessKey: s3.secretAccessKey,
              sessionToken: s3.sessionToken,
            }
          : undefined,
    });
    return client;
  };
  return {
    async read(uri) {
      if (!uri.startsWith("s3://")) return missingAsUndefined(readFile(uri));
      const { bucket, key } = splitS3Uri(uri);
      return missingAsUndefined(
        s3Client()
          .send(new GetObjectCommand({ Bucket: bucket, Key: key }))
          .then((out) => out.Body?.transformToByteArray()),
      );
    },
    async list(prefix) {
      if (!prefix.startsWith("s3://")) return listLocal(prefix);
      const { bucket, key } = splitS3Uri(prefix);
      const out: StoredObject[] = [];
      const pages = paginateListObjectsV2({ client: s3Client() }, { Bucket: bucket, Prefix: key });
      for await (const page of pages) {
        for (const o of page.Contents ?? []) {
          out.push({
            uri: `s3://${bucket}/${o.Key}`,
            bytes: o.Size ?? 0,
            modified: o.LastModified ?? new Date(0),
          });
        }
      }
      return out;
    },
    async remove(uris) {
      const local = uris.filter((u) => !u.startsWith("s3://"));
      await Promise.all(local.map((path) => rm(path, { force: true })));
      const byBucket = new Map<string, string[]>();
      for (const { bucket, key } of uris.filter((u) => u.startsWith("s3://")).map(splitS3Uri)) {
        byBucket.set(bucket, [...(byBucket.get(bucket) ?? []), key]);
      }
      for (const [bucket, keys] of byBucket) {
        // DeleteObjects takes at most 1,000 keys.
        for (let i = 0; i < keys.length; i += 1000) {
          const batch = keys.slice(i, i + 1000).map((Key) => ({ Key }));
          const out = await s3Client().send(
            new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: batch, Quiet: true } }),
          );
          if (out.Errors?.length) {
            throw new Error(`deleting from ${bucket} failed: ${out.Errors[0]?.Message}`);
          }
        }
      }
    },
  };
}

async function listLocal(prefix: string): Promise<StoredObject[]> {
  const entries = (await missingAsUndefined(readdir(prefix, { recursive: true }))) ?? [];
  const objects = await Promise.all(
    entries.map(async (entry) => {
      const uri = join(prefix, entry);
      const info = await stat(uri);
      return info.isFile() ? { uri, bytes: info.size, modified: info.mtime } : undefined;
    }),
  );
  return objects.filter((o) => o !== undefined);
}

/** The value, or `undefined` when the object (file or S3 key) does not exist. */
async function missingAsUndefined<T>(work: Promise<T>): Promise<T | undefined> {
  try {
    return await work;
  } catch (err) {
    const { code, name } = err as { code?: string; name?: string };
    if (code === "ENOENT" || err instanceof NoSuchKey || name === "NotFound") return undefined;
    throw err;
  }
}
