/**
 * Single objects in a local directory or on S3: the few small files lance-fanout parses itself
 * (manifests) and the index files a view needs a copy of. Lance reads and writes the data itself.
 * @module
 */
import { copyFile, mkdir, readFile, stat } from "node:fs/promises";
import { dirname } from "node:path";
import {
  CopyObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  NoSuchKey,
  S3Client,
} from "@aws-sdk/client-s3";
import type { S3Config } from "./config.js";
import { splitS3Uri } from "./dataset.js";

export interface ObjectStore {
  /** The object's bytes, or `undefined` when it does not exist. */
  read(uri: string): Promise<Uint8Array | undefined>;
  /**
   * Copies `from` to `to` unless `to` exists (same store: S3 copies server-side).
   * @returns false when `from` does not exist.
   */
  copyIfMissing(from: string, to: string): Promise<boolean>;
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
    async copyIfMissing(from, to) {
      if (!to.startsWith("s3://")) {
        if (await missingAsUndefined(stat(to))) return true;
        await mkdir(dirname(to), { recursive: true });
        return (await missingAsUndefined(copyFile(from, to).then(() => true))) ?? false;
      }
      const source = splitS3Uri(from);
      const target = splitS3Uri(to);
      const head = new HeadObjectCommand({ Bucket: target.bucket, Key: target.key });
      if (await missingAsUndefined(s3Client().send(head))) return true;
      const copy = new CopyObjectCommand({
        Bucket: target.bucket,
        Key: target.key,
        CopySource: `${source.bucket}/${source.key.split("/").map(encodeURIComponent).join("/")}`,
      });
      return (
        (await missingAsUndefined(
          s3Client()
            .send(copy)
            .then(() => true),
        )) ?? false
      );
    },
  };
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
